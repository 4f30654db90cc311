"""The produce path's transaction check (gregor/broker/txn_verifier.py) over a fake network: the
coordinator here answers at once; one on another broker is asked with AddPartitionsToTxn v5
verify_only, one request per coordinator broker per turn of the event loop, and its answers are
mapped as Kafka's produce path maps them (PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH, retriable
trouble -> NOT_ENOUGH_REPLICAS, TRANSACTION_ABORTABLE only for clients that know it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from test_marker_sender import FakeNetwork, image, turn

from gregor.broker.txn_verifier import TxnVerifier
from gregor.coordinator.group.records import partition_for
from gregor.coordinator.txn import codes
from gregor.protocol import api_keys
from gregor.protocol.messages import AddPartitionsToTxnResponse as R
from gregor.replication.pending import Pending
from gregor.runtime.inter_broker import InterBroker
from gregor.runtime.purgatory_driver import future_of

HERE = 1
TXN = "__transaction_state"
LEADERS = {(TXN, 0): 1, (TXN, 1): 2, (TXN, 2): 3, ("t", 0): 1, ("t", 1): 1}


def tid_on(partition: int, prefix: str = "tx") -> str:
    return next(
        f"{prefix}-{i}" for i in range(1000) if partition_for(f"{prefix}-{i}", 3) == partition
    )


class FakeCoordinator:
    """What the verifier uses of TransactionCoordinator; this node leads partition 0."""

    num_partitions: int | None = 3

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, str, int, bool]] = []

    def partition_for(self, tid: str) -> int:
        return partition_for(tid, 3)

    def is_leader_for(self, tid: str) -> bool:
        return self.partition_for(tid) == 0

    def verify_partition(
        self,
        tid: str,
        pid: int,
        epoch: int,
        topic: str,
        partition: int,
        *,
        abortable_supported: bool = False,
    ) -> int:
        self.calls.append((tid, pid, epoch, topic, partition, abortable_supported))
        return codes.NOT_ENOUGH_REPLICAS if self.num_partitions is None else codes.NONE


class Setup:
    def __init__(self, leaders: dict[tuple[str, int], int] = LEADERS) -> None:
        self.image = image(leaders)
        self.net = FakeNetwork()
        self.coordinator = FakeCoordinator()
        self.verifier = TxnVerifier(
            HERE, self.coordinator, InterBroker(HERE, lambda: self.image, self.net)
        )  # type: ignore[arg-type]


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def answer(
    sent: Any,
    by: dict[tuple[str, str, int], int],
    leave_out: tuple[str, str, int] | None = None,
    error: int = 0,
) -> None:
    results = [
        R.AddPartitionsToTxnResult(
            transactional_id=t.transactional_id,
            topic_results=[
                R.AddPartitionsToTxnTopicResult(
                    name=topic.name,
                    results_by_partition=[
                        R.AddPartitionsToTxnPartitionResult(
                            partition_index=p,
                            partition_error_code=by.get((t.transactional_id, topic.name, p), 0),
                        )
                        for p in topic.partitions
                        if (t.transactional_id, topic.name, p) != leave_out
                    ],
                )
                for topic in t.topics
            ],
        )
        for t in sent.body.transactions
    ]
    sent.future.set_result(R(throttle_time_ms=0, error_code=error, results_by_transaction=results))


async def result(answer: int | Pending) -> int:
    assert isinstance(answer, Pending), "expected to wait for a coordinator elsewhere"
    value: int = await future_of(answer)
    return value


def test_a_coordinator_here_answers_at_once() -> None:
    async def go() -> None:
        s = Setup()
        tid = tid_on(0)
        assert s.verifier.verify(tid, 5, 0, "t", 0, abortable_supported=True) == codes.NONE
        assert s.coordinator.calls == [(tid, 5, 0, "t", 0, True)]
        await turn()
        assert s.net.sent == []

    run(go)


def test_one_request_per_coordinator_broker_and_kafkas_mapping() -> None:
    async def go() -> None:
        s = Setup()
        a, b, c = tid_on(1, "a"), tid_on(1, "b"), tid_on(2, "c")
        waits = {
            "a0": s.verifier.verify(a, 5, 1, "t", 0),
            "a1": s.verifier.verify(a, 5, 1, "t", 1, abortable_supported=True),
            "b0": s.verifier.verify(b, 6, 0, "t", 0),
            "b1": s.verifier.verify(b, 6, 0, "t", 1, abortable_supported=True),
            "c0": s.verifier.verify(c, 7, 2, "t", 0),
        }
        await turn()
        sent = {x.node_id: x for x in s.net.take()}
        assert sorted(sent) == [2, 3]
        assert (sent[2].api_key, sent[2].version) == (api_keys.ADD_PARTITIONS_TO_TXN, 5)
        entries = [
            (
                t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                t.verify_only,
                [(x.name, x.partitions) for x in t.topics],
            )
            for t in sent[2].body.transactions
        ]
        assert entries == [(a, 5, 1, True, [("t", [0, 1])]), (b, 6, 0, True, [("t", [0, 1])])]
        answer(
            sent[2],
            {
                (a, "t", 0): codes.PRODUCER_FENCED,
                (b, "t", 0): codes.TRANSACTION_ABORTABLE,
                (b, "t", 1): codes.TRANSACTION_ABORTABLE,
            },
            leave_out=(a, "t", 1),
        )
        answer(sent[3], {(c, "t", 0): codes.CONCURRENT_TRANSACTIONS})
        got = {k: await result(v) for k, v in waits.items()}
        assert got == {
            "a0": codes.INVALID_PRODUCER_EPOCH,
            "a1": codes.NONE,  # left out of the answer: verified, as Kafka takes it
            "b0": codes.INVALID_TXN_STATE,  # a client before Produce v11
            "b1": codes.TRANSACTION_ABORTABLE,
            "c0": codes.NOT_ENOUGH_REPLICAS,  # retriable: the producer tries again
        }

    run(go)


def test_a_batch_arriving_during_a_check_waits_for_that_check_in_order() -> None:
    async def go() -> None:
        s = Setup()
        tid = tid_on(1)
        first = s.verifier.verify(tid, 5, 0, "t", 0)
        second = s.verifier.verify(tid, 5, 0, "t", 0)
        order: list[str] = []

        async def wait(name: str, answer: Any) -> None:
            await result(answer)
            order.append(name)

        tasks = [
            asyncio.ensure_future(wait("first", first)),
            asyncio.ensure_future(wait("second", second)),
        ]
        await turn()
        [sent] = s.net.take()
        assert [
            (t.transactional_id, [(x.name, x.partitions) for x in t.topics])
            for t in sent.body.transactions
        ] == [(tid, [("t", [0])])]
        answer(sent, {})
        await asyncio.gather(*tasks)
        assert order == ["first", "second"]
        third = s.verifier.verify(tid, 5, 0, "t", 0)  # the check is over: a new one
        await turn()
        assert len(s.net.take()) == 1 and not isinstance(third, int)

    run(go)


def test_failures_and_missing_coordinators_are_retriable_for_the_producer() -> None:
    async def go() -> None:
        s = Setup({**LEADERS, (TXN, 2): -1})
        assert s.verifier.verify(tid_on(2), 5, 0, "t", 0) == codes.NOT_ENOUGH_REPLICAS  # no leader
        down = s.verifier.verify(tid_on(1, "a"), 5, 0, "t", 0)
        await turn()
        [sent] = s.net.take()
        sent.future.set_exception(ConnectionError("refused"))
        assert await result(down) == codes.NOT_ENOUGH_REPLICAS
        loading = s.verifier.verify(tid_on(1, "b"), 5, 0, "t", 0)
        await turn()
        [sent] = s.net.take()
        answer(sent, {}, error=codes.COORDINATOR_LOAD_IN_PROGRESS)
        assert await result(loading) == codes.NOT_ENOUGH_REPLICAS
        s.coordinator.num_partitions = None  # no __transaction_state yet
        assert s.verifier.verify(tid_on(1), 5, 0, "t", 0) == codes.NOT_ENOUGH_REPLICAS

    run(go)


def test_without_a_network_the_local_coordinator_answers() -> None:
    coordinator = FakeCoordinator()
    verifier = TxnVerifier(HERE, coordinator, None)  # type: ignore[arg-type]
    assert verifier.verify(tid_on(2), 5, 0, "t", 0) == codes.NONE
    assert coordinator.calls == [(tid_on(2), 5, 0, "t", 0, False)]
