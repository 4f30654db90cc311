"""Shared helpers of the storage tests: batch factories, raw reads of a log's files, an
independent statement of the index rule, and a fresh rebuild to compare recovered logs with."""

from __future__ import annotations

import os
import random
import struct
from dataclasses import replace

from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch
from gregor.storage.config import LONG_MAX, LogConfig
from gregor.storage.log import Log

# A memory-backed directory where there is one. For tests that measure fds, maps or logic
# rather than the disk, and would otherwise wait on it (fsync, msync, creating 30,000 files).
MEMORY_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None

PAYLOAD = bytes(random.Random(1).randbytes(1 << 16))  # incompressible-ish, shared


def make_batch(
    rng: random.Random,
    *,
    records: int | None = None,
    value_size: int | None = None,
    timestamp: int = 1_000_000,
    spread: int = 0,
    compression: int = rb.COMPRESSION_NONE,
) -> bytearray:
    """A batch of `records` records of ~`value_size` bytes, timestamps in [ts, ts + spread]."""
    n = records if records is not None else rng.randint(1, 8)
    out = []
    for _ in range(n):
        size = value_size if value_size is not None else rng.randint(0, 400)
        start = rng.randrange(0, len(PAYLOAD) - size) if size else 0
        key = None if rng.random() < 0.2 else b"key-%d" % rng.randrange(1000)
        out.append((key, PAYLOAD[start : start + size]))
    stamps = [timestamp + (rng.randint(0, spread) if spread else 0) for _ in range(n)]
    return build_batch(out, timestamps=stamps, compression_type=compression)


def with_offset(batch: bytes | bytearray, base_offset: int, leader_epoch: int = -1) -> bytes:
    """The batch as the log stores it: base offset and leader epoch stamped, CRC untouched."""
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base_offset)
    struct.pack_into(">i", out, 12, leader_epoch)
    return bytes(out)


def split_batches(data: bytes) -> list[bytes]:
    """Whole batches of a buffer, checking that they tile it exactly."""
    out = []
    pos = 0
    while pos < len(data):
        _base, size = rb.peek_offset_and_size(data, pos)
        assert size >= rb.HEADER_SIZE and pos + size <= len(data), "data does not end on a batch"
        out.append(data[pos : pos + size])
        pos += size
    return out


def segment_bases(directory: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(".log"))


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def segment_batches(directory: str) -> list[tuple[int, list[bytes]]]:
    """(base offset, batches) of every segment file, read raw from disk."""
    return [
        (base, split_batches(read_file(os.path.join(directory, f"{base:020d}.log"))))
        for base in segment_bases(directory)
    ]


def all_batches(log: Log) -> list[bytes]:
    """Every batch from the log start, read through `Log.read` one fetch at a time."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, 1 << 30)
        assert data, f"nothing read at {offset} below the log end {log.log_end_offset}"
        got = split_batches(data)
        out.extend(got)
        offset = rb.read_header(got[-1]).next_offset
    return out


def index_entries(log: Log) -> list[tuple[int, list, list]]:
    return [
        (s.base_offset, list(s.offset_index.all_entries()), list(s.time_index.all_entries()))
        for s in log.segments
    ]


def expected_index(
    log_bytes: bytes, base: int, config: LogConfig, inactive: bool
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The index rule of segment.py, stated again independently: (offset entries, time entries)."""
    off_max = max(1, config.segment_index_bytes // 8)
    time_max = max(1, config.segment_index_bytes // 12)
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    since = 0
    max_ts, max_off = -1, base
    for pos, h in rb.iter_headers(log_bytes):
        if h.max_timestamp > max_ts:
            max_ts, max_off = h.max_timestamp, h.last_offset
        if (
            since > config.index_interval_bytes
            and len(offsets) < off_max
            and len(times) < time_max - 1
        ):
            offsets.append((h.last_offset, pos))
            if not times or max_ts > times[-1][0]:
                times.append((max_ts, max_off))
            since = 0
        since += h.size
    if inactive and max_ts >= 0 and (not times or max_ts > times[-1][0]):
        times.append((max_ts, max_off))
    return offsets, times


def assert_indexes_follow_rule(log: Log) -> None:
    """Every segment's in-memory index entries are exactly what the index rule gives its file."""
    last = len(log.segments) - 1
    for i, seg in enumerate(log.segments):
        data = read_file(seg.log_path)
        assert len(data) == seg.size, f"{seg}: size {seg.size} but the file has {len(data)} bytes"
        offsets, times = expected_index(data, seg.base_offset, log.config, inactive=i < last)
        assert [tuple(e) for e in seg.offset_index.all_entries()] == offsets, (
            f"offset index of {seg}"
        )
        assert [tuple(e) for e in seg.time_index.all_entries()] == times, f"time index of {seg}"


def fresh_copy(directory: str, config: LogConfig, segments: list[tuple[int, list[bytes]]]) -> Log:
    """A log written from scratch with the same batches, rolled where `segments` begin.

    Appended as a follower (offsets kept), so the bytes are the same; each segment's batches in
    one append (the index rule goes batch by batch, so that changes nothing), with size- and
    time-based rolls switched off, so that it rolls only where told."""
    cfg = replace(config, segment_bytes=(1 << 31) - 1, segment_ms=LONG_MAX)
    start = segments[0][0] if segments else 0
    log = Log.open(directory, cfg, log_start_offset=start, now_ms=0)
    for k, (base, batches) in enumerate(segments):
        if k:
            log.roll(base, now_ms=0)
        if batches:
            log.append(bytearray(b"".join(batches)), assign_offsets=False, now_ms=0)
    return log


def assert_same_as_fresh(log: Log, tmp_dir: str) -> None:
    """Segments, bytes and index entries equal those of a fresh log with the same batches."""
    on_disk = segment_batches(log.directory)
    assert [s.base_offset for s in log.segments] == [b for b, _ in on_disk]
    fresh = fresh_copy(os.path.join(tmp_dir, "fresh-0"), log.config, on_disk)
    try:
        assert [s.base_offset for s in fresh.segments] == [s.base_offset for s in log.segments]
        assert fresh.log_end_offset == log.log_end_offset
        assert index_entries(log) == index_entries(fresh)
    finally:
        fresh.close()
