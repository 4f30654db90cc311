"""Malformed record batches sent by a raw client to a real broker: each is refused whole with the
error code Kafka answers and an error message saying where, nothing of it is stored (ListOffsets),
and a real client then produces and consumes past it. A seeded fuzz of mutated batches ends with
a partition a real client reads from start to end, every accepted record at a dense offset."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from client_helpers import consume_confluent, consumer_conf
from confluent_kafka.admin import AdminClient, NewTopic

from gregor import Broker
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import ListOffsetsRequest
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch, read_batch_records
from gregor.testing.batches import TS, fields, good_records, mutate, raw_batch, record, seed_batch
from gregor.testing.raw_client import RawClient

GOOD = build_batch([(b"k0", b"before")], base_timestamp=TS)


def _malformed() -> dict[str, tuple[bytes, int]]:
    two = good_records(2)
    return {
        # 40 random bytes where the header says 3 records, under a valid CRC.
        "random records": (raw_batch(random.Random(40).randbytes(40), 3), errors.INVALID_RECORD),
        # A header count of 1 over 2 records: consumers saw offsets [0, 1, 1, 2, 3].
        "count 1, 2 records": (raw_batch(two, 1), errors.INVALID_RECORD),
        "offset deltas 0, 0": (raw_batch(record(fields(0)) * 2, 2), errors.INVALID_RECORD),
        "two batches": (bytes(GOOD) + bytes(GOOD), errors.INVALID_RECORD),
        "control flag": (raw_batch(two, 2, attributes=rb.CONTROL_FLAG), errors.INVALID_RECORD),
        "codec 7": (raw_batch(two, 2, attributes=7), errors.UNSUPPORTED_COMPRESSION_TYPE),
        "gzip flag, plain records": (
            raw_batch(two, 2, attributes=rb.COMPRESSION_GZIP),
            errors.CORRUPT_MESSAGE,
        ),
    }


MALFORMED = _malformed()


class Raw(RawClient):
    def log_end_offset(self, topic: str, partition: int = 0) -> int:
        topics = [
            ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)
                ],
            )
        ]
        body = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=topics)
        [part] = self.call(api_keys.LIST_OFFSETS, 7, body).topics[0].partitions
        assert part.error_code == 0, part
        return int(part.offset)


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(log_level="INFO") as b:
        yield b


@pytest.fixture
def raw(broker: Broker) -> Iterator[Raw]:
    with Raw(broker.bootstrap, client_id="malformed-test") as r:
        yield r


def create(broker: Broker, name: str, **config: str) -> str:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config)], request_timeout=15)[name].result()
    return name


def produce_good(broker: Broker, topic: str, values: list[bytes]) -> None:
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    failed: list[Any] = []
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=lambda e, m: failed.append(e))
    assert producer.flush(15) == 0
    assert failed == [None] * len(values), failed


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_batch_is_refused_whole_and_the_partition_reads_past_it(
    broker: Broker, raw: Raw, name: str
) -> None:
    topic = create(broker, "malformed-" + name.replace(" ", "-").replace(",", ""))
    assert raw.produce(topic, bytes(GOOD)).error_code == 0
    records, code = MALFORMED[name]
    answer = raw.produce(topic, records)
    assert (answer.error_code, answer.base_offset) == (code, -1), answer
    assert f"{topic}-0" in answer.error_message
    assert raw.log_end_offset(topic) == 1  # nothing of it stored
    produce_good(broker, topic, [b"after-1", b"after-2"])
    got = consume_confluent(broker.bootstrap, topic, [0], 3, timeout=20)
    assert [(r.offset, r.value) for r in got] == [(0, b"before"), (1, b"after-1"), (2, b"after-2")]


def test_refusals_say_where(broker: Broker, raw: Raw) -> None:
    topic = create(broker, "malformed-where")
    answer = raw.produce(topic, bytes(raw_batch(good_records(3), 2)))
    assert answer.error_message == (
        f"{topic}-0: batch at position 0, record 2 (byte 27 of its records): "
        "bytes remain after the 2 records declared"
    )
    assert f"produce to {topic}-0 from" in broker.read_log()  # the handler's warning line


def test_a_batch_the_topic_recompresses_is_walked_before_it_is_decoded(
    broker: Broker, raw: Raw
) -> None:
    # Recompression decodes the records header.records_count at a time: without the walk first,
    # a header saying 1 over 2 records was stored as one record, the second silently dropped.
    topic = create(broker, "malformed-recompressed", **{"compression.type": "zstd"})
    answer = raw.produce(topic, bytes(raw_batch(good_records(2), 1)))
    assert answer.error_code == errors.INVALID_RECORD and raw.log_end_offset(topic) == 0
    assert raw.produce(topic, bytes(GOOD)).error_code == 0
    [rec] = consume_confluent(broker.bootstrap, topic, [0], 1, timeout=20)
    assert (rec.offset, rec.value) == (0, b"before")


def test_compacted_topic_refuses_a_keyless_record_among_keyed_ones(
    broker: Broker, raw: Raw
) -> None:
    topic = create(broker, "malformed-compacted", **{"cleanup.policy": "compact"})
    answer = raw.produce(topic, bytes(build_batch([(b"k", b"1"), (None, b"2")])))
    # Kafka's words (KIP-467): the record's index in the batch, and why.
    words = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    assert answer.error_code == errors.INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
        (1, words)
    ]
    assert answer.error_message == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{words}')]"
    )
    assert raw.log_end_offset(topic) == 0


ALLOWED = {
    errors.CORRUPT_MESSAGE,
    errors.INVALID_RECORD,
    errors.UNSUPPORTED_COMPRESSION_TYPE,
    errors.MESSAGE_TOO_LARGE,
    # A header timestamp out of bounds with a valid CRC (a header whose timestamps no record has).
    errors.INVALID_TIMESTAMP,
}


def test_mutated_batches_fuzz_leaves_a_partition_real_clients_read(
    broker: Broker, raw: Raw
) -> None:
    topic = create(broker, "malformed-fuzz")
    rng = random.Random(1201)
    expected: list[bytes | None] = []
    for case in range(400):
        batch = seed_batch(rng) if case % 4 == 0 else mutate(rng, seed_batch(rng))
        answer = raw.produce(topic, bytes(batch))
        if answer.error_code:
            assert answer.error_code in ALLOWED, answer.error_message
            continue
        assert answer.base_offset == len(expected), answer
        expected += [r.value for r in read_batch_records(batch)[1]]
    assert raw.log_end_offset(topic) == len(expected) > 100
    consumer = ck.Consumer(consumer_conf(broker.bootstrap))
    try:
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        got: list[tuple[int, bytes | None]] = []
        while len(got) < len(expected):
            messages = consumer.consume(1000, 10)
            assert messages, f"read {len(got)} of {len(expected)}"
            for m in messages:
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value()))
    finally:
        consumer.close()
    assert got == list(enumerate(expected))
