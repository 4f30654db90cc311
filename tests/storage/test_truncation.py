"""Truncation (replication's truncate_to and truncate_fully_and_start_at) and log start moves:
whole batches only, offsets kept consistent, indexes left as a rebuild would make them."""

from __future__ import annotations

import os
import random
import shutil

from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch
from gregor.storage.config import LogConfig
from gregor.storage.log import Log

from .storage_helpers import (
    all_batches,
    assert_indexes_follow_rule,
    assert_same_as_fresh,
    make_batch,
)

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=200, segment_index_bytes=65536)


def _filled(path: str, batches: int = 80, seed: int = 1) -> Log:
    log = Log.open(path, CONFIG, now_ms=0)
    rng = random.Random(seed)
    for i in range(batches):
        log.append(
            make_batch(
                rng,
                records=rng.randint(1, 4),
                value_size=rng.choice([10, 150]),
                timestamp=1000 + rng.randint(0, 5000),
            ),
            leader_epoch=i // 30,
            now_ms=0,
        )
    return log


def test_truncate_at_many_offsets_matches_a_fresh_log(memory_tmp):
    tmp_path = memory_tmp  # in memory: 25 logs of many rolls, each an fsync on a disk
    rng = random.Random(2)
    pristine = _filled(str(tmp_path / "pristine" / "t-0"))
    before = all_batches(pristine)
    pristine.close()
    for n, target in enumerate(sorted(rng.sample(range(0, 200), 25))):
        shutil.copytree(pristine.directory, str(tmp_path / f"l{n}" / "t-0"))
        log = Log.open(str(tmp_path / f"l{n}" / "t-0"), CONFIG, now_ms=0)
        assert all_batches(log) == before
        log.truncate_to(target)
        # Whole batches: the log ends at the start of the batch that held `target`.
        kept = [b for b in before if rb.read_header(b).last_offset < target]
        assert all_batches(log) == kept
        end = rb.read_header(kept[-1]).next_offset if kept else 0
        assert log.log_end_offset == end
        assert_indexes_follow_rule(log)
        assert_same_as_fresh(log, str(tmp_path / f"f{n}"))
        # Appends continue at the new end, and a crash now recovers to the same log.
        log.append(build_batch([(b"k", b"after")]), now_ms=0)
        after = all_batches(log)
        log.close_handles()
        log = Log.open(log.directory, CONFIG, clean_shutdown=False, now_ms=0)
        assert all_batches(log) == after
        log.close_handles()


def test_truncation_keeps_no_time_entry_past_the_cut(tmp_path):
    # Regression: a time-index entry made with an offset entry that truncation removed (or the
    # one made at roll) outlived it, so the index differed from a rebuild's.
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200, segment_index_bytes=65536)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    for ts, size in [(10, 250), (50, 100), (100, 100), (20, 100)]:
        log.append(build_batch([(b"k", b"v" * size)], base_timestamp=ts), now_ms=0)
    seg = log.active_segment
    assert [tuple(e) for e in seg.time_index.all_entries()] == [(50, 1), (100, 2)]
    log.truncate_to(3)  # removes the batch whose offset entry carried (100, 2)
    assert [tuple(e) for e in seg.time_index.all_entries()] == [(50, 1)]
    assert seg.largest_timestamp == 100  # still known, from the data
    assert_indexes_follow_rule(log)
    assert log.offset_for_timestamp(60) == (2, 100)
    # And into an inactive segment, which truncation makes active again.
    log = Log.open(str(tmp_path / "u-0"), config, now_ms=0)
    for ts, size in [(10, 250), (50, 100), (100, 30), (20, 100), (30, 100)]:
        log.append(build_batch([(b"k", b"v" * size)], base_timestamp=ts), now_ms=0)
    log.roll(now_ms=0)
    log.append(build_batch([(b"k", b"v")], base_timestamp=5), now_ms=0)
    seg = log.segments[0]
    assert [e.offset for e in seg.offset_index.all_entries()] == [1, 3]
    assert [tuple(e) for e in seg.time_index.all_entries()] == [(50, 1), (100, 2)]
    log.truncate_to(4)  # into segment 0: the offset entry that carried (100, 2) stays
    assert log.active_segment is seg and [e.offset for e in seg.offset_index.all_entries()] == [
        1,
        3,
    ]
    assert [tuple(e) for e in seg.time_index.all_entries()] == [(50, 1), (100, 2)]
    log.truncate_to(3)
    assert [tuple(e) for e in seg.time_index.all_entries()] == [(50, 1)]
    assert_indexes_follow_rule(log)
    assert log.offset_for_timestamp(60) == (2, 100)


def test_truncate_into_a_batch_below_the_log_start(tmp_path):
    # Regression: the log start sat inside the batch that truncation removed, and stayed above
    # the new log end.
    log = Log.open(str(tmp_path / "t-0"), CONFIG, now_ms=0)
    log.append(build_batch([(b"k", b"v")] * 5), now_ms=0)  # 0-4
    log.append(build_batch([(b"k", b"v")] * 5), now_ms=0)  # 5-9
    log.update_high_watermark(10)
    log.increment_log_start_offset(7)
    log.truncate_to(8)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (5, 5, 5)
    assert log.read(5, 100) is None
    assert log.append(build_batch([(b"k", b"new")]), now_ms=0).first_offset == 5
    assert rb.read_header(log.read_bytes(5, 100)).base_offset == 5


def test_truncate_fully_and_start_at(tmp_path):
    log = _filled(str(tmp_path / "t-0"))
    log.update_high_watermark(log.log_end_offset)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1000, 1000)
    assert [s.base_offset for s in log.segments] == [1000]
    assert sorted(n for n in os.listdir(log.directory) if n.endswith(".log")) == [
        f"{1000:020d}.log"
    ]
    assert log.leader_epochs.entries == []
    assert log.append(build_batch([(b"k", b"v")]), leader_epoch=9, now_ms=0).first_offset == 1000
    assert log.leader_epochs.entries == [(9, 1000)]
    log.close()
    log = Log.open(log.directory, CONFIG, log_start_offset=1000, now_ms=0)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1001)


def test_truncate_to_the_log_start_or_below_empties_the_log(tmp_path):
    log = _filled(str(tmp_path / "t-0"))
    log.update_high_watermark(100)
    log.increment_log_start_offset(60)
    log.truncate_to(55)
    assert (log.log_start_offset, log.log_end_offset) == (55, 55)
    assert all_batches(log) == []


def test_increment_log_start_offset_deletes_whole_segments_only(tmp_path):
    log = _filled(str(tmp_path / "t-0"))
    bases = [s.base_offset for s in log.segments]
    log.update_high_watermark(log.log_end_offset)
    target = bases[3] + 1
    log.increment_log_start_offset(target)
    assert [s.base_offset for s in log.segments] == bases[3:]
    assert log.log_start_offset == target
    first = rb.read_header(log.read_bytes(target, 1))
    assert first.base_offset <= target <= first.last_offset  # the batch holding the start
    # Moving it back is a no-op.
    assert log.increment_log_start_offset(target - 5) == target
