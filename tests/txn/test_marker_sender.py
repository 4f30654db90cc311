"""The marker sender (coordinator/txn/markers.py, driven as broker/cores.py wires it) over a
fake network: partitions led here are written in place, the others go to their leader as one
WriteTxnMarkers per broker (several transactions in one request), `done` gets one code per
partition once every broker answered, and the codes say what the shard must do. Retries are the
shard's: driven by a real `TransactionCoordinatorShard`, a marker refused by the old leader goes,
after the backoff, to the partition's new leader."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from gregor.broker.cores import marker_sender
from gregor.coordinator.txn import codes
from gregor.coordinator.txn.records import TxnRecord
from gregor.coordinator.txn.shard import TransactionCoordinatorShard, TxnConfig
from gregor.metadata import records as r
from gregor.metadata.image import EMPTY_IMAGE, MetadataImage
from gregor.protocol import api_keys
from gregor.protocol.messages import WriteTxnMarkersResponse as R
from gregor.runtime.client import DisconnectedError
from gregor.runtime.inter_broker import InterBroker

HERE = 1
NO_ANSWER = object()


def image(leaders: dict[tuple[str, int], int], brokers: Iterable[int] = (1, 2, 3)) -> MetadataImage:
    """Brokers registered with a PLAINTEXT endpoint each (port 9000 + id), and topics whose
    partitions are led as `leaders` says (-1: no leader)."""
    recs: list[Any] = [r.FeatureLevelRecord(name="metadata.version", feature_level=25)]
    for b in brokers:
        recs.append(
            r.RegisterBrokerRecord(
                broker_id=b,
                incarnation_id=uuid.UUID(int=b),
                broker_epoch=b,
                end_points=[
                    r.BrokerEndpoint(
                        name="PLAINTEXT", host="127.0.0.1", port=9000 + b, security_protocol=0
                    )
                ],
                rack=None,
                fenced=False,
                log_dirs=[uuid.UUID(int=9)],
            )
        )
    topics = sorted({t for t, _ in leaders})
    for n, topic in enumerate(topics):
        topic_id = uuid.UUID(int=100 + n)
        recs.append(r.TopicRecord(name=topic, topic_id=topic_id))
        for (t, index), leader in sorted(leaders.items()):
            if t == topic:
                replicas = [leader if leader >= 0 else 2]
                recs.append(
                    r.PartitionRecord(
                        partition_id=index,
                        topic_id=topic_id,
                        replicas=replicas,
                        isr=replicas,
                        leader=leader,
                        leader_epoch=0,
                        partition_epoch=0,
                        directories=[uuid.UUID(int=0)],
                    )
                )
    return EMPTY_IMAGE.replay((rec, i, 1) for i, rec in enumerate(recs))


@dataclass
class Sent:
    node_id: int
    api_key: int
    version: int
    body: Any
    future: asyncio.Future[Any]

    def partitions(self) -> list[tuple[int, str, int]]:
        """(producer id, topic, partition) of every marker in the request, in order."""
        return [
            (m.producer_id, t.name, p)
            for m in self.body.markers
            for t in m.topics
            for p in t.partition_indexes
        ]

    def answer(
        self,
        codes_by: dict[tuple[int, str, int], int] | None = None,
        leave_out: tuple[int, str, int] | None = None,
    ) -> None:
        """Answer every marker NONE, or as `codes_by` says; `leave_out` is missing."""
        codes_by = codes_by or {}
        markers = []
        for m in self.body.markers:
            topics = []
            for t in m.topics:
                parts = [
                    R.WritableTxnMarkerPartitionResult(
                        partition_index=p, error_code=codes_by.get((m.producer_id, t.name, p), 0)
                    )
                    for p in t.partition_indexes
                    if (m.producer_id, t.name, p) != leave_out
                ]
                topics.append(R.WritableTxnMarkerTopicResult(name=t.name, partitions=parts))
            markers.append(R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
        self.future.set_result(R(markers=markers))


class FakeNetwork:
    """The transport: records each request and lets the test answer it (or fail it)."""

    def __init__(self) -> None:
        self.endpoints: dict[int, tuple[str, int]] = {}
        self.sent: list[Sent] = []

    def set_endpoint(self, node_id: int, host: str, port: int) -> None:
        self.endpoints[node_id] = (host, port)

    async def send(
        self, node_id: int, api_key: int, api_version: int, body: Any, timeout_ms: int | None = None
    ) -> Any:
        assert node_id in self.endpoints, f"no endpoint set for node {node_id}"
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.sent.append(Sent(node_id, api_key, api_version, body, fut))
        return await fut

    async def close(self) -> None:
        for s in self.sent:
            if not s.future.done():
                s.future.set_exception(DisconnectedError("closed"))

    def take(self) -> list[Sent]:
        out, self.sent = self.sent, []
        return out


class Setup:
    def __init__(self, leaders: dict[tuple[str, int], int], local_code: int = codes.NONE) -> None:
        self.image = image(leaders)
        self.net = FakeNetwork()
        self.local: list[tuple[str, int, int, int, int, bool]] = []
        self.local_code = local_code
        self.links = InterBroker(HERE, lambda: self.image, self.net)
        self.sender = marker_sender(
            HERE, lambda: self.image, self.write_local, self.links, lambda: 0
        )
        self.answers: list[dict[tuple[str, int], int]] = []

    def write_local(
        self, topic: str, index: int, pid: int, epoch: int, coordinator_epoch: int, committed: bool
    ) -> int:
        self.local.append((topic, index, pid, epoch, coordinator_epoch, committed))
        return self.local_code

    def write(
        self,
        pid: int,
        partitions: list[tuple[str, int]],
        committed: bool = True,
        done: Callable[[dict[tuple[str, int], int]], None] | None = None,
    ) -> None:
        self.sender.write_markers(
            f"tx-{pid}", pid, 3, 7, committed, partitions, done or self.answers.append
        )


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


async def turn() -> None:
    """Let the event loop run what is ready (the flush, the sends, their answers)."""
    for _ in range(5):
        await asyncio.sleep(0)


LEADERS = {("t", 0): 1, ("t", 1): 2, ("t", 2): 3, ("u", 0): 2, ("u", 1): 1}


def test_local_partitions_are_written_in_place_and_answered_at_once() -> None:
    s = Setup(LEADERS)
    s.write(10, [("t", 0), ("u", 1)], committed=False)  # no loop needed: nothing leaves
    assert s.local == [("t", 0, 10, 3, 7, False), ("u", 1, 10, 3, 7, False)]
    assert s.answers == [{("t", 0): codes.NONE, ("u", 1): codes.NONE}]


def test_one_request_per_broker_with_every_transaction_queued_for_it() -> None:
    async def go() -> None:
        s = Setup(LEADERS)
        s.write(10, [("t", 0), ("t", 1), ("t", 2), ("u", 0)])
        s.write(11, [("u", 0), ("t", 2)], committed=False)
        assert s.answers == []  # the local part is written, the rest owed
        assert s.local == [("t", 0, 10, 3, 7, True)]
        await turn()
        sent = {x.node_id: x for x in s.net.take()}
        assert sorted(sent) == [2, 3]
        assert {x.api_key for x in sent.values()} == {api_keys.WRITE_TXN_MARKERS}
        assert s.net.endpoints == {2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}
        assert sent[2].partitions() == [(10, "t", 1), (10, "u", 0), (11, "u", 0)]
        assert sent[3].partitions() == [(10, "t", 2), (11, "t", 2)]
        m = sent[2].body.markers[1]
        assert (m.producer_epoch, m.coordinator_epoch, m.transaction_result) == (3, 7, False)
        sent[2].answer()
        await turn()
        assert s.answers == []  # broker 3 has not answered yet
        sent[3].answer({(11, "t", 2): codes.INVALID_PRODUCER_EPOCH})
        await turn()
        assert s.answers == [
            {("t", 0): 0, ("t", 1): 0, ("t", 2): 0, ("u", 0): 0},
            {("u", 0): 0, ("t", 2): codes.INVALID_PRODUCER_EPOCH},  # the shard gives up on it
        ]

    run(go)


def test_one_producer_id_twice_for_a_broker_goes_in_two_requests() -> None:
    async def go() -> None:
        s = Setup(LEADERS)
        s.write(10, [("t", 1)])
        s.write(10, [("u", 0)], committed=False)
        await turn()
        sent = s.net.take()
        assert [x.partitions() for x in sent] == [[(10, "t", 1)], [(10, "u", 0)]]

    run(go)


def test_deleted_partitions_are_done_and_leaderless_ones_retried_without_a_request() -> None:
    async def go() -> None:
        s = Setup({**LEADERS, ("v", 0): -1, ("w", 0): 4})  # w-0's leader is not registered
        s.write(10, [("gone", 0), ("t", 5), ("v", 0), ("w", 0)])
        assert s.answers == [
            {
                ("gone", 0): codes.UNKNOWN_TOPIC_OR_PARTITION,  # the shard counts it done
                ("t", 5): codes.UNKNOWN_TOPIC_OR_PARTITION,
                ("v", 0): codes.NOT_LEADER_OR_FOLLOWER,
                ("w", 0): codes.NOT_LEADER_OR_FOLLOWER,
            }
        ]
        await turn()
        assert s.net.sent == []

    run(go)


def test_a_failed_request_is_a_network_error_for_its_partitions_only() -> None:
    async def go() -> None:
        s = Setup(LEADERS)
        s.write(10, [("t", 1), ("t", 2)])
        await turn()
        sent = {x.node_id: x for x in s.net.take()}
        sent[2].future.set_exception(DisconnectedError("connection refused"))
        sent[3].answer()
        await turn()
        assert s.answers == [{("t", 1): codes.NETWORK_EXCEPTION, ("t", 2): codes.NONE}]

    run(go)


@pytest.mark.parametrize(
    ("answered", "seen"),
    [
        (
            codes.UNKNOWN_TOPIC_OR_PARTITION,
            codes.NOT_LEADER_OR_FOLLOWER,
        ),  # still in the image: moving
        (codes.COORDINATOR_LOAD_IN_PROGRESS, codes.NOT_LEADER_OR_FOLLOWER),
        (codes.NOT_COORDINATOR, codes.NOT_LEADER_OR_FOLLOWER),
        (codes.NOT_ENOUGH_REPLICAS, codes.NOT_ENOUGH_REPLICAS),
        (codes.REQUEST_TIMED_OUT, codes.REQUEST_TIMED_OUT),
        (codes.TRANSACTION_COORDINATOR_FENCED, codes.TRANSACTION_COORDINATOR_FENCED),
        (codes.INVALID_PRODUCER_EPOCH, codes.INVALID_PRODUCER_EPOCH),
        (NO_ANSWER, codes.UNKNOWN_SERVER_ERROR),
    ],
    ids=[
        "unknown-partition",
        "loading",
        "not-coordinator",
        "not-enough-replicas",
        "timed-out",
        "coordinator-fenced",
        "producer-fenced",
        "left-out",
    ],
)
def test_answer_codes_as_the_shard_sees_them(answered: Any, seen: int) -> None:
    async def go() -> None:
        s = Setup(LEADERS)
        s.write(10, [("t", 1), ("u", 0)])
        await turn()
        [sent] = s.net.take()
        if answered is NO_ANSWER:
            sent.answer(leave_out=(10, "t", 1))
        else:
            sent.answer({(10, "t", 1): answered})
        await turn()
        assert s.answers == [{("t", 1): seen, ("u", 0): codes.NONE}]

    run(go)


def test_unknown_partition_answers_for_a_topic_deleted_meanwhile_are_done() -> None:
    async def go() -> None:
        s = Setup(LEADERS)
        s.write(10, [("t", 1), ("u", 0)])
        await turn()
        [sent] = s.net.take()
        s.image = image({k: v for k, v in LEADERS.items() if k[0] != "u"})  # u deleted
        sent.answer(
            {
                (10, "t", 1): codes.UNKNOWN_TOPIC_OR_PARTITION,
                (10, "u", 0): codes.UNKNOWN_TOPIC_OR_PARTITION,
            }
        )
        await turn()
        assert s.answers == [
            {("t", 1): codes.NOT_LEADER_OR_FOLLOWER, ("u", 0): codes.UNKNOWN_TOPIC_OR_PARTITION}
        ]

    run(go)


def test_a_local_partition_not_hosted_yet_is_retried() -> None:
    s = Setup(LEADERS, local_code=codes.UNKNOWN_TOPIC_OR_PARTITION)
    s.write(10, [("t", 0)])
    assert s.answers == [{("t", 0): codes.NOT_LEADER_OR_FOLLOWER}]


def test_the_shard_retries_after_its_backoff_to_the_new_leader() -> None:
    """Driven as the runtime drives it: the sender answers, the shard retries once per answer
    (one request per retry, none from the sender itself) and completes the transaction."""

    async def go() -> None:
        s = Setup(LEADERS)
        config = TxnConfig(marker_retry_backoff_ms=100)
        shard = TransactionCoordinatorShard(0, config, lambda: 10)
        shard.on_loaded(0)
        written: list[TxnRecord] = []

        def commit(records: list[TxnRecord], now: int) -> None:
            for rec in records:
                written.append(rec)
                shard.replay(rec)
            for request in shard.take_marker_requests():
                s.sender.write_markers(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    0,
                    request.committed,
                    list(request.partitions),
                    lambda errors, req=request: commit(
                        shard.markers_written(req, errors, now), now
                    ),
                )

        records, answer = shard.init_producer_id("tx", 60_000, None, 0)
        commit(records, 0)
        pid, epoch = answer.producer_id, answer.producer_epoch
        commit(shard.add_partitions("tx", pid, epoch, [("t", 0), ("t", 1), ("t", 2)], 0)[0], 0)
        commit(shard.end_txn("tx", pid, epoch, True, 0, 0)[0], 0)
        await turn()
        sent = {x.node_id: x for x in s.net.take()}
        sent[2].answer({(pid, "t", 1): codes.NOT_LEADER_OR_FOLLOWER})  # t-1 moves to broker 3
        sent[3].answer()
        await turn()
        assert shard.pending_markers("tx") == {("t", 1)}
        assert s.net.sent == []  # nothing resent before the shard's backoff
        s.image = image({**LEADERS, ("t", 1): 3})
        commit(shard.poll(50), 50)
        await turn()
        assert s.net.sent == []
        commit(shard.poll(100), 100)
        await turn()
        [retry] = s.net.take()
        assert (retry.node_id, retry.partitions()) == (3, [(pid, "t", 1)])
        retry.answer()
        await turn()
        assert written[-1].value is not None and written[-1].value.state.name == "CompleteCommit"
        assert shard.pending_markers("tx") is None

    run(go)


def test_closing_fails_what_is_in_flight_as_network_errors() -> None:
    async def go() -> None:
        s = Setup(LEADERS)
        s.write(10, [("t", 1), ("t", 2)])
        await turn()
        await s.links.close()
        assert s.answers == [{("t", 1): codes.NETWORK_EXCEPTION, ("t", 2): codes.NETWORK_EXCEPTION}]

    run(go)
