"""The produce path's transaction check, sans I/O (coordinator/txn/verifier.py), with no event
loop: the coordinator here answers at once; one on another broker is asked with
AddPartitionsToTxn v5 verify_only, one request per coordinator broker per poll, and its answers
are mapped as Kafka's produce path maps them (PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH,
retriable trouble -> NOT_ENOUGH_REPLICAS, TRANSACTION_ABORTABLE only for clients that know it).
Last, the driver as broker/cores.py wires it, over a fake network: the requests queued in one
turn of the event loop go out together."""

from __future__ import annotations

import asyncio
from typing import Any

from test_marker_sender import FakeNetwork, image, turn

from gregor.broker.cores import txn_verifier
from gregor.coordinator.group.records import partition_for
from gregor.coordinator.txn import codes
from gregor.coordinator.txn.verifier import TxnVerifier
from gregor.metadata.image import MetadataImage
from gregor.protocol import api_keys
from gregor.protocol.messages import AddPartitionsToTxnResponse as R
from gregor.protocol.outbound import Outbound
from gregor.replication.pending import Pending
from gregor.runtime.client import DisconnectedError
from gregor.runtime.inter_broker import InterBroker

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
        self.image: MetadataImage = image(leaders)
        self.registered = {1, 2, 3}
        self.coordinator = FakeCoordinator()
        self.verifier = TxnVerifier(HERE, self.coordinator, lambda: self.image, self.reachable)
        self.woken = 0
        self.verifier.wakeup = self.wake

    def wake(self) -> None:
        self.woken += 1

    def reachable(self, broker: int) -> bool:
        return broker in self.registered

    def poll(self) -> dict[int, Outbound]:
        result = self.verifier.poll(0)
        assert result.next_deadline_ms is None, "verification never waits for a time"
        out = {o.destination: o for o in result.outbound}
        assert len(out) == len(result.outbound), "one request per coordinator broker"
        return out  # type: ignore[return-value]


def response(
    request: Any,
    by: dict[tuple[str, str, int], int],
    leave_out: tuple[str, str, int] | None = None,
    error: int = 0,
) -> Any:
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
        for t in request.transactions
    ]
    return R(throttle_time_ms=0, error_code=error, results_by_transaction=results)


def value(answer: int | Pending) -> int:
    assert isinstance(answer, Pending), "expected to wait for a coordinator elsewhere"
    assert answer.done, "not answered yet"
    code: int = answer.value
    return code


def value_done(answer: int | Pending) -> bool:
    return isinstance(answer, Pending) and answer.done


def test_a_coordinator_here_answers_at_once() -> None:
    s = Setup()
    tid = tid_on(0)
    assert s.verifier.verify(tid, 5, 0, "t", 0, abortable_supported=True) == codes.NONE
    assert s.coordinator.calls == [(tid, 5, 0, "t", 0, True)]
    assert s.poll() == {} and s.woken == 0


def test_one_request_per_coordinator_broker_and_kafkas_mapping() -> None:
    s = Setup()
    a, b, c = tid_on(1, "a"), tid_on(1, "b"), tid_on(2, "c")
    waits = {
        "a0": s.verifier.verify(a, 5, 1, "t", 0),
        "a1": s.verifier.verify(a, 5, 1, "t", 1, abortable_supported=True),
        "b0": s.verifier.verify(b, 6, 0, "t", 0),
        "b1": s.verifier.verify(b, 6, 0, "t", 1, abortable_supported=True),
        "c0": s.verifier.verify(c, 7, 2, "t", 0),
    }
    assert s.woken == 5 and not any(value_done(w) for w in waits.values())
    sent = s.poll()
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
    by = {
        (a, "t", 0): codes.PRODUCER_FENCED,
        (b, "t", 0): codes.TRANSACTION_ABORTABLE,
        (b, "t", 1): codes.TRANSACTION_ABORTABLE,
    }
    s.verifier.on_response(sent[2], response(sent[2].body, by, leave_out=(a, "t", 1)), 0)
    by = {(c, "t", 0): codes.CONCURRENT_TRANSACTIONS}
    s.verifier.on_response(sent[3], response(sent[3].body, by), 0)
    assert {k: value(v) for k, v in waits.items()} == {
        "a0": codes.INVALID_PRODUCER_EPOCH,
        "a1": codes.NONE,  # left out of the answer: verified, as Kafka takes it
        "b0": codes.INVALID_TXN_STATE,  # a client before Produce v11
        "b1": codes.TRANSACTION_ABORTABLE,
        "c0": codes.NOT_ENOUGH_REPLICAS,  # retriable: the producer tries again
    }
    assert s.poll() == {}


def test_a_batch_arriving_during_a_check_waits_for_that_check_in_order() -> None:
    s = Setup()
    tid = tid_on(1)
    first = s.verifier.verify(tid, 5, 0, "t", 0)
    second = s.verifier.verify(tid, 5, 0, "t", 0)
    assert isinstance(first, Pending) and isinstance(second, Pending)
    order: list[str] = []
    first.add_done_callback(lambda _code: order.append("first"))
    second.add_done_callback(lambda _code: order.append("second"))
    [sent] = s.poll().values()
    assert [
        (t.transactional_id, [(x.name, x.partitions) for x in t.topics])
        for t in sent.body.transactions
    ] == [(tid, [("t", [0])])]
    third = s.verifier.verify(tid, 5, 0, "t", 0)  # still in flight: the same check
    assert s.poll() == {}
    s.verifier.on_response(sent, response(sent.body, {}), 0)
    assert order == ["first", "second"] and value(third) == codes.NONE
    fourth = s.verifier.verify(tid, 5, 0, "t", 0)  # the check is over: a new one
    assert len(s.poll()) == 1 and not value_done(fourth)


def test_one_transactional_id_twice_for_one_broker_takes_two_requests() -> None:
    """A response names its entries by transactional id: a new epoch of the same id queued
    beside the old one goes in a request of its own."""
    s = Setup()
    tid = tid_on(1)
    old, new = s.verifier.verify(tid, 5, 0, "t", 0), s.verifier.verify(tid, 5, 1, "t", 0)
    result = s.verifier.poll(0)
    assert [o.destination for o in result.outbound] == [2, 2]
    for out in result.outbound:
        s.verifier.on_response(out, response(out.body, {}), 0)
    assert value(old) == value(new) == codes.NONE


def test_failures_and_missing_coordinators_are_retriable_for_the_producer() -> None:
    s = Setup({**LEADERS, (TXN, 2): -1})
    assert s.verifier.verify(tid_on(2), 5, 0, "t", 0) == codes.NOT_ENOUGH_REPLICAS  # no leader
    s.registered.discard(2)
    assert s.verifier.verify(tid_on(1), 5, 0, "t", 0) == codes.NOT_ENOUGH_REPLICAS  # no endpoint
    s.registered.add(2)
    down = s.verifier.verify(tid_on(1, "a"), 5, 0, "t", 0)
    [sent] = s.poll().values()
    s.verifier.on_error(sent, DisconnectedError("refused"), 0)
    assert value(down) == codes.NOT_ENOUGH_REPLICAS
    loading = s.verifier.verify(tid_on(1, "b"), 5, 0, "t", 0)
    [sent] = s.poll().values()
    answer = response(sent.body, {}, error=codes.COORDINATOR_LOAD_IN_PROGRESS)
    s.verifier.on_response(sent, answer, 0)
    assert value(loading) == codes.NOT_ENOUGH_REPLICAS
    s.coordinator.num_partitions = None  # no __transaction_state yet
    assert s.verifier.verify(tid_on(1), 5, 0, "t", 0) == codes.NOT_ENOUGH_REPLICAS


def test_without_a_network_the_local_coordinator_answers() -> None:
    coordinator = FakeCoordinator()
    verifier = TxnVerifier(HERE, coordinator, lambda: image(LEADERS), None)
    assert verifier.verify(tid_on(2), 5, 0, "t", 0) == codes.NONE
    assert coordinator.calls == [(tid_on(2), 5, 0, "t", 0, False)]


def test_the_driver_sends_what_one_turn_of_the_loop_queued_together() -> None:
    async def go() -> None:
        net = FakeNetwork()
        leaders = image(LEADERS)
        links = InterBroker(HERE, lambda: leaders, net)
        verifier = txn_verifier(HERE, FakeCoordinator(), lambda: leaders, links, lambda: 0)
        a, b = tid_on(1, "a"), tid_on(1, "b")
        first = verifier.verify(a, 5, 0, "t", 0)
        second = verifier.verify(b, 6, 0, "t", 1)
        await turn()
        [sent] = net.take()
        assert sent.node_id == 2 and [t.transactional_id for t in sent.body.transactions] == [a, b]
        sent.future.set_result(response(sent.body, {(b, "t", 1): codes.PRODUCER_FENCED}))
        await turn()
        assert value(first) == codes.NONE and value(second) == codes.INVALID_PRODUCER_EPOCH
        await links.close()

    asyncio.run(go())
