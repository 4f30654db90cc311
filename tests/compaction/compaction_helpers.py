"""Shared by the compaction tests: a model of what was appended, random compacted-topic
traffic, reading a whole log back record by record, and the properties every cleaned log has."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch, read_batch_records
from gregor.storage.cleaner import CleanerConfig, LogCleaner
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager

CODECS = [
    rb.COMPRESSION_NONE,
    rb.COMPRESSION_NONE,
    rb.COMPRESSION_GZIP,
    rb.COMPRESSION_SNAPPY,
    rb.COMPRESSION_LZ4,
    rb.COMPRESSION_ZSTD,
]


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int


@dataclass
class Model:
    """Every record ever appended, by offset."""

    records: dict[int, Rec] = field(default_factory=dict)
    producers: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> (epoch, next seq)

    def latest(self, below: int | None = None) -> dict[bytes, Rec]:
        out: dict[bytes, Rec] = {}
        for off in sorted(self.records):
            rec = self.records[off]
            if below is not None and off >= below:
                break
            if rec.key is not None:
                out[rec.key] = rec
        return out


def new_manager(
    path: str, config: LogConfig, cleaner: CleanerConfig | None = None, clock: Clock = SYSTEM_CLOCK
) -> tuple[LogManager, Log, LogCleaner]:
    mgr = LogManager([path], config, clock=clock)
    mgr.startup()
    log = mgr.get_or_create("t", 0)
    return mgr, log, LogCleaner(mgr, cleaner or CleanerConfig())


def append_random(
    log: Log,
    model: Model,
    rng: random.Random,
    *,
    batches: int,
    keys: int,
    now_ms: int,
    tombstones: float = 0.15,
    producers: int = 3,
    value_size: int = 40,
) -> None:
    """`batches` random batches: keys from a pool of `keys`, some tombstones, random codecs,
    some from idempotent producers (pid, epoch, sequence), timestamps around `now_ms`."""
    for _ in range(batches):
        n = rng.randint(1, 6)
        recs = []
        for _ in range(n):
            key = b"key-%d" % rng.randrange(keys)
            value = None if rng.random() < tombstones else rng.randbytes(rng.randint(0, value_size))
            recs.append((key, value))
        stamps = [now_ms - rng.randint(0, 50) for _ in range(n)]
        pid, epoch, seq = -1, -1, -1
        if producers and rng.random() < 0.5:
            pid = 1000 + rng.randrange(producers)
            epoch, seq = model.producers.get(pid, (0, 0))
            model.producers[pid] = (epoch, seq + n)
        batch = build_batch(
            recs,
            timestamps=stamps,
            compression_type=rng.choice(CODECS),
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )
        info = log.append(batch, now_ms=now_ms)
        for i, (key, value) in enumerate(recs):
            model.records[info.first_offset + i] = Rec(info.first_offset + i, key, value, stamps[i])
    log.update_high_watermark(log.log_end_offset)


def read_batches(log: Log) -> list[tuple[rb.BatchHeader, list]]:
    """Every batch from the log start, through `Log.read` as a fetch would, with its records."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, 1 << 30)
        assert data, f"nothing read at {offset}, below the log end {log.log_end_offset}"
        pos = 0
        last = None
        while pos < len(data):
            header = rb.read_header(data, pos)
            assert (
                pos + header.size <= len(data)
                and rb.compute_crc(data, pos, header.size) == header.crc
            )
            assert 0 <= header.records_count <= header.last_offset_delta + 1
            out.append(read_batch_records(data, pos))
            last = header
            pos += header.size
        assert last is not None
        offset = last.next_offset
    return out


def read_records(log: Log) -> list[Rec]:
    out = []
    for header, recs in read_batches(log):
        for r in recs:
            assert header.base_offset <= r.offset <= header.last_offset
            ts = header.max_timestamp if header.is_log_append_time else r.timestamp
            out.append(Rec(r.offset, r.key, r.value, ts))
    return out


def check_log(log: Log, model: Model) -> list[Rec]:
    """What holds for any log, cleaned or not: offsets strictly increase, every record read is
    the one appended at that offset, and every key's latest value (not a tombstone) is there."""
    got = read_records(log)
    offsets = [r.offset for r in got]
    assert offsets == sorted(set(offsets)), "offsets repeat or go backwards"
    for r in got:
        assert model.records[r.offset] == r, f"record at {r.offset} differs from what was appended"
    present = {r.offset for r in got}
    for key, rec in model.latest().items():
        if rec.value is not None:
            assert rec.offset in present, f"latest value of {key!r} (offset {rec.offset}) is gone"
    return got


def check_deduplicated(log: Log, model: Model, end_offset: int) -> None:
    """Below a completed cleaning's end offset each key appears once: as its latest record."""
    seen: set[bytes] = set()
    latest = model.latest()
    for r in read_records(log):
        if r.offset >= end_offset:
            break
        assert r.key is not None
        assert r.key not in seen, f"{r.key!r} appears twice below {end_offset}"
        seen.add(r.key)
        # Its latest record may be later (above the end offset) only if it is in the dirty
        # part that was not mapped: the one below the end is then the latest below it.
        assert r == latest[r.key] or latest[r.key].offset >= end_offset


def index_entries(log: Log) -> list[tuple[int, list, list]]:
    return [
        (s.base_offset, s.offset_index.all_entries(), s.time_index.all_entries())
        for s in log.segments
    ]


def reopen_unclean(log: Log, mgr: LogManager | None = None, recovery_point: int = 0) -> Log:
    """Drop the log as a crash would (no flush, no trim) and open it again, recovering every
    segment from `recovery_point`."""
    log.close_handles()
    if mgr is not None:
        mgr.purge_deleted(force=True)
    reopened = Log.open(
        log.directory, log.config, recovery_point=recovery_point, clean_shutdown=False
    )
    reopened.update_high_watermark(reopened.log_end_offset)
    return reopened


def leftovers(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap")))
