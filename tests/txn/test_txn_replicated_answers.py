"""The transaction coordinator answers a write only once its records are replicated, and sends a
transaction's markers only once its PrepareCommit/PrepareAbort is: over real storage (a
`BrokerServer` built but not listening) with a fake marker writer, the id's
`__transaction_state` partition gets a second ISR member that has fetched nothing, so its high
watermark stays behind until the test plays that follower's Fetch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from test_txn_runtime import NOW, FakeWriter, broker

from gregor.broker.broker import BrokerServer
from gregor.coordinator.group.records import partition_for
from gregor.coordinator.txn import codes
from gregor.coordinator.txn.runtime import TRANSACTION_TOPIC, WRITE_TIMEOUT_MS
from gregor.replication.partition import Partition, ReplicaState
from gregor.replication.pending import Pending

FOLLOWER = 2


def hold_back(b: BrokerServer, tid: str) -> Partition:
    p = b.replicas.get(TRANSACTION_TOPIC, partition_for(tid, 3))
    assert p is not None and p.is_leader
    p.replicas, p.isr = [b.node_id, FOLLOWER], [b.node_id, FOLLOWER]
    p.followers = {FOLLOWER: ReplicaState(FOLLOWER)}
    return p


def follower_fetches(p: Partition, offset: int) -> None:
    p.update_follower_fetch_state(p.followers[FOLLOWER], offset, 0, NOW, p.log.log_end_offset, -1)


def test_end_txn_is_answered_and_its_markers_sent_once_prepare_commit_is_replicated(
    tmp_path: Path,
) -> None:
    writer = FakeWriter()
    b, txns = broker(tmp_path, writer)
    woken: list[int] = []
    txns.wakeup = lambda: woken.append(1)
    txns.ensure_transaction_topic()
    init = txns.init_producer_id("tx", 60_000, -1, -1, NOW)
    assert not isinstance(init, Pending), "one replica: answered at once"
    pid = init.producer_id
    p = hold_back(b, "tx")

    added = txns.add_partitions("tx", pid, 0, [("a", 0)], NOW)
    assert isinstance(added, Pending) and not added.done
    ended = txns.end_txn("tx", pid, 0, True, 0, NOW + 1)
    assert isinstance(ended, Pending) and not ended.done
    assert txns.describe("tx").state == "PrepareCommit" and writer.calls == [], (
        "no marker before PrepareCommit is replicated"
    )
    order: list[str] = []
    added.add_done_callback(lambda _v: order.append("add"))
    ended.add_done_callback(lambda _v: order.append("end"))

    end_prepare = p.log.log_end_offset
    follower_fetches(p, end_prepare - 1)  # the AddPartitions record only
    assert order == ["add"] and added.value == codes.NONE and writer.calls == []
    woken.clear()
    follower_fetches(p, end_prepare)
    assert order == ["add", "end"] and ended.value.error == codes.NONE
    assert woken, "released markers bring the next poll forward"
    txns.poll(NOW + 2)
    assert writer.calls == [("tx", pid, 0, 0, True, [("a", 0)])]
    assert txns.describe("tx").state == "CompleteCommit"
    b.logs.shutdown()


def test_leadership_loss_and_timeout(tmp_path: Path) -> None:
    writer = FakeWriter()
    b, txns = broker(tmp_path, writer)
    txns.ensure_transaction_topic()
    pid = txns.init_producer_id("tx", 60_000, -1, -1, NOW).producer_id
    p = hold_back(b, "tx")

    timed_out = txns.add_partitions("tx", pid, 0, [("a", 0)], NOW)
    assert isinstance(timed_out, Pending)
    assert txns.runtime.held.next_deadline_ms() == NOW + WRITE_TIMEOUT_MS
    txns.poll(NOW + WRITE_TIMEOUT_MS - 1)
    assert not timed_out.done
    assert txns.poll(NOW + WRITE_TIMEOUT_MS - 1) <= NOW + WRITE_TIMEOUT_MS
    txns.poll(NOW + WRITE_TIMEOUT_MS)
    assert timed_out.done and timed_out.value == codes.COORDINATOR_NOT_AVAILABLE

    ended = txns.end_txn("tx", pid, 0, False, 0, NOW + WRITE_TIMEOUT_MS)
    assert isinstance(ended, Pending)
    reg = p.registration
    assert reg is not None
    p.make_follower(
        replace(
            reg,
            leader=FOLLOWER,
            leader_epoch=reg.leader_epoch + 1,
            partition_epoch=reg.partition_epoch + 1,
        )
    )
    assert ended.done and ended.value.error == codes.NOT_COORDINATOR
    txns.on_metadata(NOW + WRITE_TIMEOUT_MS)
    txns.poll(NOW + WRITE_TIMEOUT_MS)
    assert writer.calls == [], (
        "the PrepareAbort never replicated here: the next coordinator sends the markers"
    )
    assert txns.coordinator_error("tx") == codes.NOT_COORDINATOR
    b.logs.shutdown()
