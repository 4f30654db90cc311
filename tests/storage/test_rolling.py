"""Segment rolling: by segment.bytes, by segment.ms (batch timestamps), by a full index, and by
relative offset overflow; the old segment's indexes are trimmed to their entries at each roll."""

from __future__ import annotations

import os
import random

import pytest

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch
from gregor.storage.config import LogConfig
from gregor.storage.log import Log

from .storage_helpers import (
    all_batches,
    assert_indexes_follow_rule,
    assert_same_as_fresh,
    make_batch,
    read_file,
)

INDEX_BYTES = 65536


def _assert_inactive_trimmed(log: Log) -> None:
    for seg in log.segments[:-1]:
        assert os.path.getsize(seg.offset_index.path) == 8 * seg.offset_index.entries
        assert os.path.getsize(seg.time_index.path) == 12 * seg.time_index.entries
        assert seg.time_index.entries >= 1  # at least the entry added at roll


def test_roll_by_segment_bytes(tmp_path):
    config = LogConfig(
        segment_bytes=8192, index_interval_bytes=200, segment_index_bytes=INDEX_BYTES
    )
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    rng = random.Random(1)
    appended = []  # (segment base when written, size)
    for i in range(200):
        b = make_batch(
            rng,
            records=rng.randint(1, 4),
            value_size=rng.choice([10, 100, 700]),
            timestamp=1000 + i,
        )
        log.append(b, now_ms=0)
        appended.append((log.active_segment.base_offset, len(b)))
        _assert_inactive_trimmed(log)
        if i % 50 == 0:
            # the active segment's indexes are preallocated, not trimmed
            # (created at its first use)
            path = log.active_segment.offset_index.path
            assert not os.path.exists(path) or os.path.getsize(path) == INDEX_BYTES
    assert len(log.segments) > 5
    sizes = {s.base_offset: s.size for s in log.segments}
    assert all(size <= 8192 for size in sizes.values())
    # A segment rolled only because the next batch would not have fitted.
    for (base, _), (next_base, next_size) in zip(appended, appended[1:], strict=False):
        if next_base != base:
            assert sizes[base] + next_size > 8192
    assert_indexes_follow_rule(log)


def test_roll_by_segment_ms_uses_batch_timestamps(tmp_path):
    config = LogConfig(
        segment_bytes=1 << 20,
        segment_ms=10_000,
        index_interval_bytes=100,
        segment_index_bytes=INDEX_BYTES,
    )
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    stamps = [0, 4000, 9000, 10_000, 10_001, 12_000, 15_000, 20_002, 20_002, 5, 40_000]
    for ts in stamps:
        # The wall clock stays still: only batch timestamps drive these rolls.
        log.append(build_batch([(b"k", b"v" * 50)], base_timestamp=ts), now_ms=0)
    bases = [s.base_offset for s in log.segments]
    # A batch rolls when its timestamp is more than segment.ms past the segment's first batch.
    assert bases == [0, 4, 7, 10]
    _assert_inactive_trimmed(log)
    assert [s.largest_timestamp for s in log.segments] == [10_000, 15_000, 20_002, 40_000]


def test_roll_by_segment_ms_falls_back_to_the_clock(tmp_path):
    config = LogConfig(segment_bytes=1 << 20, segment_ms=10_000, segment_index_bytes=INDEX_BYTES)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=100_000)
    no_ts = build_batch([(b"k", b"v")], base_timestamp=-1)  # NO_TIMESTAMP
    log.append(bytearray(no_ts), now_ms=100_000)
    log.append(bytearray(no_ts), now_ms=109_000)
    assert len(log.segments) == 1
    log.append(bytearray(no_ts), now_ms=110_001)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_because_the_index_is_full(tmp_path):
    # 24 bytes: 3 offset entries, 2 time slots of which one is kept for the roll entry.
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=50, segment_index_bytes=24)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    for i in range(40):
        log.append(build_batch([(b"k", b"v" * 60)], base_timestamp=1000 + i), now_ms=0)
    assert len(log.segments) > 10
    for seg in log.segments[:-1]:
        # Two batches each: the second is indexed and fills the time index (its other slot is
        # kept for the roll entry, not needed here: the indexed batch has the largest time).
        assert seg.offset_index.entries == 1 and seg.time_index.entries == 1
        assert seg.time_index.last_entry().timestamp == seg.largest_timestamp
    _assert_inactive_trimmed(log)
    assert_indexes_follow_rule(log)


def test_many_batches_in_one_append_do_not_overflow_a_small_index(tmp_path):
    # Regression: an append of many batches into a nearly full index raised mid-append,
    # leaving index entries for batches never written.
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=10, segment_index_bytes=48)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    expected = []
    for i in range(6):
        group = [build_batch([(b"k", b"v" * 20)], base_timestamp=100 * i + j) for j in range(8)]
        info = log.append(bytearray(b"".join(group)), now_ms=0)
        assert info.batches == 8
        for j, b in enumerate(group):
            expected.append(rb.read_header(b)._replace(base_offset=info.first_offset + j))
    assert [rb.read_header(b).base_offset for b in all_batches(log)] == [
        h.base_offset for h in expected
    ]
    assert all(s.offset_index.entries <= 6 and s.time_index.entries <= 4 for s in log.segments)
    assert_indexes_follow_rule(log)
    assert_same_as_fresh(log, str(tmp_path))
    # A crash now and a rebuild give the same indexes.
    log.close_handles()
    log = Log.open(str(tmp_path / "t-0"), config, clean_shutdown=False, now_ms=0)
    assert_indexes_follow_rule(log)


def test_roll_by_relative_offset_overflow(tmp_path):
    config = LogConfig(
        segment_bytes=1 << 20, index_interval_bytes=50, segment_index_bytes=INDEX_BYTES
    )
    d = str(tmp_path / "t-0")
    log = Log.open(d, config, now_ms=0)
    jump = (1 << 31) + 5
    batches = [
        build_batch([(b"a", b"x" * 80)] * 2, base_offset=0),
        build_batch([(b"b", b"x" * 80)] * 2, base_offset=10),
        # still fits: last offset exactly base + 2^31 - 1
        build_batch([(b"c", b"x" * 80)] * 3, base_offset=(1 << 31) - 3),
        # offsets jump past what an int32 relative offset can hold: a new segment
        build_batch([(b"d", b"x" * 80)] * 3, base_offset=jump),
        build_batch([(b"e", b"x" * 80)], base_offset=jump + 3),
    ]
    for b in batches:
        log.append(bytearray(b), assign_offsets=False, now_ms=0)  # a follower append
    assert [s.base_offset for s in log.segments] == [0, jump]
    assert log.log_end_offset == jump + 4
    assert log.segments[0].offset_index.last_offset == (1 << 31) - 1  # relative offset int32 max
    _assert_inactive_trimmed(log)
    # Offsets come back as written, from both segments, including in the gap.
    for offset, want in [
        (0, 0),
        (5, 10),
        (10, 10),
        ((1 << 31) - 1, (1 << 31) - 3),
        (jump - 1, jump),
        (jump + 3, jump + 3),
    ]:
        assert rb.read_header(log.read_bytes(offset, 1)).base_offset == want
    assert [bytes(b) for b in all_batches(log)] == [bytes(b) for b in batches]
    assert_indexes_follow_rule(log)
    # A follower append may not go backwards.
    with pytest.raises(KafkaError) as info:
        log.append(
            build_batch([(b"z", b"z")], base_offset=jump + 1), assign_offsets=False, now_ms=0
        )
    assert info.value.code == errors.INVALID_RECORD
    # And it survives both kinds of reopen.
    log.close()
    for clean in (True, False):
        log = Log.open(d, config, clean_shutdown=clean, now_ms=0)
        assert [s.base_offset for s in log.segments] == [0, jump]
        assert log.log_end_offset == jump + 4
        assert [bytes(b) for b in all_batches(log)] == [bytes(b) for b in batches]
        assert_indexes_follow_rule(log)
        log.close_handles()


def test_explicit_roll(tmp_path):
    config = LogConfig(segment_index_bytes=INDEX_BYTES)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    first = log.roll(now_ms=0)
    assert [s.base_offset for s in log.segments] == [
        0
    ] and first is log.active_segment  # nothing to roll
    log.append(build_batch([(b"k", b"v")] * 3), now_ms=0)
    log.roll(now_ms=0)
    log.roll(now_ms=0)  # an empty active segment is not rolled again
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert os.path.exists(os.path.join(log.directory, f"{3:020d}.log"))
    # A follower may start the next segment further on.
    log.roll(100, now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 100]
    assert not os.path.exists(os.path.join(log.directory, f"{3:020d}.log"))  # the empty one went
    assert read_file(log.segments[0].log_path) == log.read_bytes(0, 1 << 20)


def test_append_limits(tmp_path):
    config = LogConfig(segment_bytes=4096, max_message_bytes=1000, segment_index_bytes=INDEX_BYTES)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    small = build_batch([(b"k", b"v")])
    cases = [
        (bytearray(build_batch([(b"k", b"v" * 1000)])), errors.MESSAGE_TOO_LARGE),
        (bytearray(small * 70), errors.RECORD_LIST_TOO_LARGE),  # above segment.bytes
        (bytearray(), errors.INVALID_RECORD),
        (bytearray(small + small[:-1]), errors.CORRUPT_MESSAGE),  # a torn second batch
    ]
    for buf, code in cases:
        with pytest.raises(KafkaError) as info:
            log.append(buf, now_ms=0)
        assert info.value.code == code
        # Refused whole: nothing written, no offset used.
        assert log.log_end_offset == 0 and log.active_segment.size == 0
    assert log.append(bytearray(small * 3), now_ms=0).last_offset == 2
