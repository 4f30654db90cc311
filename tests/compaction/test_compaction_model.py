"""Log compaction against a model of what was appended: random keys, values, tombstones, codecs
and producers across many small segments, cleaned again and again with an injected clock."""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import replace

import pytest
from compaction_helpers import (
    Model,
    Rec,
    append_random,
    check_deduplicated,
    check_log,
    index_entries,
    leftovers,
    new_manager,
    read_batches,
    read_records,
    reopen_unclean,
)

from gregor.clock import SYSTEM_CLOCK, Clock, ManualClock
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch
from gregor.storage import checkpoints
from gregor.storage.cleaner import (
    CHECKPOINT_FILE,
    CleanerConfig,
    CleanerStats,
    CorruptSegment,
    LogCleaner,
    OffsetMap,
    Throttler,
    UncleanableLog,
)
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.producer_state import AppendOrigin

T0 = 1_700_000_000_000
RETENTION = 60_000
TP = ("t", 0)


def config(**changes) -> LogConfig:
    base = LogConfig(
        segment_bytes=3000,
        index_interval_bytes=300,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=RETENTION,
        file_delete_delay_ms=0,
        segment_ms=1 << 60,
    )
    return replace(base, **changes)


def horizon_batches(log) -> list[rb.BatchHeader]:
    return [h for h, _ in read_batches(log) if h.attributes & rb.DELETE_HORIZON_FLAG]


@pytest.mark.parametrize("seed", range(12))
def test_random_traffic_keeps_the_latest_value_of_every_key(tmp_path, seed):
    rng = random.Random(seed)
    cfg = config(
        segment_bytes=rng.choice([1500, 3000, 8000]),
        index_interval_bytes=rng.choice([64, 300, 1000]),
        min_cleanable_dirty_ratio=rng.choice([0.0, 0.2, 0.5]),
    )
    mgr, log, cleaner = new_manager(str(tmp_path), cfg)
    model = Model()
    now = T0
    cleanings: list[int] = []
    for _ in range(8):
        append_random(
            log, model, rng, batches=rng.randint(10, 60), keys=rng.choice([5, 30, 100]), now_ms=now
        )
        now += rng.choice([1000, 20_000, 50_000])
        stats = cleaner.clean_once(now)
        if stats is not None:
            cleanings.append(now)
            check_deduplicated(log, model, stats.end_offset)
        got = check_log(log, model)
        # A latest tombstone may go only once a cleaning ran past its delete horizon, which is
        # at least delete.retention.ms after it was appended.
        present = {r.offset for r in got}
        for rec in model.latest().values():
            if rec.value is None and rec.offset not in present:
                assert any(t > rec.timestamp + RETENTION for t in cleanings)
        # Every delete horizon is a cleaning's time plus delete.retention.ms.
        for h in horizon_batches(log):
            assert h.base_timestamp - RETENTION in cleanings
    assert not leftovers(log.directory)

    # Everything but one new batch becomes inactive and is cleaned: exactly the latest record
    # of every key remains below it, in offset order, offsets kept; tombstones too, but for
    # those whose delete horizon a cleaning has passed already (checked above).
    log.roll(now_ms=now)
    append_random(log, model, rng, batches=1, keys=1, now_ms=now, tombstones=0.0, producers=0)
    active = log.active_segment.base_offset
    while (stats := cleaner.clean_once(now, force=True)) is not None and stats.end_offset < active:
        pass
    assert cleaner.checkpoint_of(*TP) == active
    latest = sorted(model.latest(below=active).values(), key=lambda r: r.offset)
    cleaned = [r for r in read_records(log) if r.offset < active]
    assert [r for r in latest if r.value is not None] == [r for r in cleaned if r.value is not None]
    assert {r.offset for r in cleaned} <= {r.offset for r in latest}

    # Past every delete horizon, the tombstones go as well.
    now += RETENTION + 1
    stats = cleaner.clean_once(now, TP, force=True)
    assert stats is not None
    assert [r for r in read_records(log) if r.offset < active] == [
        r for r in latest if r.value is not None
    ]
    check_log(log, model)

    # The cleaned segments are what recovery rebuilds: same records, same index entries.
    before, entries = read_records(log), index_entries(log)
    mgr.purge_deleted(force=True)
    reopened = reopen_unclean(log)
    assert read_records(reopened) == before
    assert index_entries(reopened) == entries
    reopened.close()


def test_min_compaction_lag_keeps_young_records(tmp_path):
    lag = 30_000
    mgr, log, cleaner = new_manager(str(tmp_path), config(min_compaction_lag_ms=lag))
    model = Model()
    rng = random.Random(7)
    append_random(log, model, rng, batches=60, keys=10, now_ms=T0, tombstones=0.0)
    young_from = log.log_end_offset
    append_random(log, model, rng, batches=60, keys=10, now_ms=T0 + 100_000, tombstones=0.0)
    log.roll(now_ms=T0 + 100_000)
    append_random(log, model, rng, batches=1, keys=1, now_ms=T0 + 100_000, tombstones=0.0)
    young = [o for o in model.records if young_from <= o < log.active_segment.base_offset]

    stats = cleaner.clean_once(T0 + 100_000 + lag - 1000)  # their timestamps go 50 ms back
    assert stats is not None and stats.end_offset <= young_from
    present = {r.offset for r in check_log(log, model)}
    # Records younger than the lag all stay, duplicates included; the old ones are cleaned.
    assert set(young) <= present
    check_deduplicated(log, model, stats.end_offset)

    # Once they are old enough, they are cleaned too.
    stats = cleaner.clean_once(T0 + 100_000 + lag + 1000)
    assert stats is not None and stats.end_offset == log.active_segment.base_offset
    check_deduplicated(log, model, stats.end_offset)
    assert not set(young) <= {r.offset for r in check_log(log, model)}


def test_max_compaction_lag_cleans_below_the_dirty_ratio(tmp_path):
    max_lag = 3_600_000
    mgr, log, cleaner = new_manager(
        str(tmp_path), config(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=max_lag)
    )
    model = Model()
    rng = random.Random(3)
    append_random(log, model, rng, batches=100, keys=20, now_ms=T0)
    assert cleaner.clean_once(T0, force=True) is not None  # a clean section
    append_random(log, model, rng, batches=20, keys=20, now_ms=T0 + 1000)
    log.roll(now_ms=T0 + 1000)
    append_random(log, model, rng, batches=1, keys=1, now_ms=T0 + 1000)
    assert cleaner.clean_once(T0 + 2000) is None  # far below 99% dirty
    # The first dirty segment began while the first batches were appended (at T0 - 50 .. T0):
    # the oldest dirty record is as old as that.
    assert cleaner.clean_once(T0 + max_lag - 100) is None  # not yet past the lag
    stats = cleaner.clean_once(T0 + 1000 + max_lag + 100)
    assert stats is not None and stats.end_offset == log.active_segment.base_offset
    check_deduplicated(log, model, stats.end_offset)


def test_a_full_offset_map_cleans_up_to_where_it_got(tmp_path):
    # Room for about 40 keys of 7-8 bytes: each cleaning maps part of the dirty section.
    small = CleanerConfig(dedupe_buffer_size=int(40 * (OffsetMap.ENTRY_BYTES + 8) / 0.9))
    mgr, log, cleaner = new_manager(str(tmp_path), config(), small)
    model = Model()
    rng = random.Random(11)
    append_random(log, model, rng, batches=300, keys=200, now_ms=T0, tombstones=0.05)
    log.roll(now_ms=T0)
    append_random(log, model, rng, batches=1, keys=1, now_ms=T0)
    active = log.active_segment.base_offset
    ends = []
    while (stats := cleaner.clean_once(T0)) is not None:
        ends.append(stats.end_offset)
        assert cleaner.checkpoint_of(*TP) == stats.end_offset
        check_deduplicated(log, model, stats.end_offset)
        check_log(log, model)
        if stats.end_offset == active:
            break
    assert len(ends) > 3 and ends == sorted(ends) and ends[-1] == active


def test_batches_keep_offsets_codec_producer_fields_and_log_append_time(tmp_path):
    mgr, log, cleaner = new_manager(str(tmp_path), config(message_timestamp_type="LogAppendTime"))
    first = build_batch(
        [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")],
        base_timestamp=T0,
        compression_type=rb.COMPRESSION_GZIP,
        producer_id=7,
        producer_epoch=3,
        base_sequence=10,
    )
    log.append(first, now_ms=T0 + 5)
    log.append(build_batch([(b"a", b"5"), (b"c", b"6")], base_timestamp=T0), now_ms=T0 + 6)
    log.append(
        build_batch(
            [(b"z", b"producer 7 goes on")], producer_id=7, producer_epoch=3, base_sequence=14
        ),
        now_ms=T0 + 7,
    )
    log.roll(now_ms=T0 + 7)
    log.append(build_batch([(b"x", b"y")]), now_ms=T0 + 8)
    log.update_high_watermark(log.log_end_offset)
    assert cleaner.clean_once(T0 + 10) is not None
    (h1, r1), (h2, r2), (h3, _), _ = read_batches(log)
    assert (h1.base_offset, h1.last_offset_delta, h1.records_count) == (0, 3, 2)
    assert (h1.compression, h1.producer_id, h1.producer_epoch, h1.base_sequence) == (
        rb.COMPRESSION_GZIP,
        7,
        3,
        10,
    )
    assert h1.is_log_append_time and h1.max_timestamp == T0 + 5
    assert [(r.offset, r.key, r.value) for r in r1] == [(1, b"b", b"2"), (3, b"d", b"4")]
    assert (h2.base_offset, h2.records_count, [r.key for r in r2]) == (4, 2, [b"a", b"c"])
    assert h2.max_timestamp == T0 + 6
    assert h3.base_offset == 6


def test_the_last_batch_of_a_producer_stays_until_the_producer_expires(tmp_path):
    expiry = 1000 * 3600
    mgr, log, cleaner = new_manager(str(tmp_path), config())
    log.append(
        build_batch(
            [(b"a", b"1"), (b"b", b"2")],
            base_timestamp=T0,
            producer_id=5,
            producer_epoch=1,
            base_sequence=40,
        ),
        now_ms=T0,
    )
    log.append(build_batch([(b"a", b"3"), (b"b", b"4")], base_timestamp=T0), now_ms=T0)
    log.append(build_batch([(b"a", b"5"), (b"b", b"6")], base_timestamp=T0), now_ms=T0)
    log.roll(now_ms=T0)
    log.append(build_batch([(b"a", b"7")], base_timestamp=T0), now_ms=T0)
    log.update_high_watermark(log.log_end_offset)
    assert cleaner.clean_once(T0 + 1) is not None
    batches = read_batches(log)
    # Producer 5's only batch lost both records but stays, empty, for its sequence; the middle
    # batch goes; the last one before the active segment stays (it ends the cleaning round).
    (empty, recs), (kept, kept_recs), _active = batches
    assert (empty.base_offset, empty.last_offset_delta, empty.records_count, recs) == (0, 1, 0, [])
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (5, 1, 40)
    assert empty.last_sequence == 41 and empty.max_timestamp == T0
    assert kept.base_offset == 4 and [r.value for r in kept_recs] == [b"5", b"6"]
    # Past producer.id.expiration.ms the producer state forgets it, and the empty batch goes.
    assert log.producer_state.remove_expired(T0 + expiry, expiry) == 1
    assert cleaner.clean_once(T0 + expiry + 1, TP, force=True) is not None
    assert [h.base_offset for h, _ in read_batches(log)] == [4, 6]


def test_tombstones_get_a_delete_horizon_and_go_after_it(tmp_path):
    mgr, log, cleaner = new_manager(str(tmp_path), config())
    log.append(build_batch([(b"k", b"old"), (b"j", b"keep")], base_timestamp=T0), now_ms=T0)
    log.append(build_batch([(b"k", None), (b"i", b"x")], timestamps=[T0 + 10, T0 + 20]), now_ms=T0)
    log.roll(now_ms=T0)
    log.append(build_batch([(b"x", b"y")], base_timestamp=T0), now_ms=T0)
    log.update_high_watermark(log.log_end_offset)

    t1 = T0 + 1000
    assert cleaner.clean_once(t1) is not None
    batches = read_batches(log)
    tomb_header, tomb_records = batches[1]
    assert tomb_header.attributes & rb.DELETE_HORIZON_FLAG
    assert tomb_header.base_timestamp == t1 + RETENTION
    # The records keep their timestamps (now deltas from the horizon) and offsets.
    assert [(r.offset, r.key, r.value, r.timestamp) for r in tomb_records] == [
        (2, b"k", None, T0 + 10),
        (3, b"i", b"x", T0 + 20),
    ]
    assert tomb_header.max_timestamp == T0 + 20
    assert [r.key for r in batches[0][1]] == [b"j"]

    assert cleaner.clean_once(t1 + RETENTION - 1, TP, force=True) is not None
    assert any(r.key == b"k" for r in read_records(log))
    assert cleaner.clean_once(t1 + RETENTION, TP, force=True) is not None
    assert [(r.key, r.value) for r in read_records(log)] == [
        (b"j", b"keep"),
        (b"i", b"x"),
        (b"x", b"y"),
    ]


def test_control_batches_are_kept_as_they_are(tmp_path):
    mgr, log, cleaner = new_manager(str(tmp_path), config())
    log.append(
        build_batch(
            [(b"k", b"1")], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True
        ),
        now_ms=T0,
    )
    marker = build_batch(
        [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
        producer_id=9,
        producer_epoch=0,
        transactional=True,
        control=True,
    )
    log.append(marker, now_ms=T0, origin=AppendOrigin.COORDINATOR)
    log.append(build_batch([(b"k", b"2")]), now_ms=T0)
    log.roll(now_ms=T0)
    log.append(build_batch([(b"x", b"y")]), now_ms=T0)
    log.update_high_watermark(log.log_end_offset)
    stored_marker = log.read_bytes(1, 1 << 20)[: len(marker)]
    assert cleaner.clean_once(T0) is not None
    headers = [h for h, _ in read_batches(log)]
    # Producer 9's data batch lost its record and stays empty (its sequence); the marker stays.
    assert (headers[0].base_offset, headers[0].records_count, headers[0].producer_id) == (0, 0, 9)
    assert headers[1].is_control and bytes(log.read_bytes(1, 1 << 20)[: len(marker)]) == bytes(
        stored_marker
    )
    assert [r.value for r in read_records(log) if r.key == b"k"] == [b"2"]


def test_the_cleaner_offset_checkpoint(tmp_path):
    mgr, log, cleaner = new_manager(str(tmp_path), config())
    rng = random.Random(5)
    append_random(log, Model(), rng, batches=50, keys=10, now_ms=T0)
    log.roll(now_ms=T0)
    append_random(log, Model(), rng, batches=1, keys=1, now_ms=T0)
    stats = cleaner.clean_once(T0)
    assert stats is not None and stats.end_offset == log.active_segment.base_offset
    path = os.path.join(str(tmp_path), CHECKPOINT_FILE)
    with open(path) as f:
        assert f.read() == f"0\n1\nt 0 {stats.end_offset}\n"
    # A new cleaner (a restart) starts from it: nothing left to clean.
    again = LogCleaner(mgr)
    assert again.checkpoint_of(*TP) == stats.end_offset
    assert again.clean_once(T0) is None
    # A checkpoint beyond the log end (the log was truncated) starts over from the log start.
    checkpoints.write_offsets(path, {TP: log.log_end_offset + 100})
    again = LogCleaner(mgr)
    assert again.clean_once(T0) is not None
    assert again.checkpoint_of(*TP) == log.active_segment.base_offset


def _dirty_log(tmp_path, seed=1):
    mgr, log, cleaner = new_manager(str(tmp_path), config(segment_bytes=1500))
    model = Model()
    rng = random.Random(seed)
    append_random(log, model, rng, batches=80, keys=15, now_ms=T0)
    log.roll(now_ms=T0)
    append_random(log, model, rng, batches=2, keys=15, now_ms=T0)
    return mgr, log, cleaner, model


@pytest.mark.parametrize(
    "change",
    ["truncate", "retention", "delete-records", "roll-and-append", "partition-deleted", "closed"],
)
def test_a_swap_is_refused_when_the_log_changed_meanwhile(tmp_path, change):
    mgr, log, cleaner, model = _dirty_log(tmp_path)
    task = cleaner.grab_filthiest(T0)
    assert task is not None
    calls = []

    def swap(group):
        # The log's thread changes the log while the worker cleaned the first group.
        if not calls:
            if change == "truncate":
                log.truncate_to(log.segments[1].base_offset + 1)
                for off in [o for o in model.records if o >= log.log_end_offset]:
                    del model.records[off]
            elif change == "retention":
                log.delete_oldest_segments(1)
                for off in [o for o in model.records if o < log.log_start_offset]:
                    del model.records[off]
            elif change == "delete-records":
                # Moving the log start within a segment leaves the segments: the swap goes on.
                log.increment_log_start_offset(log.segments[0].base_offset + 1)
            elif change == "roll-and-append":
                append_random(log, model, random.Random(2), batches=30, keys=15, now_ms=T0)
            elif change == "partition-deleted":
                mgr.delete("t", 0)
            elif change == "closed":
                log.close()
        calls.append(group)
        return cleaner.swap(task, group)

    stats = None
    try:
        stats = task.run(swap)
    except Exception as exc:  # CleaningAborted
        assert type(exc).__name__ == "CleaningAborted"
    cleaner.done(task, stats)
    if change in ("partition-deleted", "closed"):
        assert stats is None
        return
    assert not leftovers(log.directory)
    if change in ("truncate", "retention"):
        assert stats is None and cleaner.checkpoint_of(*TP) is None
    else:
        assert stats is not None and len(calls) > 1
    if change == "delete-records":
        model.records = {o: r for o, r in model.records.items() if o >= log.log_start_offset}
    check_log(log, model)
    # And the next cleaning goes through.
    stats = cleaner.clean_once(T0, TP, force=True)
    assert stats is not None
    check_deduplicated(log, model, stats.end_offset)
    check_log(log, model)


def test_a_reader_of_a_replaced_segment_keeps_reading_it(tmp_path):
    mgr, log, cleaner, model = _dirty_log(tmp_path)
    mgr_config = log.config
    assert mgr_config.file_delete_delay_ms == 0
    before = log.read(0, 1 << 20)
    assert before is not None
    held = before.dup()  # what a fetch in flight holds
    expected = held.read()
    assert cleaner.clean_once(T0) is not None
    assert held.read() == expected  # the old file, renamed .deleted, is still open
    mgr.purge_deleted(force=True)
    assert held.read() == expected  # unlinked, still readable through the fd
    os.close(held.fd)


def test_records_without_a_key_in_the_log_are_dropped_when_cleaned(tmp_path):
    # Produce refuses them on compacted topics; a topic switched to compact may hold some.
    mgr, log, cleaner = new_manager(str(tmp_path), config(cleanup_policy="delete"))
    log.append(build_batch([(None, b"no key"), (b"k", b"1")]), now_ms=T0)
    log.roll(now_ms=T0)
    log.append(build_batch([(b"x", b"y")]), now_ms=T0)
    log.update_high_watermark(log.log_end_offset)
    assert cleaner.clean_once(T0) is None  # not compacted
    log.update_config(config(cleanup_policy="compact,delete"))
    assert cleaner.clean_once(T0) is not None
    assert [(r.key, r.value) for r in read_records(log)] == [(b"k", b"1"), (b"x", b"y")]


def test_the_model_itself(tmp_path):
    """The helpers' view of an uncleaned log is the model (so the checks above mean something)."""
    mgr, log, cleaner = new_manager(str(tmp_path), config())
    model = Model()
    append_random(log, model, random.Random(0), batches=40, keys=8, now_ms=T0)
    got = check_log(log, model)
    assert got == [model.records[o] for o in sorted(model.records)]
    assert all(isinstance(r, Rec) for r in got)


def test_a_partition_created_again_does_not_inherit_the_checkpoint(tmp_path):
    mgr, log, cleaner = new_manager(str(tmp_path), config())
    rng = random.Random(9)
    append_random(log, Model(), rng, batches=60, keys=10, now_ms=T0)
    log.roll(now_ms=T0)
    append_random(log, Model(), rng, batches=1, keys=1, now_ms=T0)
    assert cleaner.clean_once(T0) is not None
    assert cleaner.checkpoint_of(*TP) == log.active_segment.base_offset
    mgr.delete("t", 0)
    again = mgr.get_or_create("t", 0)
    model = Model()
    append_random(again, model, rng, batches=60, keys=10, now_ms=T0)
    again.roll(now_ms=T0)
    append_random(again, model, rng, batches=1, keys=1, now_ms=T0)
    stats = cleaner.clean_once(T0)
    # Cleaned from its own start, not from where the deleted partition's cleaning ended.
    assert stats is not None and stats.end_offset == again.active_segment.base_offset
    check_deduplicated(again, model, stats.end_offset)


def test_a_corrupt_segment_makes_the_log_uncleanable(tmp_path):
    mgr, log, cleaner = new_manager(str(tmp_path), config())
    model = Model()
    rng = random.Random(4)
    append_random(log, model, rng, batches=60, keys=10, now_ms=T0)
    log.roll(now_ms=T0)
    append_random(log, model, rng, batches=1, keys=1, now_ms=T0)
    victim = log.segments[1]
    with open(victim.log_path, "r+b") as f:  # a byte of the first batch's records flips
        f.seek(rb.HEADER_SIZE + 3)
        byte = f.read(1)
        f.seek(rb.HEADER_SIZE + 3)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptSegment):
        cleaner.clean_once(T0)
    assert TP in cleaner.uncleanable and not cleaner.in_progress
    assert not leftovers(log.directory)
    assert cleaner.clean_once(T0) is None  # left alone until a restart


def test_a_dedupe_buffer_smaller_than_one_batch_makes_the_log_uncleanable(tmp_path):
    mgr, log, cleaner = new_manager(str(tmp_path), config(), CleanerConfig(dedupe_buffer_size=100))
    log.append(build_batch([(b"key-%d" % i, b"v") for i in range(20)]), now_ms=T0)
    log.roll(now_ms=T0)
    log.append(build_batch([(b"x", b"y")]), now_ms=T0)
    log.update_high_watermark(log.log_end_offset)
    with pytest.raises(UncleanableLog, match="dedupe.buffer.size"):
        cleaner.clean_once(T0)
    assert TP in cleaner.uncleanable


def _throttled_cleaning(
    path: str, rate: float, clock: Clock
) -> tuple[Log, Model, CleanerStats, float]:
    """A cleaning of about 200 KB at `rate` bytes/s: the log, its model, the cleaning's stats and
    how long it took on the wall clock."""
    _mgr, log, cleaner = new_manager(
        path, config(), CleanerConfig(io_max_bytes_per_second=rate), clock=clock
    )
    model = Model()
    append_random(log, model, random.Random(6), batches=150, keys=20, now_ms=T0, value_size=400)
    log.roll(now_ms=T0)
    append_random(log, model, random.Random(7), batches=1, keys=1, now_ms=T0)
    started = time.monotonic()
    stats = cleaner.clean_once(T0)
    elapsed = time.monotonic() - started
    assert stats is not None
    return log, model, stats, elapsed


def test_the_throttle_holds_the_cleaner_to_its_rate(tmp_path):
    rate = 80_000.0
    _log, _model, stats, elapsed = _throttled_cleaning(str(tmp_path), rate, SYSTEM_CLOCK)
    moved = stats.bytes_read + stats.map_bytes_read + stats.bytes_written
    assert moved > 2 * rate  # enough to need more than a one-second window
    assert elapsed >= 0.8 * (moved / rate - 1.0)


def test_the_throttle_sleeps_on_the_log_managers_clock(tmp_path):
    # The rate of the test above, divided by 20: held on the wall clock, this cleaning would
    # take a minute. On a ManualClock its sleeps advance that clock instead, to the same sum.
    rate = 4_000.0
    clock = ManualClock(T0)
    log, model, stats, elapsed = _throttled_cleaning(str(tmp_path), rate, clock)
    moved = stats.bytes_read + stats.map_bytes_read + stats.bytes_written
    waited = moved / rate - 1.0
    assert waited > 30
    assert elapsed < waited / 3  # it did not sleep on the wall clock
    assert clock.monotonic_s() >= 0.8 * waited
    assert stats.elapsed_s == clock.monotonic_s() - stats.start_s >= 0.8 * waited
    check_deduplicated(log, model, stats.end_offset)


def test_throttler_arithmetic():
    clock = ManualClock(monotonic_ms=100_000)
    t = Throttler(1000.0, clock)
    assert t.delay(500) == pytest.approx(0.5)  # 500 bytes at 1000/s take half a second
    clock.advance(500)
    assert t.delay(1000) == pytest.approx(1.0)  # 1500 bytes by 1.5 s from the window's start
    clock.advance(1000)  # past a second: a new window
    assert t.delay(100) == pytest.approx(0.1)
    clock.advance(200)
    assert t.delay(50) == 0.0  # under the rate
    assert Throttler(math.inf).delay(10**12) == 0.0
