"""Admin requests that ask for too many partitions are refused at once, as Kafka's controller
refuses them, and create nothing: CreateTopics asking for more than 10,000 partitions in all
(MAX_PARTITIONS_PER_BATCH: "Excessively large number of partitions per request."), or whose
topics would write more than 10,000 metadata records, and CreatePartitions adding more than
10,000 partitions ("Unable to perform excessively large batch operation."), all POLICY_VIOLATION.
Invalid counts answer INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR in Kafka's order.

While such a request is handled, another connection's ApiVersions is answered within 100 ms:
the huge request never holds the event loop (it once took gigabytes and never answered).
Requests go through gregor's raw client (exact counts no real client would send) and through
confluent-kafka's AdminClient.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from gregor import Broker
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import (
    ApiVersionsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
)
from gregor.testing.raw_client import RawClient

INT32_MAX = 2**31 - 1
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."
ANSWER_S = 5.0  # the refusal itself: milliseconds; generous for a loaded machine
PROBE_MS = 100.0


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(log_level="INFO", start_timeout_s=60) as b:
        yield b


def topic_request(*topics: tuple[str, int, int], validate_only: bool = False) -> Any:
    return CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(name=n, num_partitions=p, replication_factor=f)
            for n, p, f in topics
        ],
        timeout_ms=30_000,
        validate_only=validate_only,
    )


def partitions_request(name: str, count: int, validate_only: bool = False) -> Any:
    return CreatePartitionsRequest(
        topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=count, assignments=None)
        ],
        timeout_ms=30_000,
        validate_only=validate_only,
    )


def call_while_probing(
    broker: Broker, key: int, version: int, request: Any
) -> tuple[Any, float, float]:
    """Send `request`, and right after it an ApiVersions on a connection already open: the
    response, the seconds it took, and the ApiVersions round trip in ms."""
    with (
        RawClient(broker.bootstrap, timeout_s=ANSWER_S * 4) as probe,
        RawClient(broker.bootstrap, timeout_s=ANSWER_S * 4) as raw,
    ):
        probe.call(
            api_keys.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="probe", client_software_version="1"),
        )
        start = time.monotonic()
        raw.send(key, version, request)
        sent = time.monotonic()
        probe.call(
            api_keys.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="probe", client_software_version="1"),
        )
        probe_ms = (time.monotonic() - sent) * 1000
        response = raw.recv()
        return response, time.monotonic() - start, probe_ms


def partition_dirs(broker: Broker, topic: str) -> list[str]:
    logs = os.path.join(broker.data_dir, "logs")
    return sorted(d for d in os.listdir(logs) if d.rpartition("-")[0] == topic)


def listed_topics(broker: Broker) -> dict[str, int]:
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=15)
    return {name: len(t.partitions) for name, t in md.topics.items()}


def results(response: Any) -> list[tuple[str, int, str | None]]:
    items = response.topics if hasattr(response, "topics") else response.results
    return [(r.name, r.error_code, r.error_message) for r in items]


def test_validate_only_create_topics_of_int32_max_partitions_is_refused_at_once(
    broker: Broker,
) -> None:
    before = listed_topics(broker)
    response, took_s, probe_ms = call_while_probing(
        broker,
        api_keys.CREATE_TOPICS,
        7,
        topic_request(("huge-vo", INT32_MAX, 1), validate_only=True),
    )
    assert results(response) == [("huge-vo", errors.POLICY_VIOLATION, TOO_MANY_PARTITIONS)]
    assert response.topics[0].num_partitions == -1
    assert took_s < ANSWER_S, f"answered after {took_s:.2f} s"
    assert probe_ms < PROBE_MS, f"ApiVersions meanwhile took {probe_ms:.1f} ms"
    assert listed_topics(broker) == before


def test_create_topics_of_100000_partitions_creates_nothing(broker: Broker) -> None:
    before = listed_topics(broker)
    response, took_s, probe_ms = call_while_probing(
        broker, api_keys.CREATE_TOPICS, 7, topic_request(("huge", 100_000, 1))
    )
    assert results(response) == [("huge", errors.POLICY_VIOLATION, TOO_MANY_PARTITIONS)]
    assert took_s < ANSWER_S, f"answered after {took_s:.2f} s"
    assert probe_ms < PROBE_MS, f"ApiVersions meanwhile took {probe_ms:.1f} ms"
    assert partition_dirs(broker, "huge") == []
    assert listed_topics(broker) == before


def test_the_limit_is_on_the_whole_request_and_refuses_every_topic(broker: Broker) -> None:
    with RawClient(broker.bootstrap, timeout_s=ANSWER_S * 4) as raw:
        # 6,000 + 4,001 > 10,000: both refused, though each alone would pass.
        response = raw.call(
            api_keys.CREATE_TOPICS, 7, topic_request(("split-a", 6000, 1), ("split-b", 4001, 1))
        )
        assert results(response) == [
            ("split-a", errors.POLICY_VIOLATION, TOO_MANY_PARTITIONS),
            ("split-b", errors.POLICY_VIOLATION, TOO_MANY_PARTITIONS),
        ]
        # 10,001 topics of the default count (one each), validate-only: all refused.
        many = [(f"many-{i}", -1, -1) for i in range(10_001)]
        response = raw.call(api_keys.CREATE_TOPICS, 7, topic_request(*many, validate_only=True))
        assert {code for _, code, _ in results(response)} == {errors.POLICY_VIOLATION}
        # 10,000 partitions pass that count, but with the TopicRecord make 10,001 records.
        response = raw.call(
            api_keys.CREATE_TOPICS, 7, topic_request(("edge", 10_000, 1), validate_only=True)
        )
        assert results(response) == [("edge", errors.POLICY_VIOLATION, TOO_MANY_RECORDS)]
        # 9,999 partitions are 10,000 records: within Kafka's bounds.
        response = raw.call(
            api_keys.CREATE_TOPICS, 7, topic_request(("edge", 9_999, 1), validate_only=True)
        )
        assert results(response) == [("edge", errors.NONE, None)]  # null message, as Kafka's
        assert response.topics[0].num_partitions == 9_999
    assert not [t for t in listed_topics(broker) if t.startswith(("split-", "many-", "edge"))]
    assert partition_dirs(broker, "split-a") == partition_dirs(broker, "edge") == []


def test_create_partitions_to_int32_max_is_refused_and_adds_nothing(broker: Broker) -> None:
    with RawClient(broker.bootstrap, timeout_s=ANSWER_S * 4) as raw:
        created = raw.call(api_keys.CREATE_TOPICS, 7, topic_request(("grow", 1, 1)))
        assert created.topics[0].error_code == errors.NONE
    for validate_only in (True, False):
        response, took_s, probe_ms = call_while_probing(
            broker,
            api_keys.CREATE_PARTITIONS,
            3,
            partitions_request("grow", INT32_MAX, validate_only),
        )
        assert results(response) == [("grow", errors.POLICY_VIOLATION, TOO_MANY_RECORDS)]
        assert took_s < ANSWER_S, f"answered after {took_s:.2f} s"
        assert probe_ms < PROBE_MS, f"ApiVersions meanwhile took {probe_ms:.1f} ms"
    assert listed_topics(broker)["grow"] == 1
    assert partition_dirs(broker, "grow") == ["grow-0"]
    with RawClient(broker.bootstrap) as raw:
        for count, message in (
            (1, "Topic already has 1 partition(s)."),
            (-5, "The topic grow currently has 1 partition(s); -5 would not be an increase."),
        ):
            response = raw.call(api_keys.CREATE_PARTITIONS, 3, partitions_request("grow", count))
            assert results(response) == [("grow", errors.INVALID_PARTITIONS, message)]
        # 10,000 new partitions are 10,000 records: checked and accepted (validate-only).
        response = raw.call(
            api_keys.CREATE_PARTITIONS, 3, partitions_request("grow", 10_001, validate_only=True)
        )
        assert results(response) == [("grow", errors.NONE, None)]


def test_invalid_counts_are_refused_in_kafkas_order(broker: Broker) -> None:
    bad_factor = "Replication factor must be larger than 0, or -1 to use the default value."
    bad_count = "Number of partitions was set to an invalid non-positive value."
    cases = [
        (("zero", 0, 1), errors.INVALID_PARTITIONS, bad_count),
        (("negative", -2, 1), errors.INVALID_PARTITIONS, bad_count),
        (("int-min", -(2**31), 1), errors.INVALID_PARTITIONS, bad_count),
        (("factor-zero", 3, 0), errors.INVALID_REPLICATION_FACTOR, bad_factor),
        (("both-bad", 0, 0), errors.INVALID_REPLICATION_FACTOR, bad_factor),  # the factor first
        (("factor-neg", 3, -7), errors.INVALID_REPLICATION_FACTOR, bad_factor),
    ]
    with RawClient(broker.bootstrap) as raw:
        for validate_only in (True, False):
            response = raw.call(
                api_keys.CREATE_TOPICS,
                7,
                topic_request(*(t for t, _, _ in cases), validate_only=validate_only),
            )
            assert results(response) == [(t[0], code, msg) for t, code, msg in cases]
        # A replication factor no cluster of one broker reaches, with the most partitions allowed.
        response = raw.call(api_keys.CREATE_TOPICS, 7, topic_request(("wide", 9_999, 32_767)))
        assert results(response)[0][1] == errors.INVALID_REPLICATION_FACTOR
    assert not {t for t, _, _ in cases} & set(listed_topics(broker))


def _code(future: Any) -> tuple[int, str]:
    with pytest.raises(KafkaException) as ei:
        future.result(30)
    err = ei.value.args[0]
    assert isinstance(err, KafkaError), ei.value
    return int(err.code()), err.str()


def test_confluent_admin_sees_policy_violation(broker: Broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for validate_only in (True, False):
        futures = admin.create_topics(
            [NewTopic("ck-huge", 100_000, 1)], validate_only=validate_only, request_timeout=20
        )
        code, message = _code(futures["ck-huge"])
        assert code == KafkaError.POLICY_VIOLATION and TOO_MANY_PARTITIONS in message
    admin.create_topics([NewTopic("ck-grow", 1, 1)])["ck-grow"].result(30)
    futures = admin.create_partitions([NewPartitions("ck-grow", 100_000)], request_timeout=20)
    code, message = _code(futures["ck-grow"])
    assert code == KafkaError.POLICY_VIOLATION and TOO_MANY_RECORDS in message
    assert listed_topics(broker)["ck-grow"] == 1
    assert "ck-huge" not in listed_topics(broker) and partition_dirs(broker, "ck-huge") == []


def test_a_large_topic_is_hosted_in_steps_and_every_partition_serves(broker: Broker) -> None:
    """A broker creates a new topic's partitions a hundred per turn of its loop (so other
    requests are answered meanwhile; bench/partition_creation_stall.py measures the stall): the
    turns after the first host the rest, every one of 1,000 partitions takes a record."""
    import confluent_kafka as ck

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("wide", 1000, 1)])["wide"].result(30)
    with RawClient(broker.bootstrap) as raw:
        raw.call(
            api_keys.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    delivered: list[int] = []
    for i in range(1000):
        p.produce(
            "wide",
            b"v",
            partition=i,
            on_delivery=lambda err, msg: err is None and delivered.append(msg.partition()),
        )
    assert p.flush(60) == 0
    assert sorted(delivered) == list(range(1000))
    dirs = [d for d in os.listdir(os.path.join(broker.data_dir, "logs")) if d.startswith("wide-")]
    assert len(dirs) == 1000
