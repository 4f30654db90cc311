"""The log cleaner and transactions, as Kafka's: records of aborted transactions go whatever
their keys (and never hide a committed value of their key), a marker stays while its
transaction has data in the cleaning and then gets a delete horizon, after which it goes; the
cleaned segment's .txnindex keeps the aborts it still needs; open transactions (from the last
stable offset on) are not cleaned; a truncation lowers the cleaner's checkpoint; a crash at any
rename of a swap leaves sound .txnindex files."""

from __future__ import annotations

import os
import random
import struct
from dataclasses import replace

import pytest
from compaction_helpers import leftovers, new_manager, read_batches, read_records

from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch, build_control_batch, read_batch_records
from gregor.storage.cleaner import CleanerConfig, cleanable_offsets
from gregor.storage.cleaner_worker import SUPPORTED, run_in_process
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.producer_state import AppendOrigin

T0 = 1_700_000_000_000
RETENTION = 60_000
TP = ("t", 0)
A, B, C = 31, 32, 33
ENTRY = struct.Struct(">hqqqq")


def config(**changes) -> LogConfig:
    base = LogConfig(
        segment_bytes=1 << 20,
        index_interval_bytes=300,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=RETENTION,
        file_delete_delay_ms=0,
        segment_ms=1 << 60,
    )
    return replace(base, **changes)


class Writer:
    """Appends as producers and a coordinator do, keeping each producer's sequence."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.seqs: dict[int, int] = {}

    def txn(self, pid: int, *records: tuple[bytes, bytes | None]) -> int:
        seq = self.seqs.get(pid, 0)
        self.seqs[pid] = seq + len(records)
        batch = build_batch(
            list(records),
            base_timestamp=T0,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            transactional=True,
        )
        return self.log.append(batch, now_ms=T0).first_offset

    def end(self, pid: int, commit: bool) -> int:
        batch = build_control_batch(pid, 0, 0, commit, T0)
        return self.log.append(batch, now_ms=T0, origin=AppendOrigin.COORDINATOR).first_offset

    def plain(self, *records: tuple[bytes, bytes | None]) -> int:
        return self.log.append(
            build_batch(list(records), base_timestamp=T0), now_ms=T0
        ).first_offset

    def roll(self) -> None:
        self.log.roll(now_ms=T0)
        self.log.update_high_watermark(self.log.log_end_offset)


def txn_entries(log: Log) -> dict[int, list[tuple[int, int, int, int]]]:
    """segment base -> its .txnindex entries, read raw."""
    out = {}
    for seg in log.segments:
        if os.path.exists(seg.txn_index.path):
            with open(seg.txn_index.path, "rb") as f:
                data = f.read()
            out[seg.base_offset] = [
                ENTRY.unpack_from(data, p)[1:] for p in range(0, len(data), ENTRY.size)
            ]
    return out


def markers(log: Log) -> dict[int, rb.BatchHeader]:
    return {h.base_offset: h for h, _ in read_batches(log) if h.is_control}


def kv(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [
        (r.offset, r.key, r.value)
        for r in read_records(log)
        if not r.key or not r.key.startswith(b"\x00\x00")
    ]


def _scenario(tmp_path):
    """Two cleanable segments of transactions and an active one:

    0 plain k2=old | 1-2 A: k1=a1 k2=a2 | 3 B: k1=b1 | 4 ABORT A | 5 COMMIT B | 6 plain k1=p1
    roll | 7 A: k4=a4 | 8 COMMIT A | 9 B: k5=b5 | 10 COMMIT B | roll | 11 plain x
    """
    mgr, log, cleaner = new_manager(str(tmp_path), config())
    w = Writer(log)
    w.plain((b"k2", b"old"))
    w.txn(A, (b"k1", b"a1"), (b"k2", b"a2"))
    w.txn(B, (b"k1", b"b1"))
    w.end(A, commit=False)
    w.end(B, commit=True)
    w.plain((b"k1", b"p1"))
    w.roll()
    w.txn(A, (b"k4", b"a4"))
    w.end(A, commit=True)
    w.txn(B, (b"k5", b"b5"))
    w.end(B, commit=True)
    w.roll()
    w.plain((b"x", b"y"))
    log.update_high_watermark(log.log_end_offset)
    assert txn_entries(log) == {0: [(A, 1, 4, 3)]}
    return mgr, log, cleaner


def test_aborted_records_go_and_markers_stay_while_their_data_is_there(tmp_path):
    mgr, log, cleaner = _scenario(tmp_path)
    t1 = T0 + 1000
    assert cleaner.clean_once(t1) is not None
    # A's aborted k2=a2 did not hide k2=old (the offset map skips aborted records); A's batch
    # went whole; B's k1=b1 lost to k1=p1 and its batch went (not B's last).
    assert kv(log) == [
        (0, b"k2", b"old"),
        (6, b"k1", b"p1"),
        (7, b"k4", b"a4"),
        (9, b"k5", b"b5"),
        (11, b"x", b"y"),
    ]
    found = markers(log)
    assert sorted(found) == [4, 5, 8, 10]
    # Both markers of the first segment had data of their transaction in this cleaning: kept
    # as they were, with no delete horizon yet.
    assert not any(h.attributes & rb.DELETE_HORIZON_FLAG for h in found.values())
    # The ABORT kept is indexed in the cleaned segment, its entry as it was.
    assert txn_entries(log) == {0: [(A, 1, 4, 3)]}
    assert log.collect_aborted_transactions(0, 12) == [(A, 1)]
    mgr.shutdown()


def test_markers_get_a_horizon_once_their_data_is_gone_and_go_after_it(tmp_path):
    mgr, log, cleaner = _scenario(tmp_path)
    t1, t2 = T0 + 1000, T0 + 2000
    assert cleaner.clean_once(t1) is not None
    stored = {o: bytes(log.read_bytes(o, 1 << 20)[: markers(log)[o].size]) for o in (4, 5)}
    assert cleaner.clean_once(t2, TP, force=True) is not None
    found = markers(log)
    for offset in (4, 5):
        h = found[offset]
        assert h.attributes & rb.DELETE_HORIZON_FLAG and h.base_timestamp == t2 + RETENTION
        header, recs = read_batch_records(log.read_bytes(offset, 1 << 20))
        _, original = read_batch_records(stored[offset])
        assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == [
            (r.offset, r.key, r.value, r.timestamp) for r in original
        ]
    # No data of A's aborted transaction is left for a consumer to drop: no entry.
    assert txn_entries(log) == {}
    assert log.collect_aborted_transactions(0, 12) == []
    # Later markers, whose transactions' data stays, keep no horizon.
    assert (
        not found[8].attributes & rb.DELETE_HORIZON_FLAG
        and not found[10].attributes & rb.DELETE_HORIZON_FLAG
    )
    assert cleaner.clean_once(t2 + RETENTION - 1, TP, force=True) is not None
    assert sorted(markers(log)) == [4, 5, 8, 10]
    assert cleaner.clean_once(t2 + RETENTION, TP, force=True) is not None
    assert sorted(markers(log)) == [8, 10]
    assert kv(log) == [
        (0, b"k2", b"old"),
        (6, b"k1", b"p1"),
        (7, b"k4", b"a4"),
        (9, b"k5", b"b5"),
        (11, b"x", b"y"),
    ]
    mgr.shutdown()


def test_the_last_batch_of_a_producer_stays_with_its_abort(tmp_path):
    """A producer whose last data is an aborted batch: the batch stays (empty, for its
    sequence), so its transaction still has data here, and its ABORT and entry stay too."""
    mgr, log, cleaner = new_manager(str(tmp_path), config())
    w = Writer(log)
    w.plain((b"k", b"v"))
    first = w.txn(C, (b"k", b"aborted"), (b"j", b"aborted"))
    m = w.end(C, commit=False)
    w.roll()
    w.plain((b"x", b"y"))
    log.update_high_watermark(log.log_end_offset)
    for t in (T0 + 1, T0 + 2, T0 + 2 + RETENTION):
        assert cleaner.clean_once(t, TP, force=True) is not None
        headers = [h for h, _ in read_batches(log)]
        empty = next(h for h in headers if h.base_offset == first)
        assert (
            empty.records_count,
            empty.last_offset_delta,
            empty.producer_id,
            empty.base_sequence,
        ) == (0, 1, C, 0)
        assert empty.is_transactional and not empty.is_control
        assert any(h.base_offset == m and h.is_control for h in headers)
        assert txn_entries(log) == {0: [(C, first, m, m + 1)]}
        assert kv(log) == [(0, b"k", b"v"), (4, b"x", b"y")]
    mgr.shutdown()


def test_open_transactions_are_not_cleaned(tmp_path):
    mgr, log, cleaner = new_manager(str(tmp_path), config())
    w = Writer(log)
    for i in range(4):
        w.plain((b"k", b"%d" % i))
    w.roll()
    open_first = w.txn(A, (b"k", b"open"))
    for i in range(4):
        w.plain((b"k", b"later %d" % i))
    w.roll()
    for i in range(4):
        w.plain((b"k", b"more %d" % i))
    w.roll()
    w.plain((b"x", b"y"))
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == open_first
    _, uncleanable, _ = cleanable_offsets(log, None, T0)
    assert uncleanable == open_first
    second = log.segments[1]
    with open(second.log_path, "rb") as f:
        untouched = f.read()
    stats = cleaner.clean_once(T0 + 1)
    assert stats is not None and stats.end_offset == second.base_offset == open_first
    with open(log.segments[1].log_path, "rb") as f:
        assert f.read() == untouched
    assert [r.value for r in read_records(log)][:1] == [b"3"]
    # Decided, the transaction and everything after it can be cleaned.
    m = w.end(A, commit=False)
    log.update_high_watermark(log.log_end_offset)
    assert (
        cleanable_offsets(log, cleaner.checkpoint_of(*TP), T0)[1] == log.active_segment.base_offset
    )
    assert cleaner.clean_once(T0 + 2) is not None
    assert [r.value for r in read_records(log) if r.key == b"k"] == [b"more 3"]
    # The aborted record is gone; its entry stays with its marker, in the active segment.
    assert txn_entries(log) == {log.active_segment.base_offset: [(A, open_first, m, m + 1)]}
    mgr.shutdown()


def test_a_truncation_lowers_the_checkpoint(tmp_path):
    mgr, log, cleaner = _scenario(tmp_path)
    stats = cleaner.clean_once(T0 + 1)
    assert stats is not None and cleaner.checkpoint_of(*TP) == 11
    log.truncate_to(9)
    assert cleaner.checkpoint_of(*TP) == log.active_segment.base_offset <= 9
    with open(os.path.join(str(tmp_path), "cleaner-offset-checkpoint")) as f:
        assert f.read().splitlines()[2] == f"t 0 {log.active_segment.base_offset}"
    # A truncation above the checkpoint leaves it alone.
    Writer(log).plain((b"z", b"1"), (b"z", b"2"))
    log.roll(now_ms=T0)
    before = cleaner.checkpoint_of(*TP)
    log.truncate_to(log.log_end_offset - 1)
    assert cleaner.checkpoint_of(*TP) == before
    mgr.shutdown()


def test_a_truncation_during_a_cleaning_keeps_the_checkpoint_where_it_was(tmp_path):
    mgr, log, cleaner = _scenario(tmp_path)
    task = cleaner.grab_filthiest(T0 + 1)
    assert task is not None
    stats = task.run(lambda group: cleaner.swap(task, group))
    log.truncate_to(5)  # after the last swap, before the task is done
    cleaner.done(task, stats)
    assert cleaner.checkpoint_of(*TP) is None  # the end offset 11 names offsets gone
    mgr.shutdown()


@pytest.mark.client  # a worker process
@pytest.mark.skipif(not SUPPORTED, reason="the cleaner's worker process needs Linux")
def test_a_cleaning_in_a_worker_process_writes_the_txn_index(tmp_path):
    mgr, log, cleaner = _scenario(tmp_path)
    cleaner.config = CleanerConfig(in_process=True)
    task = cleaner.grab_filthiest(T0 + 1)
    assert task is not None
    stats = run_in_process(task, lambda group: cleaner.swap(task, group), float("inf"))
    cleaner.done(task, stats)
    assert txn_entries(log) == {0: [(A, 1, 4, 3)]}
    assert not leftovers(log.directory)
    assert kv(log)[:2] == [(0, b"k2", b"old"), (6, b"k1", b"p1")]
    mgr.shutdown()


class Crash(BaseException):
    pass


def _sound_txn_indexes(log: Log) -> None:
    """Every entry names an ABORT of its producer in its own segment, in marker order; every
    ABORT whose transaction still has batches before it has one."""
    batches = [h for h, _ in read_batches(log)]
    aborts = {}
    for h, recs in read_batches(log):
        if h.is_control and recs and struct.unpack(">hh", recs[0].key)[1] == 0:
            aborts[h.base_offset] = h.producer_id
    entries = txn_entries(log)
    bases = [s.base_offset for s in log.segments]
    indexed = set()
    for base, es in entries.items():
        nxt = next((b for b in bases if b > base), log.log_end_offset)
        assert [e[2] for e in es] == sorted({e[2] for e in es})
        for pid, first, last, _lso in es:
            assert base <= last < nxt and aborts.get(last) == pid and first <= last
            indexed.add(last)
    for marker_offset, pid in aborts.items():
        previous = [h for h in batches if h.base_offset < marker_offset and h.producer_id == pid]
        opened = previous and previous[-1].is_transactional and not previous[-1].is_control
        if opened:
            assert marker_offset in indexed, f"the abort at {marker_offset} lost its entry"


def test_a_crash_at_every_rename_of_a_swap_leaves_sound_txn_indexes(tmp_path, monkeypatch):
    real = os.rename
    k = 0
    while True:
        mgr, log, cleaner = _scenario(tmp_path / f"crash-{k}")
        calls = [0]

        def crashing(a, b, k=k, calls=calls):
            if calls[0] == k:
                raise Crash(f"rename {k}: {a} -> {b}")
            calls[0] += 1
            real(a, b)

        monkeypatch.setattr(os, "rename", crashing)
        try:
            cleaner.clean_once(T0 + 1)
            finished = True
        except Crash:
            finished = False
        monkeypatch.setattr(os, "rename", real)
        log.close_handles()
        reopened = Log.open(
            log.directory, log.config, recovery_point=log.recovery_point, clean_shutdown=False
        )
        reopened.update_high_watermark(reopened.log_end_offset)
        assert not leftovers(reopened.directory)
        _sound_txn_indexes(reopened)
        assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == [(A, 1)]
        reopened.close()
        if finished:
            break
        k += 1
    assert k >= 8  # the swap's renames were all crashed at


# -- random transactional traffic ---------------------------------------------------------------


def read_committed(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer gets from the log start: records up to the last stable
    offset, dropping those of the aborted transactions the fetch names, as Kafka's clients do
    (a producer's batches from an aborted transaction's first offset up to its ABORT)."""
    lso = log.last_stable_offset
    aborted = sorted(
        (a.first_offset, a.producer_id)
        for a in log.collect_aborted_transactions(log.log_start_offset, lso)
    )
    dropping: set[int] = set()
    out = []
    for header, recs in read_batches(log):
        if header.base_offset >= lso:
            break
        while aborted and aborted[0][0] <= header.last_offset:
            dropping.add(aborted.pop(0)[1])
        if header.is_control:
            if recs and struct.unpack(">hh", recs[0].key)[1] == 0:
                dropping.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in dropping:
            continue
        out.extend((r.offset, r.key, r.value) for r in recs)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_random_transactions_read_committed_before_and_after_cleanings(tmp_path, seed):
    rng = random.Random(seed)
    mgr, log, cleaner = new_manager(
        str(tmp_path), config(segment_bytes=700, delete_retention_ms=1 << 40)
    )
    w = Writer(log)
    # offset -> (key, value, producer id or -1); and each producer's open records
    records: dict[int, tuple[bytes, bytes]] = {}
    committed: set[int] = set()
    pending: dict[int, list[int]] = {}
    now = T0
    for step in range(160):
        r = rng.random()
        pid = rng.choice([A, B, C])
        if r < 0.45:
            recs = [
                (b"k%d" % rng.randrange(8), b"%d.%d" % (step, i)) for i in range(rng.randint(1, 3))
            ]
            first = w.txn(pid, *recs)
            for i, rec in enumerate(recs):
                records[first + i] = rec
            pending.setdefault(pid, []).extend(range(first, first + len(recs)))
        elif r < 0.7:
            commit = rng.random() < 0.6
            w.end(pid, commit)
            if commit:
                committed.update(pending.get(pid, []))
            pending.pop(pid, None)
        else:
            recs = [
                (b"k%d" % rng.randrange(8), b"%d.p%d" % (step, i)) for i in range(rng.randint(1, 3))
            ]
            first = w.plain(*recs)
            for i, rec in enumerate(recs):
                records[first + i] = rec
                committed.add(first + i)
        log.update_high_watermark(log.log_end_offset)
        if step % 40 == 39:
            lso = log.last_stable_offset
            open_firsts = [min(offs) for offs in pending.values() if offs]
            assert lso == min([log.log_end_offset, *open_firsts])
            got = read_committed(log)
            for offset, key, value in got:
                assert offset in committed and records[offset] == (key, value)
            # Before any cleaning every committed record below the LSO is there; after, the
            # latest committed value of every key is.
            latest: dict[bytes, int] = {}
            for offset in sorted(o for o in committed if o < lso):
                latest[records[offset][0]] = offset
            present = {o for o, _k, _v in got}
            assert set(latest.values()) <= present
            if step == 39:
                assert present == {o for o in committed if o < lso}
            w.roll()
            now += 1000
            cleaner.clean_once(now, TP, force=True)
    # Every transaction ends; everything is cleaned: only the latest committed values remain,
    # and no record of an aborted transaction.
    for pid in list(pending):
        w.end(pid, commit=False)
    pending.clear()
    w.roll()
    w.plain((b"end", b"x"))
    w.roll()
    log.update_high_watermark(log.log_end_offset)
    cleaner.clean_once(now + 1000, TP, force=True)
    raw = [
        (r.offset, r.key, r.value) for r in read_records(log) if not r.key.startswith(b"\x00\x00")
    ]
    assert all(o in committed for o, _k, _v in raw[:-1])
    latest = {}
    for offset in sorted(committed):
        latest[records[offset][0]] = offset
    assert sorted(o for o, _k, _v in raw[:-1]) == sorted(latest.values())
    assert read_committed(log) == raw
    mgr.shutdown()
