"""Idempotence on a real broker (gregor.Broker, a child process) over a raw socket: the producer id
comes from InitProducerId on the same connection, Produce requests carry batches built here, and
a replayed request (same producer id, epoch and sequence) is answered with the original offsets
and stored once, also after a clean restart and after SIGKILL. Out-of-order sequences and old
epochs get their errors; DescribeProducers shows the state."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from idem_helpers import idem_batch, plain_batch

from gregor import Broker
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import (
    DescribeProducersRequest,
    InitProducerIdRequest,
    ProduceRequest,
)
from gregor.testing.raw_client import RawClient

OUT_OF_ORDER = errors.BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"].code
INVALID_EPOCH = errors.BY_NAME["INVALID_PRODUCER_EPOCH"].code
FENCED = errors.BY_NAME["PRODUCER_FENCED"].code
PRODUCE_V = 9
INIT_V = 4
TS = 1_700_000_000_000


class Raw(RawClient):
    """One connection, requests encoded with gregor's codec, answered in order."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap, client_id="idem-test", timeout_s=15)

    def init_producer_id(self, pid: int = -1, epoch: int = -1) -> tuple[int, int]:
        r = self.call(
            api_keys.INIT_PRODUCER_ID,
            INIT_V,
            InitProducerIdRequest(
                transactional_id=None,
                transaction_timeout_ms=60000,
                producer_id=pid,
                producer_epoch=epoch,
            ),
        )
        assert r.error_code == 0, r
        return r.producer_id, r.producer_epoch

    def produce_request(self, topic: str, partition: int, records: bytes) -> bytes:
        """A whole Produce request frame, to send (and replay) byte for byte."""
        body = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=10000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[
                        ProduceRequest.PartitionProduceData(index=partition, records=bytes(records))
                    ],
                )
            ],
        )
        return self.encode(api_keys.PRODUCE, PRODUCE_V, body)

    def produce_frame(self, frame: bytes) -> tuple[int, int]:
        """(error code, base offset) of a Produce request sent as these exact bytes."""
        self.send_raw(frame, api_keys.PRODUCE, PRODUCE_V)
        r = self.recv()
        [p] = r.responses[0].partition_responses
        return p.error_code, p.base_offset

    def produce(self, topic: str, partition: int, records: bytes) -> tuple[int, int]:
        return self.produce_frame(self.produce_request(topic, partition, records))

    def describe_producers(self, topic: str, partitions: list[int]) -> list[Any]:
        r = self.call(
            api_keys.DESCRIBE_PRODUCERS,
            0,
            DescribeProducersRequest(
                topics=[
                    DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=partitions)
                ]
            ),
        )
        return r.topics[0].partitions

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(config={"num.partitions": "2"}, log_level="INFO") as b:
        yield b


@pytest.fixture
def topic(broker: Broker, request: pytest.FixtureRequest) -> str:
    name = "idem-" + request.node.name.replace("[", "-").replace("]", "")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 2, 1)], request_timeout=15)[name].result()
    return name


@pytest.fixture
def raw(broker: Broker) -> Iterator[Raw]:
    r = Raw(broker.bootstrap)
    yield r
    r.close()


def stored(bootstrap: str, topic: str, partition: int) -> list[bytes]:
    """Every record value of the partition, read back with confluent-kafka."""
    c = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "idem-reader", "enable.auto.commit": False}
    )
    try:
        lo, hi = c.get_watermark_offsets(ck.TopicPartition(topic, partition), timeout=10)
        c.assign([ck.TopicPartition(topic, partition, lo)])
        out: list[bytes] = []
        while len(out) < hi - lo:
            m = c.poll(5)
            assert m is not None, f"read {len(out)} of {hi - lo} records"
            assert m.error() is None, m.error()
            out.append(m.value())
        return out
    finally:
        c.close()


def test_replayed_produce_request_gets_the_original_offsets(
    broker: Broker, topic: str, raw: Raw
) -> None:
    pid, epoch = raw.init_producer_id()
    raw.produce(topic, 0, plain_batch(2))  # offsets 0-1, no producer
    first = raw.produce_request(topic, 0, idem_batch(pid, epoch, 0, 3, ts=TS, payload=b"a"))
    second = raw.produce_request(topic, 0, idem_batch(pid, epoch, 3, 2, ts=TS, payload=b"b"))
    assert raw.produce_frame(first) == (0, 2)
    assert raw.produce_frame(second) == (0, 5)
    for _ in range(3):
        assert raw.produce_frame(first) == (0, 2)
        assert raw.produce_frame(second) == (0, 5)
    assert stored(broker.bootstrap, topic, 0) == [b"v0", b"v1", b"a0", b"a1", b"a2", b"b0", b"b1"]
    # The same requests on a new connection, after a clean restart and after SIGKILL.
    for i, clean in enumerate((True, False)):
        broker.restart(clean=clean)
        again = Raw(broker.bootstrap)
        try:
            assert again.produce_frame(first) == (0, 2)
            assert again.produce_frame(second) == (0, 5)
            more = again.produce_request(
                topic, 0, idem_batch(pid, epoch, 5 + i, 1, ts=TS, payload=b"cd"[i : i + 1])
            )
            assert again.produce_frame(more) == (0, 7 + i)
            assert again.produce_frame(more) == (0, 7 + i)
        finally:
            again.close()
    assert stored(broker.bootstrap, topic, 0) == [
        b"v0",
        b"v1",
        b"a0",
        b"a1",
        b"a2",
        b"b0",
        b"b1",
        b"c0",
        b"d0",
    ]


def test_out_of_order_sequence(broker: Broker, topic: str, raw: Raw) -> None:
    pid, epoch = raw.init_producer_id()
    assert raw.produce(topic, 1, idem_batch(pid, epoch, 0, 2)) == (0, 0)
    code, _ = raw.produce(topic, 1, idem_batch(pid, epoch, 3))  # 2 is missing
    assert code == OUT_OF_ORDER
    # Two batches in one partition's records are refused before their sequences are looked at
    # (Kafka's ProduceRequest: exactly one batch per partition); a gap between them is the
    # producer state's to refuse (test_idem_state.py).
    code, _ = raw.produce(topic, 1, idem_batch(pid, epoch, 2) + idem_batch(pid, epoch, 4))
    assert code == errors.INVALID_RECORD
    assert raw.produce(topic, 1, idem_batch(pid, epoch, 2)) == (0, 2)
    assert len(stored(broker.bootstrap, topic, 1)) == 3


def test_old_epoch_is_refused_after_a_bump(broker: Broker, topic: str, raw: Raw) -> None:
    pid, epoch = raw.init_producer_id()
    assert raw.produce(topic, 0, idem_batch(pid, epoch, 0, 4)) == (0, 0)
    # Without a transactional id, InitProducerId with the old id and epoch hands out a new id,
    # as Kafka does; the partition still takes a bumped epoch of the old id (a producer whose
    # epoch a transaction coordinator bumped), starting again at sequence 0.
    fresh, fresh_epoch = raw.init_producer_id(pid, epoch)
    assert fresh != pid and fresh_epoch == 0
    bumped = epoch + 1
    code, _ = raw.produce(topic, 0, idem_batch(pid, bumped, 4))  # a new epoch starts at 0
    assert code == OUT_OF_ORDER
    assert raw.produce(topic, 0, idem_batch(pid, bumped, 0)) == (0, 4)
    code, _ = raw.produce(topic, 0, idem_batch(pid, epoch, 4))
    assert code == INVALID_EPOCH
    code, _ = raw.produce(topic, 0, idem_batch(pid, epoch, 0, 4))  # its retries too
    assert code == INVALID_EPOCH
    assert len(stored(broker.bootstrap, topic, 0)) == 5


def test_transactional_batch_without_transactional_id_is_refused(
    broker: Broker, topic: str, raw: Raw
) -> None:
    # Fencing of transactional batches by epoch is tested with transactions (tests/txn);
    # here: such a batch needs the request's transactional id.
    other, e0 = raw.init_producer_id()
    code, _ = raw.produce(topic, 1, idem_batch(other, e0, 0, transactional=True))
    assert code == errors.INVALID_RECORD
    assert len(stored(broker.bootstrap, topic, 1)) == 0


def test_describe_producers(broker: Broker, topic: str, raw: Raw) -> None:
    pid, epoch = raw.init_producer_id()
    raw.produce(topic, 1, idem_batch(pid, epoch, 0, 3, ts=TS + 5))
    raw.produce(topic, 1, idem_batch(pid, epoch, 3, 4, ts=TS + 9))
    [p0, p1, p9] = raw.describe_producers(topic, [0, 1, 9])
    assert (p0.error_code, p0.active_producers) == (0, [])
    assert p1.error_code == 0
    [state] = p1.active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.last_timestamp) == (
        pid,
        epoch,
        6,
        TS + 9,
    )
    assert (state.coordinator_epoch, state.current_txn_start_offset) == (-1, -1)
    assert p9.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION


def test_idle_producers_expire(tmp_path) -> None:
    """producer.id.expiration.ms and its check interval, as broker configs: an idle producer
    disappears from DescribeProducers and may then start at any sequence."""
    config = {
        "producer.id.expiration.ms": "1500",
        "producer.id.expiration.check.interval.ms": "200",
    }
    with Broker(config=config, log_level="INFO") as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("expiring", 1, 1)], request_timeout=15)["expiring"].result()
        raw = Raw(b.bootstrap)
        try:
            pid, epoch = raw.init_producer_id()
            now = int(time.time() * 1000)
            assert raw.produce("expiring", 0, idem_batch(pid, epoch, 0, 2, ts=now)) == (0, 0)
            [part] = raw.describe_producers("expiring", [0])
            assert [s.producer_id for s in part.active_producers] == [pid]
            deadline = time.monotonic() + 15
            while raw.describe_producers("expiring", [0])[0].active_producers:
                assert time.monotonic() < deadline, "the producer never expired"
                time.sleep(0.1)
            assert time.time() * 1000 - now >= 1500
            # Forgotten: unknown again, so any sequence is taken.
            assert raw.produce("expiring", 0, idem_batch(pid, epoch, 500, ts=now)) == (0, 2)
        finally:
            raw.close()
        assert "forgot 1 partition producer state" in b.read_log()
