"""Offset syncs and translation: MirrorMaker 2's emission rule, its 64-slot sync store and its
invariants, and translation that never skips a record (hypothesis models of a mirrored
partition)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.mirror.filters import NameFilter
from gregor.mirror.formats import Checkpoint, Heartbeat, OffsetSync
from gregor.mirror.offsets import (
    SYNCS_PER_PARTITION,
    OffsetSyncEmitter,
    OffsetSyncStore,
    PartitionSyncState,
    checkpoint_is_more_recent,
    checkpoints_for_group,
    offsets_from_checkpoints,
    offsets_to_sync,
    rename_topic_partition,
)
from gregor.mirror.policy import DefaultReplicationPolicy

pytestmark = pytest.mark.unit

TP = ("orders", 0)


# Emission.


def test_first_record_then_every_offset_lag_max() -> None:
    state = PartitionSyncState(max_offset_lag=10)
    due = [state.update(u, u + 1000) for u in range(30)]
    # translation through a sync at d answers d + 1, so the next is due when d - (d0 + 1) >= 10
    assert [u for u, d in enumerate(due) if d] == [0, 11, 22]


def test_gaps_and_truncation_force_a_sync() -> None:
    state = PartitionSyncState(max_offset_lag=100)
    assert state.update(0, 0)
    assert not state.update(1, 1)
    assert state.update(5, 2)  # upstream skipped offsets (compaction, transaction markers)
    assert not state.update(6, 3)
    assert state.update(7, 1)  # downstream went backwards (target topic recreated)


def test_zero_lag_syncs_every_record() -> None:
    state = PartitionSyncState(max_offset_lag=0)
    assert all(state.update(u, u) for u in range(5))


def test_emitter_pending_delayed_and_commit() -> None:
    emitter = OffsetSyncEmitter(max_offset_lag=100)
    emitter.record_written(TP, 0, 0)
    emitter.record_written(TP, 1, 1)
    emitter.record_written(TP, 2, 2)
    assert emitter.take_sendable() == [OffsetSync("orders", 0, 0, 0)]
    assert emitter.take_sendable() == []
    assert emitter.delayed[TP] == OffsetSync("orders", 0, 2, 2)
    emitter.commit()  # a quiet partition's last position still goes out
    assert emitter.take_sendable() == [OffsetSync("orders", 0, 2, 2)]
    assert emitter.in_flight == 2


def test_emitter_in_flight_limit() -> None:
    emitter = OffsetSyncEmitter(max_offset_lag=0, max_outstanding=3)
    for p in range(5):
        emitter.record_written(("t", p), 0, 0)
    assert [s.partition for s in emitter.take_sendable()] == [0, 1, 2]
    assert emitter.take_sendable() == []
    emitter.sync_completed()
    assert [s.partition for s in emitter.take_sendable()] == [3]


def test_emitter_keeps_the_latest_pending_sync_per_partition() -> None:
    emitter = OffsetSyncEmitter(max_offset_lag=0, max_outstanding=0)
    emitter.record_written(("t", 0), 0, 0)
    emitter.record_written(("t", 1), 0, 0)
    emitter.record_written(("t", 0), 1, 1)
    emitter.max_outstanding = 10
    assert emitter.take_sendable() == [OffsetSync("t", 0, 1, 1), OffsetSync("t", 1, 0, 0)]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 5),
    st.lists(
        st.tuples(
            st.sampled_from([0, 1]), st.integers(0, 3), st.integers(0, 2), st.integers(1, 30)
        ),
        max_size=12,
    ),
)
def test_a_run_decides_as_its_records_one_by_one(lag: int, runs: list[tuple]) -> None:
    """Runs of records (partition, upstream gap, downstream gap, length) give the same syncs
    sent, pending and delayed through `run_written` as through `record_written` per record,
    each caller sending what is pending whenever it passes records on (per record, or per
    piece of a run), with `commit` and completions in between."""
    by_run = OffsetSyncEmitter(max_offset_lag=lag, max_outstanding=2)
    by_record = OffsetSyncEmitter(max_offset_lag=lag, max_outstanding=2)
    ends: dict[int, tuple[int, int]] = {}
    sent: tuple[list[OffsetSync], list[OffsetSync]] = ([], [])
    for i, (partition, up_gap, down_gap, length) in enumerate(runs):
        tp = ("t", partition)
        up, down = ends.get(partition, (-1, -1))
        up, down = up + 1 + up_gap, down + 1 + down_gap
        left = length
        while left:
            if by_run.pending:
                sent[0].extend(by_run.take_sendable())
            taken = by_run.run_written(tp, up + length - left, down + length - left, left)
            assert 1 <= taken <= left
            left -= taken
            if by_run.pending:
                sent[0].extend(by_run.take_sendable())
        for k in range(length):
            if by_record.pending:
                sent[1].extend(by_record.take_sendable())
            by_record.record_written(tp, up + k, down + k)
            if by_record.pending:
                sent[1].extend(by_record.take_sendable())
        ends[partition] = (up + length - 1, down + length - 1)
        assert sent[0] == sent[1]
        assert by_run.pending == by_record.pending
        assert by_run.delayed == by_record.delayed
        assert by_run.partitions == by_record.partitions
        for emitter in (by_run, by_record):
            if i % 3 == 2:
                emitter.commit()
            if i % 2:
                while emitter.in_flight:
                    emitter.sync_completed()


# The store.


def check_invariants(slots: list[OffsetSync], latest: OffsetSync) -> None:
    assert len(slots) == SYNCS_PER_PARTITION
    assert slots[0] is latest  # A
    for i in range(SYNCS_PER_PARTITION):
        for j in range(i + 1, SYNCS_PER_PARTITION):
            if slots[i] is slots[j]:
                continue
            up_i, up_j = slots[i].upstream_offset, slots[j].upstream_offset
            assert up_i <= up_j + (1 << j) - (1 << i), (i, j)  # B
            assert up_i >= up_j + (1 << max(i - 2, 0)), (i, j)  # C


def store_of(syncs: list[OffsetSync]) -> OffsetSyncStore:
    store = OffsetSyncStore(must_read_to_end=False)
    store.read_to_end()
    for sync in syncs:
        store.add(sync)
    return store


def test_translation_rule() -> None:
    store = store_of([OffsetSync("orders", 0, 10, 100), OffsetSync("orders", 0, 20, 150)])
    assert store.translate_downstream(TP, 20) == 150  # at a sync: its downstream offset
    assert store.translate_downstream(TP, 25) == 151  # after: one past it, never further
    assert store.translate_downstream(TP, 15) == 101
    assert store.translate_downstream(TP, 10) == 100
    assert store.translate_downstream(TP, 5) == -1  # before every sync kept
    assert store.translate_downstream(("orders", 1), 5) is None


def test_no_translation_before_reading_to_the_end() -> None:
    store = OffsetSyncStore()
    store.add(OffsetSync("orders", 0, 10, 100))
    assert store.translate_downstream(TP, 10) is None
    store.read_to_end()
    assert store.translate_downstream(TP, 10) == 100


def test_initial_load_keeps_only_the_last_sync() -> None:
    store = OffsetSyncStore(must_read_to_end=True)
    for u in range(0, 100, 10):
        store.add(OffsetSync("orders", 0, u, u))
    store.read_to_end()
    assert store.translate_downstream(TP, 95) == 91
    assert store.translate_downstream(TP, 50) == -1  # older syncs were not kept
    relaxed = OffsetSyncStore(must_read_to_end=False)
    for u in range(0, 100, 10):
        relaxed.add(OffsetSync("orders", 0, u, u))
    relaxed.read_to_end()
    assert relaxed.translate_downstream(TP, 85) == 81
    assert relaxed.translate_downstream(TP, 50) == 1  # through the sync at 0, kept in slot 7


def test_an_upstream_rewind_starts_over() -> None:
    store = store_of([OffsetSync("orders", 0, u, u) for u in range(0, 100, 10)])
    store.add(OffsetSync("orders", 0, 5, 500))
    assert set(store.syncs(TP)) == {OffsetSync("orders", 0, 5, 500)}
    assert store.translate_downstream(TP, 50) == 501


def test_memory_is_bounded_and_old_offsets_coarser() -> None:
    syncs = [OffsetSync("orders", 0, u, u) for u in range(100_000)]
    store = store_of(syncs)
    kept = store.syncs(TP)
    assert len(kept) == SYNCS_PER_PARTITION
    check_invariants(kept, syncs[-1])
    assert store.translate_downstream(TP, 99_999) == 99_999  # exact near the end
    old = store.translate_downstream(TP, 1_000)
    assert old is not None and 0 <= old <= 1_000  # coarse far back, never ahead


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=120))
def test_invariants_hold_after_every_sync(steps: list[int]) -> None:
    store = OffsetSyncStore(must_read_to_end=False)
    store.read_to_end()
    upstream = 0
    for step in steps:
        upstream += step
        sync = OffsetSync("orders", 0, upstream, upstream)
        store.add(sync)
        check_invariants(store.syncs(TP), sync)


@st.composite
def mirrored_partition(draw: st.DrawFn) -> tuple[list[tuple[int, int]], list[OffsetSync], int]:
    """A source partition copied to a target: (upstream, downstream) per record, the offset
    syncs the source task emitted for it (in the order written), and offset.lag.max."""
    lag = draw(st.integers(0, 20))
    emitter = OffsetSyncEmitter(max_offset_lag=lag)
    upstream, downstream = draw(st.integers(0, 50)), draw(st.integers(0, 50))
    records: list[tuple[int, int]] = []
    syncs: list[OffsetSync] = []
    for _ in range(draw(st.integers(1, 150))):
        upstream += draw(st.sampled_from([1, 1, 1, 1, 2, 7]))  # gaps: compaction, markers
        downstream += draw(st.sampled_from([1, 1, 1, 2]))  # gaps: the target's own markers
        records.append((upstream, downstream))
        emitter.record_written(TP, upstream, downstream)
        if draw(st.integers(0, 30)) == 0:
            emitter.commit()
        for sync in emitter.take_sendable():
            syncs.append(sync)
            emitter.sync_completed()
    return records, syncs, lag


@settings(max_examples=100, deadline=None)
@given(mirrored_partition())
def test_translation_never_skips_a_record(model: tuple) -> None:
    records, syncs, lag = model
    store = store_of(syncs)
    earliest_kept = min(s.upstream_offset for s in store.syncs(TP))
    for committed in range(records[0][0], records[-1][0] + 2):
        translated = store.translate_downstream(TP, committed)
        assert translated is not None
        if translated == -1:
            assert committed < earliest_kept
            continue
        # every record the group had not consumed yet is at or after the translated offset
        unconsumed = [d for u, d in records if u >= committed]
        assert not unconsumed or min(unconsumed) >= translated
        # and the answer comes from a sync at or before the committed offset
        options = {
            s.downstream_offset + (s.upstream_offset != committed)
            for s in syncs
            if s.upstream_offset <= committed
        }
        assert translated in options


@settings(max_examples=200, deadline=None)
@given(mirrored_partition())
def test_a_group_near_the_end_rereads_at_most_the_sync_interval(model: tuple) -> None:
    records, syncs, lag = model
    store = store_of(syncs)
    latest = syncs[-1]
    for upstream, _ in records:
        if upstream < latest.upstream_offset:
            continue
        translated = store.translate_downstream(TP, upstream)
        assert translated == latest.downstream_offset + (upstream != latest.upstream_offset)
        reread = sum(1 for u, d in records if u < upstream and d >= translated)
        assert reread <= max(lag, 1)


@settings(max_examples=100, deadline=None)
@given(mirrored_partition())
def test_translation_is_monotonic_in_the_committed_offset(model: tuple) -> None:
    records, syncs, _ = model
    store = store_of(syncs)
    answers = [store.translate_downstream(TP, g) for g in range(records[0][0], records[-1][0] + 2)]
    assert answers == sorted(answers)  # type: ignore[type-var]


# Checkpoints.

policy = DefaultReplicationPolicy()


def test_rename_topic_partition() -> None:
    assert rename_topic_partition(("orders", 3), policy, "A", "B") == ("A.orders", 3)
    assert rename_topic_partition(("B.orders", 3), policy, "A", "B") == ("orders", 3)
    assert rename_topic_partition(("C.orders", 0), policy, "A", "B") == ("A.C.orders", 0)


def test_checkpoint_recency() -> None:
    last = Checkpoint("g", "A.orders", 0, 50, 40)
    assert checkpoint_is_more_recent(last, None)
    assert checkpoint_is_more_recent(Checkpoint("g", "A.orders", 0, 60, 45), last)
    assert not checkpoint_is_more_recent(Checkpoint("g", "A.orders", 0, 60, 40), last)
    assert not checkpoint_is_more_recent(Checkpoint("g", "A.orders", 0, 55, 39), last)
    assert checkpoint_is_more_recent(Checkpoint("g", "A.orders", 0, 10, 5), last)  # group rewound


def test_checkpoints_for_group() -> None:
    store = store_of([OffsetSync("orders", 0, 10, 100), OffsetSync("payments", 0, 0, 0)])
    committed = {
        ("orders", 0): (15, "meta"),
        ("orders", 1): (3, ""),
        ("payments", 0): (5, ""),
        ("x", 0): (1, ""),
    }
    topics = NameFilter(("orders", "payments"), ())
    out = checkpoints_for_group("g", committed, store, topics, policy, "A", "B", {})
    assert out == {
        ("A.orders", 0): Checkpoint("g", "A.orders", 0, 15, 101, "meta"),
        ("A.payments", 0): Checkpoint("g", "A.payments", 0, 5, 1, ""),
    }
    # nothing new to say: no checkpoint
    assert checkpoints_for_group("g", committed, store, topics, policy, "A", "B", out) == {}
    # a group behind every sync kept gets no checkpoint
    behind = checkpoints_for_group(
        "g", {("orders", 0): (5, "")}, store, topics, policy, "A", "B", {}
    )
    assert behind == {}


def test_offsets_to_sync_never_move_a_target_group_back() -> None:
    converted = {("A.orders", 0): 100, ("A.orders", 1): 50, ("A.orders", 2): 7}
    assert offsets_to_sync(converted, None) == converted  # a new group: everything
    target = {("A.orders", 0): 120, ("A.orders", 1): 40, ("A.orders", 2): None}
    assert offsets_to_sync(converted, target) == {("A.orders", 1): 50, ("A.orders", 2): 7}
    assert (
        offsets_to_sync(converted, {("A.orders", 0): 100, ("A.orders", 1): 50, ("A.orders", 2): 7})
        == {}
    )


def test_offsets_from_checkpoints() -> None:
    def rec(cp: Checkpoint) -> tuple[bytes, bytes]:
        return cp.record_key(), cp.record_value()

    hb = Heartbeat("A", "B", 1)
    records = [
        rec(Checkpoint("g", "A.orders", 0, 10, 8, "m1")),
        rec(Checkpoint("other", "A.orders", 0, 99, 99)),
        (hb.record_key(), b"\x00"),  # unreadable: skipped
        (None, None),
        rec(Checkpoint("g", "A.orders", 1, 5, 4)),
        rec(Checkpoint("g", "A.orders", 0, 20, 18, "m2")),
    ]
    assert offsets_from_checkpoints(records, "g") == {
        ("A.orders", 0): (18, "m2"),
        ("A.orders", 1): (4, ""),
    }
    assert offsets_from_checkpoints(records, "nobody") == {}
