"""Per-record errors (KIP-467) over real sockets: a batch refused for some of its records (no key
in a compacted topic, a timestamp out of message.timestamp.*.max.ms) names each bad record, so
librdkafka fails exactly those with the broker's error and the others of the batch with its
_INVALID_DIFFERENT_RECORD; nothing of the batch is stored. A raw client reads the answer's
record_errors and error_message as Kafka's LogValidator words them (Produce v8+; the delivery
reports of confluent-kafka carry the error code only). librdkafka 2.16 gives every record of a
batch with a single bad record the partition's error, so its tests refuse two or more.
kafka-python reads record_errors too: each bad record fails with the broker's words for it, the
others of the batch with its own "part of a batch" error (aiokafka 0.14 does not read them)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from client_helpers import consume_confluent
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewTopic

from gregor import Broker
from gregor.protocol import errors
from gregor.protocol.records.records import build_batch
from gregor.testing.raw_client import RawClient

DIFFERENT = KafkaError._INVALID_DIFFERENT_RECORD  # librdkafka's "another record failed"


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(log_level="INFO") as b:
        yield b


def create(broker: Broker, name: str, **config: str) -> str:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config)], request_timeout=15)[name].result()
    return name


def produce_one_batch(broker: Broker, topic: str, records: list[dict[str, Any]]) -> list[Any]:
    """Produce `records` (keyword arguments of `produce`) to partition 0 in one batch (a long
    linger, then one flush); the delivery report's error of each, in order."""
    producer = ck.Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 10_000, "retries": 0}
    )
    producer.list_topics(topic, timeout=10)  # the leader known before the records queue up
    reports: list[Any] = [None] * len(records)

    def report(i: int) -> Any:
        return lambda err, msg: reports.__setitem__(i, err)

    for i, kwargs in enumerate(records):
        producer.produce(topic, value=b"v%d" % i, partition=0, on_delivery=report(i), **kwargs)
    assert producer.flush(20) == 0
    return reports


def codes(reports: list[Any]) -> list[int | None]:
    return [None if err is None else err.code() for err in reports]


def assert_nothing_stored(broker: Broker, topic: str) -> None:
    # A record produced after the refused batch is the partition's first (offset 0).
    assert produce_one_batch(broker, topic, [{"key": b"after"}]) == [None]
    [rec] = consume_confluent(broker.bootstrap, topic, [0], 1, timeout=20)
    assert (rec.offset, rec.key) == (0, b"after")


def test_keyless_records_in_a_compacted_topic_fail_alone(broker: Broker) -> None:
    topic = create(broker, "kip467-compacted", **{"cleanup.policy": "compact"})
    keys = [b"k0", None, b"k2", None, b"k4", b"k5"]
    reports = produce_one_batch(broker, topic, [{"key": k} for k in keys])
    bad = KafkaError.INVALID_RECORD
    assert codes(reports) == [DIFFERENT, bad, DIFFERENT, bad, DIFFERENT, DIFFERENT], reports
    assert_nothing_stored(broker, topic)


def test_records_out_of_timestamp_bounds_fail_alone(broker: Broker) -> None:
    topic = create(
        broker,
        "kip467-timestamps",
        **{"message.timestamp.after.max.ms": "60000", "message.timestamp.before.max.ms": "60000"},
    )
    now = int(time.time() * 1000)
    # Records 2 and 5 are before the first record's timestamp: the header does not show them.
    hour = 3_600_000
    stamps = [now, now + 1000, now - hour, now + hour, now, now - hour]
    reports = produce_one_batch(broker, topic, [{"key": b"k", "timestamp": t} for t in stamps])
    # With more than one bad record, librdkafka names each bad one INVALID_RECORD.
    bad = KafkaError.INVALID_RECORD
    assert codes(reports) == [DIFFERENT, DIFFERENT, bad, bad, DIFFERENT, bad], reports
    reports = produce_one_batch(
        broker, topic, [{"key": b"k", "timestamp": t} for t in (now, now - hour, now, now - hour)]
    )
    assert codes(reports) == [DIFFERENT, bad, DIFFERENT, bad], reports
    assert_nothing_stored(broker, topic)


@pytest.mark.parametrize("version", [8, 9, 11])
def test_the_answer_names_each_bad_record(broker: Broker, version: int) -> None:
    topic = create(broker, f"kip467-raw-v{version}", **{"cleanup.policy": "compact"})
    batch = build_batch([(b"k", b"v"), (None, b"v"), (None, b"v"), (None, b"v"), (None, b"v")])
    with RawClient(broker.bootstrap, client_id="kip467") as raw:
        answer = raw.produce(topic, bytes(batch), version=version)
    words = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    assert (answer.error_code, answer.base_offset) == (errors.INVALID_RECORD, -1)
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
        (i, words) for i in (1, 2, 3, 4)
    ]
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{words}')" for i in (1, 2, 3))
    assert answer.error_message == (
        "One or more records have been rejected due to 4 record errors in total, and only "
        f"showing the first three errors at most: [{shown}]"
    )


def test_the_answer_names_each_record_out_of_timestamp_bounds(broker: Broker) -> None:
    topic = create(broker, "kip467-raw-timestamps", **{"message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    stamps = [now, now + 7_200_000, now + 10]
    batch = build_batch([(b"k", b"v")] * 3, timestamps=stamps)
    with RawClient(broker.bootstrap, client_id="kip467") as raw:
        answer = raw.produce(topic, bytes(batch), version=9)
    assert answer.error_code == errors.INVALID_TIMESTAMP
    assert answer.error_message == (
        "One or more records have been rejected due to invalid timestamp"
    )
    [error] = answer.record_errors
    assert error.batch_index == 1
    assert error.batch_index_error_message.startswith(
        f"Timestamp {now + 7_200_000} of message with offset 1 is out of range. "
        "The timestamp should be within ["
    )


def test_kafka_python_fails_each_bad_record_alone(broker: Broker) -> None:
    # kafka-python reads record_errors: a bad record fails with InvalidRecordError carrying the
    # broker's words for it, the others of its batch with a plain KafkaError saying so.
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError
    from kafka.errors import KafkaError as KpError

    topic = create(broker, "kip467-kafka-python", **{"cleanup.policy": "compact"})
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, linger_ms=10_000, retries=0, batch_size=1 << 20
    )
    try:
        keys = [b"k0", None, b"k2", None]
        futures = [producer.send(topic, value=b"v", key=k, partition=0) for k in keys]
        producer.flush(timeout=20)
        failures = [f.exception for f in futures]
    finally:
        producer.close(timeout=5)
    words = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    for i in (1, 3):
        assert isinstance(failures[i], InvalidRecordError), failures
        assert words in str(failures[i])
    for i in (0, 2):
        assert type(failures[i]) is KpError, failures
        assert "part of a batch which had one more more invalid records" in str(failures[i])
    assert_nothing_stored(broker, topic)


def test_kafka_python_names_a_single_late_record(broker: Broker) -> None:
    # One bad record of a batch: kafka-python raises the partition's error class for it
    # (InvalidTimestampError, the broker's words for the record), the others fail as part of
    # the batch; with several it would be InvalidRecordError for each (librdkafka likewise).
    from kafka import KafkaProducer
    from kafka.errors import InvalidTimestampError
    from kafka.errors import KafkaError as KpError

    topic = create(broker, "kip467-kafka-python-ts", **{"message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, linger_ms=10_000, retries=0, batch_size=1 << 20
    )
    try:
        stamps = [now, now + 7_200_000, now + 10]
        futures = [
            producer.send(topic, value=b"v", key=b"k", partition=0, timestamp_ms=t) for t in stamps
        ]
        producer.flush(timeout=20)
        failures = [f.exception for f in futures]
    finally:
        producer.close(timeout=5)
    assert isinstance(failures[1], InvalidTimestampError), failures
    assert f"Timestamp {now + 7_200_000} of message with offset 1 is out of range" in str(
        failures[1]
    )
    for i in (0, 2):
        assert type(failures[i]) is KpError, failures
    assert_nothing_stored(broker, topic)
