"""The transaction coordinator core without I/O: deliver an operation, advance time, answer the
markers, look at the records written and the answers. Every record is encoded and decoded as it
would be on disk, and several scenarios reload a fresh shard from those records alone."""

from __future__ import annotations

from dataclasses import replace

import pytest
from txn_core_harness import FIRST_PID, Harness

from gregor.coordinator.txn import codes
from gregor.coordinator.txn.records import TransactionMetadata, TxnRecord
from gregor.coordinator.txn.results import ProducerIdAndEpoch
from gregor.coordinator.txn.shard import MAX_EPOCH, TxnConfig
from gregor.coordinator.txn.state import (
    ALL_STATES,
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    VALID_PREVIOUS,
    IllegalTransition,
    check_transition,
)

T = "tx"
A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


# -- the transition table -----------------------------------------------------------------------


def test_transition_table_is_kafkas() -> None:
    by_name = {s.name: {p.name for p in VALID_PREVIOUS[s]} for s in ALL_STATES}
    assert by_name == {
        "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
        "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
        "PrepareCommit": {"Ongoing"},
        "PrepareAbort": {"Ongoing", "PrepareEpochFence"},
        "CompleteCommit": {"PrepareCommit"},
        "CompleteAbort": {"PrepareAbort"},
        "Dead": {"Empty", "CompleteCommit", "CompleteAbort"},
        "PrepareEpochFence": {"Ongoing"},
    }
    assert [s.id for s in ALL_STATES] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert {s.name for s in ALL_STATES if s.expiration_allowed} == {
        "Empty",
        "CompleteCommit",
        "CompleteAbort",
    }
    with pytest.raises(IllegalTransition):
        check_transition(EMPTY, PREPARE_COMMIT)
    with pytest.raises(IllegalTransition):
        check_transition(ONGOING, DEAD)


def test_replay_of_an_illegal_transition_is_refused_but_loading_takes_the_last_record() -> None:
    h = Harness()
    pid, epoch = h.init(T)
    bad = TxnRecord(T, TransactionMetadata(pid, epoch, 60_000, COMPLETE_COMMIT))
    with pytest.raises(IllegalTransition):
        h.shard.replay(bad)  # Empty -> CompleteCommit
    with pytest.raises(IllegalTransition):
        h.shard.replay(
            TxnRecord("new", TransactionMetadata(5, 0, 60_000, ONGOING, frozenset({A0})))
        )
    # While loading, compaction may have removed any record: the last one of an id wins.
    h.log = [TxnRecord("x", TransactionMetadata(7, 3, 1000, ONGOING, frozenset({A0}), 5, 5)), bad]
    shard = h.reload()
    assert shard.txns[T].state is COMPLETE_COMMIT and shard.txns["x"].state is ONGOING
    # A PrepareEpochFence (never written, by Kafka or us) loads as the abort it stands for.
    h.log = [
        TxnRecord(T, TransactionMetadata(pid, 4, 1000, PREPARE_EPOCH_FENCE, frozenset({A0}), 5, 5))
    ]
    h.reload()
    assert h.state(T) is PREPARE_ABORT
    assert [(m.partitions, m.committed, m.producer_epoch) for m in h.markers] == [((A0,), False, 4)]


# -- InitProducerId -----------------------------------------------------------------------------


def test_new_id_then_epoch_bumps() -> None:
    h = Harness()
    assert h.init(T) == (FIRST_PID, 0)
    [record] = h.log
    assert record.value is not None
    assert (
        record.value.state,
        record.value.partitions,
        record.value.start_ms,
        record.value.timeout_ms,
    ) == (EMPTY, frozenset(), -1, 60_000)
    assert h.init(T, timeout_ms=30_000) == (FIRST_PID, 1)
    assert h.shard.txns[T].timeout_ms == 30_000
    assert h.init("other") == (FIRST_PID + 1, 0)
    assert h.states_written(T) == ["Empty", "Empty"]


def test_init_refusals_write_nothing() -> None:
    h = Harness(TxnConfig(max_timeout_ms=60_000))
    assert h.init_result("").error == codes.INVALID_REQUEST
    assert h.init_result(T, timeout_ms=0).error == codes.INVALID_TRANSACTION_TIMEOUT
    assert h.init_result(T, timeout_ms=60_001).error == codes.INVALID_TRANSACTION_TIMEOUT
    assert h.init_result(T, timeout_ms=60_000).error == codes.NONE
    assert len(h.log) == 1


def test_kip360_producer_named_in_the_request() -> None:
    h = Harness()
    # A new id accepts any named producer (it recovers from UNKNOWN_PRODUCER_ID elsewhere).
    assert h.init(T, expected=(123, 4)) == (FIRST_PID, 0)
    assert h.init(T, expected=(FIRST_PID, 0)) == (FIRST_PID, 1)
    # The same request again (its answer was lost): the same epoch, not another bump.
    assert h.init(T, expected=(FIRST_PID, 0)) == (FIRST_PID, 1)
    assert h.init_result(T, expected=(FIRST_PID, 7)).error == codes.PRODUCER_FENCED
    assert h.init_result(T, expected=(999, 1)).error == codes.PRODUCER_FENCED
    assert h.init(T, expected=(FIRST_PID, 1)) == (FIRST_PID, 2)
    # Without a producer named, a new producer simply bumps (and fences the old one).
    assert h.init(T) == (FIRST_PID, 3)
    assert h.init_result(T, expected=(FIRST_PID, 2)).error == codes.PRODUCER_FENCED


def load_at_epoch(h: Harness, epoch: int, state=EMPTY) -> int:  # type: ignore[no-untyped-def]
    """Make T's producer sit at `epoch` (through the log, as a restart would see it)."""
    h.log = [
        TxnRecord(
            T, TransactionMetadata(FIRST_PID + 50, epoch, 60_000, state, last_update_ms=h.now)
        )
    ]
    h.reload()
    return FIRST_PID + 50


def test_epoch_exhaustion_rotates_the_producer_id() -> None:
    h = Harness()
    old = load_at_epoch(h, MAX_EPOCH - 2)
    assert h.init(T) == (old, MAX_EPOCH - 1)  # 32766: the last epoch handed out
    assert h.init(T, expected=(old, MAX_EPOCH - 1)) == (FIRST_PID, 0)
    assert h.shard.txns[T].previous_producer_id == old
    # The same request again: the rotation is not repeated.
    assert h.init(T, expected=(old, MAX_EPOCH - 1)) == (FIRST_PID, 0)
    # The previous producer id survives a reload (a tagged field of the value).
    h.reload()
    assert h.shard.txns[T].previous_producer_id == old
    assert h.init(T) == (FIRST_PID, 1)


def test_fencing_an_ongoing_transaction_at_the_last_epoch() -> None:
    h = Harness()
    old = load_at_epoch(h, MAX_EPOCH - 1)
    assert h.add(T, old, MAX_EPOCH - 1, A0) == codes.NONE
    assert h.init_result(T).error == codes.CONCURRENT_TRANSACTIONS
    assert h.shard.txns[T].producer_epoch == MAX_EPOCH  # fenced with Short.MaxValue
    h.answer_markers()
    assert h.init(T) == (FIRST_PID, 0)


def test_a_new_producer_fences_an_ongoing_transaction() -> None:
    h = Harness()
    pid, e0 = h.init(T)
    assert h.add(T, pid, e0, A0, B0) == codes.NONE
    assert h.init_result(T).error == codes.CONCURRENT_TRANSACTIONS
    fence = h.log[-1].value
    assert fence is not None and (fence.state, fence.producer_epoch, fence.partitions) == (
        PREPARE_ABORT,
        e0 + 1,
        frozenset({A0, B0}),
    )
    [req] = h.markers
    assert (req.committed, req.producer_id, req.producer_epoch, req.partitions) == (
        False,
        pid,
        e0 + 1,
        (A0, B0),
    )
    # The zombie is fenced at once; the new producer retries until the abort is complete.
    assert h.add(T, pid, e0, A1) == codes.PRODUCER_FENCED
    assert h.end(T, pid, e0, commit=True).error == codes.PRODUCER_FENCED
    assert h.init_result(T).error == codes.CONCURRENT_TRANSACTIONS
    h.answer_markers()
    assert h.state(T) is COMPLETE_ABORT
    assert h.init(T) == (pid, e0 + 2)
    assert h.states_written(T) == ["Empty", "Ongoing", "PrepareAbort", "CompleteAbort", "Empty"]


# -- a transaction ------------------------------------------------------------------------------


def test_commit_cycle_and_retries() -> None:
    h = Harness()
    pid, epoch = h.init(T)
    h.now += 10
    assert h.add(T, pid, epoch, A0) == codes.NONE
    started = h.now
    assert h.shard.txns[T].start_ms == started
    assert h.add(T, pid, epoch, A0) == codes.NONE  # already in: nothing written
    h.now += 10
    assert h.add(T, pid, epoch, A1, B0) == codes.NONE
    m = h.shard.txns[T]
    assert (m.state, m.partitions, m.start_ms, m.last_update_ms) == (
        ONGOING,
        frozenset({A0, A1, B0}),
        started,
        h.now,
    )
    assert h.end(T, pid, epoch, commit=True) == ProducerIdAndEpoch(codes.NONE, pid, epoch)
    [req] = h.markers
    assert (req.committed, req.producer_epoch, req.partitions) == (True, epoch, (A0, A1, B0))
    # While the markers are written:
    assert h.end(T, pid, epoch, commit=True).error == codes.CONCURRENT_TRANSACTIONS
    assert h.end(T, pid, epoch, commit=False).error == codes.INVALID_TXN_STATE
    assert h.add(T, pid, epoch, A0) == codes.CONCURRENT_TRANSACTIONS
    assert h.init_result(T).error == codes.CONCURRENT_TRANSACTIONS
    h.answer_markers()
    m = h.shard.txns[T]
    assert (m.state, m.partitions, m.start_ms) == (COMPLETE_COMMIT, frozenset(), started)
    # A retried EndTxn of a finished transaction is answered NONE; the other outcome is not.
    retry = h.end(T, pid, epoch, commit=True)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (codes.NONE, pid, epoch)
    assert h.end(T, pid, epoch, commit=False).error == codes.INVALID_TXN_STATE
    assert h.states_written(T) == ["Empty", "Ongoing", "Ongoing", "PrepareCommit", "CompleteCommit"]
    # The next transaction starts from CompleteCommit.
    h.now += 5
    assert h.add(T, pid, epoch, B0) == codes.NONE
    assert h.shard.txns[T].start_ms == h.now


def test_abort_cycle() -> None:
    h = Harness(auto_markers=True)
    pid, epoch = h.init(T)
    h.add(T, pid, epoch, A0)
    assert h.end(T, pid, epoch, commit=False).error == codes.NONE
    assert h.state(T) is COMPLETE_ABORT
    assert [r.committed for r in h.marker_history] == [False]
    assert h.end(T, pid, epoch, commit=False).error == codes.NONE
    assert h.end(T, pid, epoch, commit=True).error == codes.INVALID_TXN_STATE


def test_errors_for_wrong_producers_and_states() -> None:
    h = Harness()
    assert h.add("nobody", 1, 0, A0) == codes.INVALID_PRODUCER_ID_MAPPING
    assert h.end("nobody", 1, 0).error == codes.INVALID_PRODUCER_ID_MAPPING
    pid, epoch = h.init(T)
    assert h.add(T, pid + 1, epoch, A0) == codes.INVALID_PRODUCER_ID_MAPPING
    assert h.add(T, pid, epoch + 1, A0) == codes.PRODUCER_FENCED
    assert h.end(T, pid, epoch).error == codes.INVALID_TXN_STATE  # nothing to end
    assert h.end(T, pid + 1, epoch).error == codes.INVALID_PRODUCER_ID_MAPPING
    assert h.add("", pid, epoch, A0) == codes.INVALID_REQUEST
    h.add(T, pid, epoch, A0)
    bad = h.end(T, pid, epoch - 1)
    assert (bad.error, bad.producer_id, bad.producer_epoch) == (codes.PRODUCER_FENCED, -1, -1)
    assert len(h.log) == 2


def test_a_transaction_with_no_partitions_completes_without_markers() -> None:
    h = Harness()
    pid, epoch = h.init(T)
    assert h.add(T, pid, epoch) == codes.NONE
    assert h.end(T, pid, epoch).error == codes.NONE
    [req] = h.markers
    assert req.partitions == ()
    h.answer_markers()
    assert h.state(T) is COMPLETE_COMMIT


# -- verification (KIP-890 part 1) ------------------------------------------------------------


def test_verify_partitions() -> None:
    h = Harness()
    pid, epoch = h.init(T)
    assert h.verify(T, pid, epoch, [A0]) == {A0: codes.TRANSACTION_ABORTABLE}
    h.add(T, pid, epoch, A0)
    assert h.verify(T, pid, epoch, [A0, B0]) == {A0: codes.NONE, B0: codes.TRANSACTION_ABORTABLE}
    assert h.verify(T, pid, epoch + 1, [A0]) == {A0: codes.PRODUCER_FENCED}
    assert h.verify(T, pid + 1, epoch, [A0]) == {A0: codes.INVALID_PRODUCER_ID_MAPPING}
    assert h.verify("nobody", pid, epoch, [A0]) == {A0: codes.INVALID_PRODUCER_ID_MAPPING}
    assert h.verify("", pid, epoch, [A0]) == {A0: codes.INVALID_REQUEST}
    h.end(T, pid, epoch)
    assert h.verify(T, pid, epoch, [A0]) == {A0: codes.CONCURRENT_TRANSACTIONS}
    h.answer_markers()
    assert h.verify(T, pid, epoch, [A0]) == {A0: codes.TRANSACTION_ABORTABLE}


# -- markers ------------------------------------------------------------------------------------


def test_marker_errors_retry_skip_and_give_up() -> None:
    h = Harness(TxnConfig(marker_retry_backoff_ms=100))
    pid, epoch = h.init(T)
    h.add(T, pid, epoch, A0, A1, B0)
    h.end(T, pid, epoch)
    first = h.answer_markers(
        {A1: codes.NOT_LEADER_OR_FOLLOWER, B0: codes.UNKNOWN_TOPIC_OR_PARTITION}
    )
    assert h.state(T) is PREPARE_COMMIT and h.markers == []
    described = h.shard.describe(T)
    assert described.partitions == [("a", [1])], (
        "while preparing: only partitions still owed a marker"
    )
    # A late answer to the first request changes nothing.
    assert h.shard.markers_written(first, {tp: codes.NONE for tp in first.partitions}, h.now) == []
    h.advance(99)
    assert h.markers == []
    h.advance(1)
    [again] = h.markers
    assert again.partitions == (A1,) and again.producer_epoch == epoch
    h.answer_markers()
    assert h.state(T) is COMPLETE_COMMIT

    # A newer producer epoch at a partition: Kafka gives the transaction up (another
    # coordinator owns it); nothing more is asked.
    pid2, e2 = h.init("t2")
    h.add("t2", pid2, e2, A0)
    h.end("t2", pid2, e2)
    h.answer_markers({A0: codes.INVALID_PRODUCER_EPOCH})
    h.advance(10_000)
    assert h.state("t2") is PREPARE_COMMIT and h.markers == []


def test_complete_record_offered_again_when_its_append_failed() -> None:
    h = Harness(TxnConfig(marker_retry_backoff_ms=100))
    pid, epoch = h.init(T)
    h.add(T, pid, epoch, A0)
    h.end(T, pid, epoch)
    req = h.markers.pop()
    lost = h.shard.markers_written(req, {A0: codes.NONE}, h.now)  # the append of this fails
    assert [r.value.state for r in lost if r.value] == [COMPLETE_COMMIT]
    assert h.state(T) is PREPARE_COMMIT
    h.advance(100)
    assert h.state(T) is COMPLETE_COMMIT


def test_reload_finishes_transactions_left_preparing() -> None:
    h = Harness()
    pid, epoch = h.init(T)
    h.add(T, pid, epoch, A0, B0)
    h.end(T, pid, epoch, commit=True)
    assert len(h.markers) == 1
    before = dict(h.shard.txns)
    shard = h.reload()
    assert shard.txns == before
    [req] = h.markers
    assert (req.committed, req.partitions, req.producer_epoch) == (True, (A0, B0), epoch)
    assert h.end(T, pid, epoch).error == codes.CONCURRENT_TRANSACTIONS
    h.answer_markers()
    assert h.state(T) is COMPLETE_COMMIT


# -- timers -------------------------------------------------------------------------------------


def test_timed_out_transactions_are_aborted_and_the_producer_fenced() -> None:
    h = Harness(TxnConfig(abort_timed_out_interval_ms=1000), auto_markers=True)
    pid, epoch = h.init(T, timeout_ms=5000)
    h.add(T, pid, epoch, A0)
    slow, se = h.init("slow", timeout_ms=60_000)
    h.add("slow", slow, se, B0)
    h.advance(5000)
    assert h.state(T) is ONGOING, "not older than its timeout yet"
    h.advance(1000)
    assert h.state(T) is COMPLETE_ABORT and h.state("slow") is ONGOING
    assert h.shard.txns[T].producer_epoch == epoch + 1
    assert [(r.committed, r.producer_epoch) for r in h.marker_history] == [(False, epoch + 1)]
    # The zombie finds out at its next request.
    assert h.end(T, pid, epoch).error == codes.PRODUCER_FENCED
    assert h.add(T, pid, epoch, A0) == codes.PRODUCER_FENCED
    assert h.init(T) == (pid, epoch + 2)


def test_idle_ids_expire_with_a_tombstone() -> None:
    cfg = TxnConfig(
        transactional_id_expiration_ms=60_000,
        remove_expired_interval_ms=10_000,
        abort_timed_out_interval_ms=10**9,
    )
    h = Harness(cfg, auto_markers=True)
    pid, epoch = h.init(T)
    h.init("busy", timeout_ms=900_000)
    bp, be = h.init("busy", timeout_ms=900_000)
    h.add("busy", bp, be, A0)  # open transactions never expire
    h.advance(50_000)
    done_pid, done_epoch = h.init("done")
    h.add("done", done_pid, done_epoch, A0)
    h.end("done", done_pid, done_epoch)
    h.advance(20_000)  # T idle 70 s: gone at the 70 s run
    assert h.state(T) is None and h.log[-1] == TxnRecord(T, None)
    assert h.shard.describe(T).error == codes.TRANSACTIONAL_ID_NOT_FOUND
    assert h.state("busy") is ONGOING and h.state("done") is COMPLETE_COMMIT
    h.advance(60_000)
    assert h.state("done") is None
    # An expired id starts again with a new producer id.
    assert h.init(T) == (FIRST_PID + 3, 0)
    h.reload()
    assert set(h.shard.txns) == {T, "busy"}


# -- transaction.version 2 (KIP-890 part 2) -----------------------------------------------------


def test_v2_end_txn_bumps_the_epoch_every_transaction() -> None:
    h = Harness()
    pid, e = h.init(T)
    h.add(T, pid, e, A0)
    res = h.end(T, pid, e, commit=True, client_version=2)
    assert (res.error, res.producer_id, res.producer_epoch) == (codes.NONE, pid, e + 1)
    [req] = h.markers
    assert req.producer_epoch == e + 1
    # A retry with the epoch it sent: still writing markers, then done.
    assert h.end(T, pid, e, commit=True, client_version=2).error == codes.CONCURRENT_TRANSACTIONS
    h.answer_markers()
    retry = h.end(T, pid, e, commit=True, client_version=2)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (codes.NONE, pid, e + 1)
    # The same epoch again would be the next EndTxn, which has nothing to end yet: fenced.
    assert h.end(T, pid, e + 1, commit=True, client_version=2).error == codes.PRODUCER_FENCED
    assert h.add(T, pid, e + 1, A0) == codes.NONE
    assert h.end(T, pid, e + 1, commit=False, client_version=2).producer_epoch == e + 2


def test_v2_epoch_overflow_moves_to_the_next_producer_id() -> None:
    h = Harness()
    old = load_at_epoch(h, MAX_EPOCH - 1)
    h.add(T, old, MAX_EPOCH - 1, A0)
    res = h.end(T, old, MAX_EPOCH - 1, client_version=2)
    assert (res.error, res.producer_id, res.producer_epoch) == (codes.NONE, FIRST_PID, 0)
    [req] = h.markers
    assert (req.producer_id, req.producer_epoch) == (old, MAX_EPOCH)
    h.answer_markers()
    m = h.shard.txns[T]
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id, m.next_producer_id) == (
        FIRST_PID,
        0,
        old,
        -1,
    )
    # The client retrying with the old id and epoch is told it is done.
    retry = h.end(T, old, MAX_EPOCH - 1, client_version=2)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (codes.NONE, FIRST_PID, 0)


def test_v2_next_producer_id_survives_a_reload() -> None:
    h = Harness()
    old = load_at_epoch(h, MAX_EPOCH - 1)
    h.add(T, old, MAX_EPOCH - 1, A0)
    h.end(T, old, MAX_EPOCH - 1, client_version=2)
    h.reload()
    assert (h.shard.txns[T].next_producer_id, h.shard.txns[T].client_version) == (FIRST_PID, 2)
    h.answer_markers()
    assert (h.shard.txns[T].producer_id, h.shard.txns[T].producer_epoch) == (FIRST_PID, 0)


# -- DescribeTransactions and ListTransactions --------------------------------------------------


def test_describe_and_list() -> None:
    h = Harness()
    pid, epoch = h.init(T, timeout_ms=30_000)
    h.add(T, pid, epoch, B0, A1, A0)
    d = h.shard.describe(T)
    assert (d.error, d.state, d.timeout_ms, d.start_ms, d.producer_id, d.producer_epoch) == (
        codes.NONE,
        "Ongoing",
        30_000,
        h.now,
        pid,
        epoch,
    )
    assert d.partitions == [("a", [0, 1]), ("b", [0])]
    assert h.shard.describe("nobody").error == codes.TRANSACTIONAL_ID_NOT_FOUND
    other, _ = h.init("idle")

    def listed(
        states: tuple[str, ...] = (), pids: tuple[int, ...] = (), duration: int = -1
    ) -> list[tuple[str, str]]:
        return sorted(
            (t.transactional_id, t.state)
            for t in h.shard.list_transactions(states, pids, duration, h.now).transactions
        )

    assert listed() == [("idle", "Empty"), (T, "Ongoing")]
    assert listed(["Ongoing"]) == [(T, "Ongoing")]
    assert listed(pids=[other]) == [("idle", "Empty")]
    assert h.shard.list_transactions(["Ongoing", "Bogus"], [], -1, h.now).unknown_state_filters == [
        "Bogus"
    ]
    h.now += 1000
    assert listed(duration=999) == [
        ("idle", "Empty"),
        (T, "Ongoing"),
    ]  # Empty: start -1, as in Kafka
    assert listed(["Ongoing"], duration=1000) == []


def test_last_epoch_is_memory_only_as_in_kafka() -> None:
    h = Harness()
    pid, _ = h.init(T)
    assert h.init(T, expected=(pid, 0)) == (pid, 1)
    m = h.shard.txns[T]
    assert m.last_producer_epoch == 0
    h.reload()
    assert h.shard.txns[T] == m and h.shard.txns[T].last_producer_epoch == -1
    # After a failover the retry of that bump is fenced (Kafka: "a rare case").
    assert h.init_result(T, expected=(pid, 0)).error == codes.PRODUCER_FENCED
    assert replace(m, last_producer_epoch=9) == m
