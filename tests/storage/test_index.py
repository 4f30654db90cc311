"""The sparse indexes: where entries fall (every index.interval.bytes of log), what they name,
Kafka's file layout, and the index classes' lookups, truncation and limits."""

from __future__ import annotations

import bisect
import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.protocol.records import batch as rb
from gregor.storage.config import LogConfig
from gregor.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from gregor.storage.log import Log

from .storage_helpers import assert_indexes_follow_rule, make_batch, read_file

INTERVAL = 1024


def _filled_log(path: str, seed: int = 1) -> tuple[Log, int]:
    """A log of a few 64 KiB segments of batches from ~80 bytes to ~3 KiB, some appended
    several per call; returns it and the largest batch size."""
    config = LogConfig(
        segment_bytes=65536, index_interval_bytes=INTERVAL, segment_index_bytes=65536
    )
    log = Log.open(path, config, now_ms=0)
    rng = random.Random(seed)
    largest = 0
    ts = 1_000_000
    while len(log.segments) < 4:
        group = []
        for _ in range(rng.choice([1, 1, 1, 3])):
            ts += rng.randint(-50, 200)
            b = make_batch(
                rng,
                records=rng.randint(1, 6),
                value_size=rng.choice([0, 10, 100, 400]),
                timestamp=ts,
                spread=100,
            )
            largest = max(largest, len(b))
            group.append(b)
        log.append(bytearray(b"".join(group)), now_ms=0)
    for _ in range(6):  # and some entries in the active segment too
        log.append(make_batch(rng, records=2, value_size=300, timestamp=ts), now_ms=0)
    return log, largest


def test_offset_index_entries_every_interval_bytes(tmp_path):
    log, largest = _filled_log(str(tmp_path / "t-0"))
    assert largest > INTERVAL  # some batches are larger than the interval
    for seg in log.segments:
        data = read_file(seg.log_path)
        starts = {pos: h for pos, h in rb.iter_headers(data)}
        entries = seg.offset_index.all_entries()
        assert len(entries) >= len(data) // (INTERVAL + largest)
        prev = 0
        for offset, position in entries:
            # Each entry is a batch start, and names that batch's last offset...
            assert position in starts
            h = rb.read_header(data, position)
            assert h.last_offset == offset
            # ... about every index.interval.bytes: more than the interval after the last entry
            # (or the segment start), and less than the interval plus one batch.
            gap = position - prev
            assert INTERVAL < gap <= INTERVAL + largest
            # It is the first batch that far along: the one before it was not.
            before = max(p for p in starts if p < position)
            assert before - prev <= INTERVAL or before == prev
            prev = position
        # No entry missing at the end either.
        assert all(p - prev <= INTERVAL for p in starts if p > prev)
    assert_indexes_follow_rule(log)


def test_time_index_entries_name_the_largest_timestamp_so_far(tmp_path):
    log, _ = _filled_log(str(tmp_path / "t-0"), seed=2)
    for i, seg in enumerate(log.segments):
        data = read_file(seg.log_path)
        headers = [h for _pos, h in rb.iter_headers(data)]
        times = seg.time_index.all_entries()
        assert [t for t, _o in times] == sorted({t for t, _o in times})  # strictly increasing
        for ts, offset in times:
            carrier = next(h for h in headers if h.last_offset == offset)
            assert carrier.max_timestamp == ts
            # ... and no earlier batch reached that timestamp: it is the first to carry it.
            assert all(h.max_timestamp < ts for h in headers if h.last_offset < offset)
        for offset, _pos in seg.offset_index.all_entries():
            # At each offset entry, the time index knew the largest timestamp up to there.
            upto = max(h.max_timestamp for h in headers if h.last_offset <= offset)
            assert any(t == upto for t, o in times if o <= offset)
        if i < len(log.segments) - 1:
            # An inactive segment's last time entry is its largest timestamp (added at roll).
            assert times[-1][0] == max(h.max_timestamp for h in headers)


def test_index_files_are_kafkas_layout(tmp_path):
    log, _ = _filled_log(str(tmp_path / "t-0"), seed=3)
    active = log.active_segment
    # While active, both files are preallocated to segment.index.bytes in whole entries.
    assert os.path.getsize(active.offset_index.path) == 65536
    assert os.path.getsize(active.time_index.path) == 65536 // 12 * 12
    expected = {
        s.base_offset: (s.offset_index.all_entries(), s.time_index.all_entries())
        for s in log.segments
    }
    log.close()
    for base, (offsets, times) in expected.items():
        assert offsets, "every segment here has entries"
        raw = read_file(os.path.join(log.directory, f"{base:020d}.index"))
        assert len(raw) == 8 * len(offsets)
        decoded = [
            (
                base + int.from_bytes(raw[i : i + 4], "big", signed=True),
                int.from_bytes(raw[i + 4 : i + 8], "big", signed=True),
            )
            for i in range(0, len(raw), 8)
        ]
        assert decoded == [tuple(e) for e in offsets]
        raw = read_file(os.path.join(log.directory, f"{base:020d}.timeindex"))
        assert len(raw) == 12 * len(times)
        decoded = [
            (
                int.from_bytes(raw[i : i + 8], "big", signed=True),
                base + int.from_bytes(raw[i + 8 : i + 12], "big", signed=True),
            )
            for i in range(0, len(raw), 12)
        ]
        assert decoded == [tuple(e) for e in times]
        # Segment file names are the 20-digit zero-padded base offset.
        assert os.path.exists(os.path.join(log.directory, f"{base:020d}.log"))


# -- the index classes ------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    n=st.one_of(st.integers(0, 10), st.integers(1000, 3000)),  # past 1024 entries: warm and cold
    seed=st.integers(0, 1 << 30),
    probes=st.lists(st.integers(-10, 80_000), min_size=1, max_size=40),
)
def test_offset_index_lookup_is_floor_search(tmp_path_factory, n, seed, probes):
    rng = random.Random(seed)
    gaps = [(rng.randint(1, 50), rng.randint(0, 5000)) for _ in range(n)]
    path = str(tmp_path_factory.mktemp("idx") / "x.index")
    base = 1000
    idx = OffsetIndex(path, base, 1 << 20, writable=True)
    offsets, positions = [], []
    off, pos = base, 0
    for d_off, d_pos in gaps:
        off += d_off
        pos += d_pos
        idx.append(off, pos)
        offsets.append(off)
        positions.append(pos)
    # Enough entries to use both the warm tail and the cold head of the search.
    for target in (
        [base + p for p in probes] + offsets[:3] + offsets[-3:] + offsets[n // 2 : n // 2 + 2]
    ):
        i = bisect.bisect_right(offsets, target) - 1
        want = (offsets[i], positions[i]) if i >= 0 else (base, 0)
        assert tuple(idx.lookup(target)) == want
    for probe in probes:
        i = bisect.bisect_right(positions, probe) - 1
        got = idx.lookup_position(probe)
        if i < 0:
            assert tuple(got) == (base, 0)
        else:
            assert got.position == positions[i]
    idx.close()


def test_offset_index_limits_truncation_and_reopen(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    idx = OffsetIndex(path, 100, 8 * 5 + 3, writable=True)  # room for 5 entries
    for i in range(5):
        assert not idx.is_full()
        idx.append(100 + 10 * i, 1000 * i + 1)
    assert idx.is_full()
    with pytest.raises(CorruptIndexError):
        idx.append(200, 9999)
    idx.truncate_to(120)  # drops entries with offset >= 120
    assert idx.all_entries() == [(100, 1), (110, 1001)]
    assert idx.lookup(10**6) == (110, 1001)
    idx.append(125, 1500)
    idx.trim_to_valid_size()
    assert os.path.getsize(path) == 24
    reopened = OffsetIndex(path, 100, 1 << 20, writable=False)
    assert reopened.entries == 3 and reopened.all_entries() == [(100, 1), (110, 1001), (125, 1500)]
    reopened.sanity_check(log_size=2000)
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check(log_size=1500)  # an entry at or past the end of the log
    reopened.close()


def test_time_index_keeps_a_slot_for_the_roll_entry_and_only_grows(tmp_path):
    path = str(tmp_path / "00000000000000000000.timeindex")
    idx = TimeIndex(path, 0, 12 * 3, writable=True)  # 3 slots, the last kept for the roll
    idx.maybe_append(100, 5)
    idx.maybe_append(100, 9)  # same timestamp: ignored
    idx.maybe_append(90, 12)  # older timestamp: ignored
    idx.maybe_append(150, 20)
    assert idx.all_entries() == [(100, 5), (150, 20)]
    assert idx.is_full()
    with pytest.raises(CorruptIndexError):
        idx.maybe_append(200, 30)
    idx.maybe_append(200, 30, skip_full_check=True)  # the roll entry
    assert idx.lookup(99) == (-1, 0)
    assert idx.lookup(100) == (100, 5)
    assert idx.lookup(175) == (150, 20)
    assert idx.lookup(10**12) == (200, 30)
    idx.truncate_to(20)
    assert idx.all_entries() == [(100, 5)]
    with pytest.raises(CorruptIndexError):
        idx.maybe_append(300, 4)  # offsets may not go back
    idx.close()


@settings(max_examples=25, deadline=None)
@given(
    n=st.one_of(st.integers(1, 10), st.integers(600, 1500)),
    seed=st.integers(0, 1 << 30),
    data=st.data(),
)
def test_time_index_lookup_is_floor_search(tmp_path_factory, n, seed, data):
    rng = random.Random(seed)
    steps = [(rng.randint(1, 40), rng.randint(1, 9)) for _ in range(n)]
    path = str(tmp_path_factory.mktemp("tidx") / "x.timeindex")
    idx = TimeIndex(path, 0, 1 << 20, writable=True)
    stamps, offsets = [], []
    ts, off = 0, 0
    for d_ts, d_off in steps:
        ts += d_ts
        off += d_off
        idx.maybe_append(ts, off)
        stamps.append(ts)
        offsets.append(off)
    for target in data.draw(st.lists(st.integers(-5, ts + 5), min_size=1, max_size=30)):
        i = bisect.bisect_right(stamps, target) - 1
        assert tuple(idx.lookup(target)) == ((stamps[i], offsets[i]) if i >= 0 else (-1, 0))
    idx.close()


def test_an_active_index_is_memory_until_flushed_and_its_file_is_never_mapped(
    tmp_path, monkeypatch
):
    """The first write into a fresh map of a preallocated index cost milliseconds on the event
    loop: an active index keeps its entries in memory and writes them with pwrite when flushed,
    rolled or closed; only an inactive index is mapped, read-only."""
    import mmap as mmap_module

    maps = []
    real_mmap = mmap_module.mmap

    def counting_mmap(fd, length, *args, **kw):
        maps.append(kw.get("access"))
        return real_mmap(fd, length, *args, **kw)

    monkeypatch.setattr("gregor.storage.index.mmap.mmap", counting_mmap)
    path = str(tmp_path / "00000000000000000100.index")
    idx = OffsetIndex(path, 100, 10 * 1024 * 1024, writable=True)
    idx.reserve(1000)
    for i in range(1000):  # grows its buffer many times over; lookups in between
        idx.append(100 + 2 * i, 64 * i)
        assert idx.lookup(100 + 2 * i + 1) == (100 + 2 * i, 64 * i)
    assert maps == []
    assert os.path.getsize(path) < 64 * 1024 + 8000  # reserved blocks, never 10 MiB
    assert read_file(path)[:8] == bytes(8)  # nothing written yet: in memory
    idx.flush()
    data = read_file(path)
    assert [int.from_bytes(data[i * 8 : i * 8 + 4], "big") for i in (0, 999)] == [0, 1998]
    for i in range(1000, 1010):
        idx.append(100 + 2 * i, 64 * i)
    idx.trim_to_valid_size()  # a roll: the rest written, the file cut to its entries
    assert os.path.getsize(path) == 1010 * 8
    assert idx.lookup(100 + 2 * 1009) == (100 + 2 * 1009, 64 * 1009)
    assert maps == [mmap_module.ACCESS_READ]


def test_a_closed_active_index_reopens_with_its_entries_and_takes_more(tmp_path):
    path = str(tmp_path / "00000000000000000000.timeindex")
    idx = TimeIndex(path, 0, 1200, writable=True)
    for i in range(40):
        idx.maybe_append(1000 + i, i)
    idx.close()  # closing an idle segment's handles: the entries reach the file
    assert os.path.getsize(path) >= 40 * 12
    assert idx.entries == 40 and idx.last_entry() == (1039, 39)
    for i in range(40, 99):
        idx.maybe_append(1000 + i, i)
    assert idx.is_full()  # 100 slots, one kept for the roll's entry
    idx.truncate_to(50)
    assert idx.entries == 50 and idx.lookup(10**9) == (1049, 49)
    idx.trim_to_valid_size()
    assert os.path.getsize(path) == 50 * 12
