"""ElectLeaders on one broker, through confluent-kafka's AdminClient: the only replica always
leads, so every election is not needed; unknown partitions are named as such."""

from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def _code(result: object) -> int:
    if result is None:
        return KafkaError.NO_ERROR
    err = result.args[0] if isinstance(result, KafkaException) else result
    assert isinstance(err, KafkaError), result
    return int(err.code())


def test_elect_leaders_on_one_broker(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    for election_type in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        asked = [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 7)]
        results = admin.elect_leaders(election_type, asked).result(30)
        codes = {(tp.topic, tp.partition): _code(err) for tp, err in results.items()}
        assert codes == {
            (topic, 0): KafkaError.ELECTION_NOT_NEEDED,
            (topic, 1): KafkaError.ELECTION_NOT_NEEDED,
            (topic, 7): KafkaError.UNKNOWN_TOPIC_OR_PART,
        }
    # Every partition: those not needed are left out of the answer, as in Kafka.
    everything = admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
    assert not [tp for tp in everything if tp.topic == topic]
