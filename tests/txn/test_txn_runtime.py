"""The transaction coordinator runtime in-process over real storage (a `BrokerServer` built but
not listening) with a fake marker writer: records land in `__transaction_state` in Kafka's
formats, markers are asked for with the coordinator epoch and their answers (at once or later)
complete the transaction, loading after a restart replays the log step by step with
COORDINATOR_LOAD_IN_PROGRESS meanwhile and finishes what was left preparing, and the timers abort
timed-out transactions and expire idle ids."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gregor.broker.broker import BrokerServer
from gregor.broker.config import BrokerConfig
from gregor.clock import ManualClock
from gregor.controller.admin import TopicSpec
from gregor.coordinator.group.records import partition_for
from gregor.coordinator.txn import codes
from gregor.coordinator.txn.records import TxnRecord, decode
from gregor.coordinator.txn.runtime import TRANSACTION_TOPIC, TransactionCoordinator
from gregor.protocol.records.records import iter_records

NOW = 1_700_000_000_000
Done = Callable[[dict[tuple[str, int], int]], None]


class FakeWriter:
    """Records every call; answers NONE at once unless `hold` (then the test calls `release`),
    or with the errors in `errors` (consumed one call at a time)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, int, bool, list[tuple[str, int]]]] = []
        self.held: list[tuple[list[tuple[str, int]], Done]] = []
        self.hold = False
        self.errors: list[dict[tuple[str, int], int]] = []

    def __call__(
        self,
        tid: str,
        pid: int,
        epoch: int,
        coordinator_epoch: int,
        committed: bool,
        partitions: list[tuple[str, int]],
        done: Done,
    ) -> None:
        self.calls.append((tid, pid, epoch, coordinator_epoch, committed, list(partitions)))
        if self.hold:
            self.held.append((partitions, done))
            return
        errors = self.errors.pop(0) if self.errors else {}
        done({tp: errors.get(tp, codes.NONE) for tp in partitions})

    def release(self) -> None:
        held, self.held = self.held, []
        for partitions, done in held:
            done(dict.fromkeys(partitions, codes.NONE))


def broker(
    tmp_path: Path, writer: FakeWriter, **extra: str
) -> tuple[BrokerServer, TransactionCoordinator]:
    config = BrokerConfig.load(
        None,
        {
            "log.dirs": str(tmp_path / "logs"),
            "transaction.state.log.num.partitions": "3",
            "transaction.state.log.load.buffer.size": "2000",
            "offsets.topic.num.partitions": "7",
            **extra,
        },
    )
    b = BrokerServer(config, clock=ManualClock(NOW))  # loading starts the timers at NOW
    txns = TransactionCoordinator(
        b.node_id,
        b.store,
        b.replicas,
        b.services.admin,
        b.services.config_value,
        b.services.apply_metadata,
        b.services.producer_ids.next_id,
        writer,
    )
    # this coordinator (with its fake marker writer) instead of the broker's own
    b.hosting.on_applied = [b.services.groups.on_metadata, txns.on_metadata]
    b.logs.startup()
    b.services.apply_metadata()
    for topic in ("a", "b"):
        if topic not in b.store.topics:
            b.services.admin.create_topic(TopicSpec(topic, 2, 1))
    b.services.apply_metadata()
    return b, txns


def load(txns: TransactionCoordinator, now: int = NOW) -> int:
    polls = 0
    while txns.runtime.loading:
        txns.poll(now)
        polls += 1
    return polls


def written(b: BrokerServer, tid: str) -> list[TxnRecord]:
    n = b.store.topics[TRANSACTION_TOPIC].partitions
    p = b.replicas.get(TRANSACTION_TOPIC, partition_for(tid, n))
    assert p is not None
    out = []
    for _, rec in iter_records(p.log.read_bytes(0, 1 << 20)):
        assert rec.key is not None
        r = decode(rec.key, rec.value)
        if r is not None and r.transactional_id == tid:
            out.append(r)
    return out


def states(records: list[TxnRecord]) -> list[str]:
    return [r.value.state.name if r.value is not None else "tombstone" for r in records]


def test_the_topic_is_created_on_first_use(tmp_path: Path) -> None:
    b, txns = broker(tmp_path, FakeWriter(), **{"transaction.state.log.segment.bytes": "1048576"})
    assert txns.coordinator_error("tx") == codes.NOT_COORDINATOR
    assert txns.init_producer_id("tx", 60_000, -1, -1, NOW).error == codes.NOT_COORDINATOR
    txns.ensure_transaction_topic()
    info = b.store.topics[TRANSACTION_TOPIC]
    assert info.partitions == 3 and all(
        len(r) == 1 for r in info.replicas
    )  # factor 3 capped to 1 broker
    assert info.configs == {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": "1",
        "segment.bytes": "1048576",
    }
    assert txns.coordinator_error("tx") == codes.NONE and txns.is_leader_for("tx")
    b.logs.shutdown()


def test_a_transaction_over_real_storage_with_markers_answered_at_once(tmp_path: Path) -> None:
    writer = FakeWriter()
    b, txns = broker(tmp_path, writer)
    txns.ensure_transaction_topic()
    r = txns.init_producer_id("tx", 60_000, -1, -1, NOW)
    assert r.error == codes.NONE and r.producer_epoch == 0
    pid = r.producer_id
    assert txns.add_partitions("tx", pid, 0, [("a", 0), ("b", 1)], NOW + 1) == codes.NONE
    assert txns.add_offsets("tx", pid, 0, "my-group", NOW + 2) == codes.NONE
    offsets_tp = ("__consumer_offsets", partition_for("my-group", 7))
    assert txns.verify_partition("tx", pid, 0, "a", 0) == codes.NONE
    end = txns.end_txn("tx", pid, 0, True, 0, NOW + 3)
    assert (end.error, end.producer_id, end.producer_epoch) == (codes.NONE, pid, 0)
    assert writer.calls == [("tx", pid, 0, 0, True, sorted([("a", 0), ("b", 1), offsets_tp]))]
    records = written(b, "tx")
    assert states(records) == ["Empty", "Ongoing", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert records[3].value is not None and records[3].value.partitions == frozenset(
        {("a", 0), ("b", 1), offsets_tp}
    )
    assert txns.describe("tx").state == "CompleteCommit"
    assert txns.verify_partition("tx", pid, 0, "a", 0) == codes.INVALID_TXN_STATE
    assert (
        txns.verify_partition("tx", pid, 0, "a", 0, abortable_supported=True)
        == codes.TRANSACTION_ABORTABLE
    )
    assert txns.verify_partition("tx", pid, 1, "a", 0) == codes.INVALID_PRODUCER_EPOCH
    assert txns.verify_partition("nobody", pid, 0, "a", 0) == codes.INVALID_PRODUCER_ID_MAPPING
    b.logs.shutdown()


def test_late_marker_answers_restart_and_load_by_replay(tmp_path: Path) -> None:
    writer = FakeWriter()
    b, txns = broker(tmp_path, writer)
    woken: list[int] = []
    txns.wakeup = lambda: woken.append(1)
    txns.ensure_transaction_topic()
    writer.hold = True
    pid = txns.init_producer_id("tx", 60_000, -1, -1, NOW).producer_id
    txns.add_partitions("tx", pid, 0, [("a", 1)], NOW)
    assert txns.end_txn("tx", pid, 0, False, 0, NOW).error == codes.NONE
    assert txns.describe("tx").state == "PrepareAbort" and len(writer.held) == 1
    # Answered later, outside any operation: the coordinator asks to be polled, and the poll
    # appends CompleteAbort.
    woken.clear()
    writer.release()
    assert woken and txns.describe("tx").state == "PrepareAbort"
    assert txns.poll(NOW + 5) is not None
    assert txns.describe("tx").state == "CompleteAbort"

    # Many ids, then one transaction left preparing at the crash.
    for i in range(60):
        p = txns.init_producer_id(f"id-{i}", 60_000, -1, -1, NOW).producer_id
        txns.add_partitions(f"id-{i}", p, 0, [("b", i % 2)], NOW)
    pid2 = txns.init_producer_id("left", 60_000, -1, -1, NOW).producer_id
    txns.add_partitions("left", pid2, 0, [("a", 0), ("b", 0)], NOW)
    txns.end_txn("left", pid2, 0, True, 0, NOW)
    assert txns.describe("left").state == "PrepareCommit"
    before = {tid: m for s in txns.runtime.shards() for tid, m in s.txns.items()}
    b.logs.shutdown()

    writer2 = FakeWriter()
    b2, t2 = broker(tmp_path, writer2)
    assert t2.coordinator_error("left") == codes.COORDINATOR_LOAD_IN_PROGRESS
    assert t2.end_txn("left", pid2, 0, True, 0, NOW).error == codes.COORDINATOR_LOAD_IN_PROGRESS
    assert t2.list_transactions([], [], -1, NOW).error == codes.COORDINATOR_LOAD_IN_PROGRESS
    assert t2.verify_partition("left", pid2, 0, "a", 0) == codes.NOT_ENOUGH_REPLICAS
    assert load(t2, NOW + 10) > 2, "loaded in steps"
    after = {tid: m for s in t2.runtime.shards() for tid, m in s.txns.items()}
    assert after.keys() == before.keys()
    assert {k: v for k, v in after.items() if k != "left"} == {
        k: v for k, v in before.items() if k != "left"
    }
    # The markers of the transaction left preparing are written again, then it completes; the
    # coordinator epoch is the partition's leader epoch, which the restart bumped.
    leader_epoch = b2.replicas.leader(TRANSACTION_TOPIC, t2.partition_for("left")).leader_epoch
    assert leader_epoch > 0
    assert writer2.calls == [("left", pid2, 0, leader_epoch, True, [("a", 0), ("b", 0)])]
    assert t2.describe("left").state == "CompleteCommit"
    assert t2.end_txn("left", pid2, 0, True, 0, NOW).error == codes.NONE
    listed = t2.list_transactions(["Ongoing"], [], -1, NOW + 10)
    assert len(listed.transactions) == 60
    b2.logs.shutdown()


def test_timed_out_transactions_are_aborted_by_the_timer(tmp_path: Path) -> None:
    writer = FakeWriter()
    b, txns = broker(
        tmp_path, writer, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}
    )
    txns.ensure_transaction_topic()
    pid = txns.init_producer_id("tx", 2000, -1, -1, NOW).producer_id
    txns.add_partitions("tx", pid, 0, [("a", 0)], NOW)
    deadline = txns.poll(NOW)
    assert deadline is not None and deadline <= NOW + 1000
    txns.poll(NOW + 1000)
    txns.poll(NOW + 2000)
    assert txns.describe("tx").state == "Ongoing" and writer.calls == []
    txns.poll(NOW + 3000)
    assert writer.calls == [("tx", pid, 1, 0, False, [("a", 0)])]
    assert states(written(b, "tx")) == ["Empty", "Ongoing", "PrepareAbort", "CompleteAbort"]
    assert txns.end_txn("tx", pid, 0, True, 0, NOW + 3000).error == codes.PRODUCER_FENCED
    b.logs.shutdown()


def test_idle_ids_expire_and_stay_gone_after_a_restart(tmp_path: Path) -> None:
    extra = {
        "transactional.id.expiration.ms": "5000",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "1000",
    }
    b, txns = broker(tmp_path, FakeWriter(), **extra)
    txns.ensure_transaction_topic()
    old = txns.init_producer_id("tx", 60_000, -1, -1, NOW).producer_id
    txns.poll(NOW)
    txns.poll(NOW + 4000)
    assert txns.describe("tx").error == codes.NONE
    txns.poll(NOW + 6000)
    assert txns.describe("tx").error == codes.TRANSACTIONAL_ID_NOT_FOUND
    assert states(written(b, "tx")) == ["Empty", "tombstone"]
    b.logs.shutdown()
    b2, t2 = broker(tmp_path, FakeWriter(), **extra)
    load(t2)
    assert t2.describe("tx").error == codes.TRANSACTIONAL_ID_NOT_FOUND
    assert t2.init_producer_id("tx", 60_000, -1, -1, NOW).producer_id != old
    b2.logs.shutdown()


def test_marker_errors_are_retried_and_deleted_topics_skipped(tmp_path: Path) -> None:
    writer = FakeWriter()
    b, txns = broker(tmp_path, writer)
    txns.ensure_transaction_topic()
    pid = txns.init_producer_id("tx", 60_000, -1, -1, NOW).producer_id
    txns.add_partitions("tx", pid, 0, [("a", 0), ("a", 1), ("b", 0)], NOW)
    writer.errors = [
        {("a", 1): codes.NOT_LEADER_OR_FOLLOWER, ("b", 0): codes.UNKNOWN_TOPIC_OR_PARTITION}
    ]
    txns.end_txn("tx", pid, 0, True, 0, NOW)
    assert txns.describe("tx").state == "PrepareCommit"
    assert txns.describe("tx").partitions == [("a", [1])]
    deadline = txns.poll(NOW + 1)
    assert deadline is not None and deadline <= NOW + 100
    txns.poll(NOW + 100)
    assert writer.calls[-1][-1] == [("a", 1)]
    assert txns.describe("tx").state == "CompleteCommit"
    b.logs.shutdown()


def test_write_failures_answer_kafkas_errors_and_change_nothing(tmp_path: Path) -> None:
    b, txns = broker(tmp_path, FakeWriter())
    txns.ensure_transaction_topic()
    pid = txns.init_producer_id("tx", 60_000, -1, -1, NOW).producer_id
    p = b.replicas.get(TRANSACTION_TOPIC, txns.partition_for("tx"))
    assert p is not None
    p.min_insync_replicas = 2  # every acks=all append now fails with NOT_ENOUGH_REPLICAS
    assert txns.add_partitions("tx", pid, 0, [("a", 0)], NOW) == codes.COORDINATOR_NOT_AVAILABLE
    assert txns.describe("tx").state == "Empty"
    assert txns.init_producer_id("tx", 60_000, -1, -1, NOW).error == codes.COORDINATOR_NOT_AVAILABLE
    p.min_insync_replicas = 1
    assert txns.init_producer_id("tx", 60_000, -1, -1, NOW).producer_epoch == 1
    b.logs.shutdown()


def test_a_new_leader_epoch_reloads_and_is_the_coordinator_epoch(tmp_path: Path) -> None:
    writer = FakeWriter()
    b, txns = broker(tmp_path, writer)
    txns.ensure_transaction_topic()
    index = txns.partition_for("tx")
    shard = txns.runtime.active(index)
    p = b.replicas.get(TRANSACTION_TOPIC, index)
    assert p is not None
    pid = txns.init_producer_id("tx", 60_000, -1, -1, NOW).producer_id
    txns.add_partitions("tx", pid, 0, [("a", 0)], NOW)
    p.leader_epoch = 4
    txns.on_metadata(NOW)
    assert txns.runtime.contexts[index].shard is not shard and txns.runtime.epoch(index) == 4
    load(txns)
    txns.end_txn("tx", pid, 0, True, 0, NOW)
    assert writer.calls == [("tx", pid, 0, 4, True, [("a", 0)])]
    b.logs.shutdown()


def test_the_brokers_marker_writer(tmp_path: Path) -> None:
    """The broker's marker writer (`MarkerSender.write_markers`) appends a control batch to each partition it leads and
    answers at once; a partition it does not host is UNKNOWN_TOPIC_OR_PARTITION."""
    b, _ = broker(tmp_path, FakeWriter())
    answers: list[dict[tuple[str, int], int]] = []
    before = b.replicas.leader("a", 0).log.log_end_offset
    b.markers.write_markers("tx", 5, 0, 0, True, [("a", 0), ("gone", 0)], answers.append)
    assert answers == [{("a", 0): codes.NONE, ("gone", 0): codes.UNKNOWN_TOPIC_OR_PARTITION}]
    p = b.replicas.leader("a", 0)
    assert p.log.log_end_offset == before + 1
    [(header, _)] = list(iter_records(p.log.read_bytes(before, 1 << 16)))
    assert header.is_control and header.producer_id == 5 and header.is_transactional
    b.logs.shutdown()
