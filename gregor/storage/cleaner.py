"""The log cleaner: compaction of the logs whose cleanup.policy holds `compact`, as Kafka's
LogCleaner does it.

    <log dir>/cleaner-offset-checkpoint    per partition: the first dirty offset, i.e. how far
                                           the log has been cleaned (checkpoints.py format)

A log as the cleaner sees it::

    | clean section        | dirty section              | uncleanable                |
    log start              first dirty offset           first uncleanable offset     log end
                           (the checkpoint)             (a segment base, see below)

The first uncleanable offset is the base of the segment that holds the smallest of: the active
segment's base, the last stable offset (the high watermark, or the first offset of the oldest
transaction not yet decided, if lower), and the base of the first dirty segment whose largest
timestamp is within `min.compaction.lag.ms` of now. So the active segment, unreplicated records,
open transactions and too-young records are never cleaned.

Choosing (`LogCleaner.grab_filthiest`, on the log's thread): among compacted logs not being
cleaned, those whose dirty ratio (bytes of the dirty section's segments / bytes of both
sections) is above `min.cleanable.dirty.ratio`, or whose oldest dirty segment's first batch is
older than `max.compaction.lag.ms` (with something to clean); the one with the largest ratio.

Cleaning (`CleaningTask.run`, on a worker):
  1. The offset map, key -> offset of the key's latest record, over the dirty section, holding
     at most what `log.cleaner.dedupe.buffer.size` allows (see OffsetMap). If it fills, this
     cleaning ends at the last batch that fit (the end offset); the rest waits for the next.
  2. The segments from the log start up to the end offset, in groups that fit one segment
     (total data under segment.bytes, each index under segment.index.bytes, offsets within a
     relative offset), are each rewritten into one new segment `<first base>.log.cleaned`
     keeping every record that is its key's latest (or lies past the map), batch by batch as
     cleaner_records.py says. Offsets are kept; the gaps stay.
  3. Each cleaned group goes back to the log's thread, which checks that the log still holds
     the segments it was made from, and swaps it in (Log.replace_segments; loader.py finishes
     or undoes a swap a crash interrupted). Then the checkpoint moves to the end offset
     (unless the log was truncated meanwhile). A truncation below a checkpoint lowers it to the
     log's new active segment base (the log manager calls `maybe_truncate_checkpoint`).

Tombstones: a kept tombstone's batch gets a delete horizon (now + delete.retention.ms) when a
cleaning first keeps it (attribute bit 6, baseTimestamp = horizon: Kafka 3.x, KIP-534); a
cleaning after the horizon drops the tombstone (a consumer that reads the whole log within
delete.retention.ms of that first cleaning sees the delete).

Producers: the batch holding the last data offset of each producer the log's producer state
still knows (producer_state.py; expired ones are forgotten there) is kept, empty if all its
records go, so the producer's epoch and sequence survive a reload from the log; so is the last
batch before the first uncleanable offset (it carries the last offset of the round). The
producers are taken when the task is made: a later batch of theirs only makes the kept one
unneeded, and a truncation (which could make an older batch the last again) refuses the swap.

Transactions (as Kafka's cleaner; cleaner_txns.py follows them through the log): the records
of aborted transactions go whatever their keys, known from the .txnindex entries taken when the
task is made; the offset map skips them, so an aborted value never hides a committed one. A
marker stays while its transaction has data in the cleaning; once none is left it gets a delete
horizon like a tombstone (attribute bit 6, baseTimestamp = now + delete.retention.ms), and a
cleaning after the horizon drops it (a consumer that reads the whole log within the horizon still
sees it). Its producer's last batch, data or marker, is kept, emptied if need be, as above (for a
producer whose last batch was a marker, the marker of its current epoch). A cleaned segment's
.txnindex holds the entries of the ABORT markers it kept whose transaction had data in this
cleaning; the others had nothing left for a consumer to drop.

Threading. `Log` is single-threaded; the cleaner never calls it from the worker. On the log's
thread the task takes a snapshot of what it needs: each segment's path, size, inode and index
sizes, the log's truncation count and end offset, its producers' last data offsets and epochs,
the .txnindex entries of its aborted transactions. The worker opens the files itself (by path,
falling back to the `.deleted` name retention may have given them, and checking the inode),
reads only bytes below the snapshot sizes, and writes only its own `.cleaned` files. Inactive
segment bytes never change except by truncation, which the swap check sees. The swap of each
group runs on the log's thread (`LogCleaner.swap`): it refuses if the log was closed,
replaced, truncated, or no longer holds exactly the group's segments at their sizes (deleted
by retention meanwhile...), and otherwise renames a few files; produce and fetch on the
partition never wait longer than that. `log.cleaner.io.max.bytes.per.second` throttles the
worker's reads and writes (`Throttler`); `abort()` stops it at the next batch or within 0.1 s of
a throttle's sleep.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from crc32c import crc32c

from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.protocol.records import batch as rb
from gregor.storage import checkpoints
from gregor.storage.cleaner_records import (
    ATTRIBUTES,
    BASE_OFFSET,
    BASE_TIMESTAMP,
    CRC,
    HEADER,
    LAST_OFFSET_DELTA,
    LENGTH,
    MAX_TIMESTAMP,
    PRODUCER_EPOCH,
    PRODUCER_ID,
    RECORDS_COUNT,
    BadRecords,
    empty_batch,
    rebuild_batch,
    record_spans,
    records_data,
)
from gregor.storage.cleaner_txns import CleanedTransactions, control_type
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager, TopicPartition
from gregor.storage.segment import CLEANED_SUFFIX, DELETED_SUFFIX, BatchInfo, LogSegment

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
INT32_MAX = (1 << 31) - 1
_TXN_OR_CONTROL = rb.TRANSACTIONAL_FLAG | rb.CONTROL_FLAG


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's `log.cleaner.*` settings."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    io_buffer_load_factor: float = 0.9
    io_max_bytes_per_second: float = math.inf
    backoff_ms: int = 15_000
    # Where a broker runs a task's worker half: True, a child process (cleaner_worker.py), so
    # that it does not share the event loop's GIL; False, a thread of the broker. (The broker's
    # log.cleaner.worker.process is true by default; here, for tests and tools, false.)
    in_process: bool = False

    @property
    def enabled(self) -> bool:
        return self.enable and self.threads > 0


class CleaningAborted(Exception):
    """The cleaning stopped: asked to, or the log changed under it. Nothing is lost."""


class UncleanableLog(Exception):
    """This log cannot be cleaned: it is left alone until a restart (Kafka's uncleanable
    partitions)."""


class CorruptSegment(UncleanableLog):
    """A batch that does not parse."""


class Throttler:
    """Keeps the bytes passed to `delay` under `rate` per second, on average over windows of a
    second (of the clock's monotonic time): `delay` says how long to sleep; shared by every
    cleaner thread (as Kafka's)."""

    def __init__(self, rate: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.rate = rate
        self._clock = clock
        self._lock = threading.Lock()
        self._start = clock.monotonic_s()
        self._bytes = 0

    def delay(self, n: int) -> float:
        """Seconds to sleep after moving `n` more bytes (0 when under the rate)."""
        if self.rate == math.inf or self.rate <= 0:
            return 0.0
        with self._lock:
            now = self._clock.monotonic_s()
            if now - self._start >= 1.0:
                self._start, self._bytes = now, 0
            self._bytes += n
            return max(0.0, self._bytes / self.rate - (now - self._start))


class OffsetMap:
    """key -> offset of the key's latest record in the dirty section.

    Bounded like Kafka's SkimpyOffsetMap, which spends 24 bytes a key (a 16-byte hash and an
    offset) of `log.cleaner.dedupe.buffer.size`, filled to `io.buffer.load.factor`. We keep the
    keys themselves (so two keys never collide) and count 24 bytes plus the key's length
    against the same budget; Python's own overhead makes the real memory about 3x that.
    """

    ENTRY_BYTES = 24

    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        self.limit = int(memory_bytes * load_factor)
        self.used = 0
        self.offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # every offset up to here has been mapped

    def put(self, key: bytes, offset: int) -> bool:
        """Map `key` to `offset`; False (and nothing changed) if a new key does not fit."""
        offsets = self.offsets
        if key not in offsets:
            cost = self.ENTRY_BYTES + len(key)
            if self.used + cost > self.limit:
                return False
            self.used += cost
        offsets[key] = offset
        return True

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def utilization(self) -> float:
        return self.used / self.limit if self.limit else 1.0


@dataclass
class CleanerStats:
    end_offset: int = -1
    map_bytes_read: int = 0
    map_records_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    groups: int = 0
    map_keys: int = 0
    map_utilization: float = 0.0
    start_s: float = 0.0  # monotonic seconds, as the two below
    map_done_s: float = 0.0
    end_s: float = 0.0

    @property
    def elapsed_s(self) -> float:
        return max(self.end_s - self.start_s, 1e-9)


# -- choosing what to clean (the log's thread) -----------------------------------------------


def _segments_between(log_: Log, lo: int, hi: int) -> list[LogSegment]:
    """The segments holding offsets in [lo, hi): from the one holding `lo` to the last whose
    base is below `hi` (Kafka's logSegments(from, to))."""
    if lo >= hi:
        return []
    segs = log_.segments
    out = []
    for i, seg in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
        if seg.base_offset >= hi:
            break
        if nxt is None or nxt > lo:
            out.append(seg)
    return out


def _non_active_from(log_: Log, offset: int) -> list[LogSegment]:
    active = log_.active_segment.base_offset
    return [] if offset > active else _segments_between(log_, offset, active)


@dataclass
class LogToClean:
    topic_partition: TopicPartition
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def cleanable_offsets(log_: Log, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, uncleanable offset, whether the checkpoint was invalid)."""
    start = log_.log_start_offset
    first_dirty = start if checkpoint is None else checkpoint
    reset = False
    if first_dirty < start or first_dirty > log_.log_end_offset:
        first_dirty, reset = start, checkpoint is not None
    limits = [log_.last_stable_offset, log_.active_segment.base_offset]
    lag = max(log_.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for seg in _non_active_from(log_, first_dirty):
            if seg.largest_timestamp > now_ms - lag:
                limits.append(seg.base_offset)
                break
    return first_dirty, max(first_dirty, min(limits)), reset


def max_compaction_delay(log_: Log, first_dirty: int, now_ms: int) -> int:
    """How far past max.compaction.lag.ms the oldest dirty record is (0: not past it)."""
    stamps = [s.first_batch_timestamp() for s in _non_active_from(log_, first_dirty)]
    earliest = min((t for t in stamps if t > 0), default=None)
    clean_until = now_ms - max(log_.config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest is not None and earliest < clean_until else 0


def log_to_clean(tp: TopicPartition, log_: Log, checkpoint: int | None, now_ms: int) -> LogToClean:
    first_dirty, uncleanable, _ = cleanable_offsets(log_, checkpoint, now_ms)
    following = _non_active_from(log_, uncleanable)
    first_uncleanable = following[0].base_offset if following else log_.active_segment.base_offset
    clean = sum(s.size for s in log_.segments if s.base_offset < first_dirty)
    cleanable = sum(
        s.size
        for s in _segments_between(log_, min(first_dirty, first_uncleanable), first_uncleanable)
    )
    need_now = max_compaction_delay(log_, first_dirty, now_ms) > 0
    return LogToClean(tp, log_, first_dirty, first_uncleanable, clean, cleanable, need_now)


# -- the worker's view of a segment ----------------------------------------------------------


@dataclass(frozen=True)
class SourceSegment:
    """A segment as it was when the task began. `segment` is there for the swap check on the
    log's thread; the worker never calls it."""

    segment: LogSegment
    base_offset: int
    next_offset: int  # the next segment's base (the active one's: the log end offset)
    path: str
    size: int
    inode: tuple[int, int]
    index_bytes: int
    time_index_bytes: int
    active: bool

    def __getstate__(self) -> dict:
        # Pickled to a worker process (cleaner_worker.py): the segment object stays here.
        return {**self.__dict__, "segment": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def open(self) -> int:
        """An fd of this segment's file, wherever retention has renamed it."""
        for path in (self.path, self.path + DELETED_SUFFIX):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == self.inode and st.st_size >= self.size:
                return fd
            os.close(fd)
        raise CleaningAborted(f"{self.path} is gone or changed")


def _iter_batches(
    fd: int, size: int, io_size: int, throttle: Callable[[int], None]
) -> Iterator[tuple[int, tuple[int, ...], bytes]]:
    """(position, header fields, batch bytes) of each batch in [0, size), read `io_size` at a
    time (a larger batch alone)."""
    pos = 0
    buf = b""
    buf_pos = 0
    unpack = HEADER.unpack_from
    while pos < size:
        off = pos - buf_pos
        if len(buf) - off < rb.HEADER_SIZE:
            buf = os.pread(fd, min(io_size, size - pos), pos)
            throttle(len(buf))
            buf_pos, off = pos, 0
            if len(buf) < rb.HEADER_SIZE:
                raise CleaningAborted(f"short read at position {pos}: the segment was truncated")
        fields = unpack(buf, off)
        n = fields[LENGTH] + rb.LOG_OVERHEAD
        if n < rb.HEADER_SIZE or pos + n > size or fields[3] != rb.MAGIC:
            raise CorruptSegment(f"no valid batch at position {pos}")
        if len(buf) - off >= n:
            batch = buf[off : off + n]
        elif n > io_size:
            batch = os.pread(fd, n, pos)
            throttle(n)
        else:
            buf = os.pread(fd, min(io_size, size - pos), pos)
            throttle(len(buf))
            buf_pos, off = pos, 0
            batch = buf[:n]
        if len(batch) < n:
            raise CleaningAborted(f"short read at position {pos}: the segment was truncated")
        yield pos, fields, batch
        pos += n


@dataclass
class CleanedGroup:
    """A group's new segment, its files `.cleaned`, complete and fsynced, and what it replaces."""

    cleaned: LogSegment
    sources: list[SourceSegment]

    @property
    def old(self) -> list[LogSegment]:
        return [s.segment for s in self.sources]


SwapFn = Callable[[CleanedGroup], bool]


def group_segments(
    sources: list[SourceSegment], max_size: int, max_index_size: int, first_uncleanable: int
) -> list[list[SourceSegment]]:
    """Consecutive segments in groups whose data and index sizes each fit one segment and whose
    offsets fit one segment's relative offsets (Kafka's groupSegmentsBySize)."""
    groups: list[list[SourceSegment]] = []
    i = 0
    while i < len(sources):
        group = [sources[i]]
        size, index, time_index = (
            sources[i].size,
            sources[i].index_bytes,
            sources[i].time_index_bytes,
        )
        i += 1
        while i < len(sources):
            nxt = sources[i]
            last_offset = (
                sources[i + 1].base_offset - 1 if i + 1 < len(sources) else first_uncleanable - 1
            )
            if not (
                size + nxt.size <= max_size
                and index + nxt.index_bytes <= max_index_size
                and time_index + nxt.time_index_bytes <= max_index_size
                and (nxt.size == 0 or last_offset - group[0].base_offset <= INT32_MAX)
            ):
                break
            group.append(nxt)
            size += nxt.size
            index += nxt.index_bytes
            time_index += nxt.time_index_bytes
            i += 1
        groups.append(group)
    return groups


# -- one cleaning (the worker) ---------------------------------------------------------------


class CleaningTask:
    """One cleaning of one log: made on the log's thread by LogCleaner, `run` on a worker."""

    def __init__(
        self,
        to_clean: LogToClean,
        sources: list[SourceSegment],
        *,
        config: LogConfig,
        cleaner_config: CleanerConfig,
        now_ms: int,
        clock: Clock,
    ) -> None:
        self.topic_partition = to_clean.topic_partition
        self.log = to_clean.log  # for the swap check on the log's thread only
        self.name = f"{to_clean.topic_partition[0]}-{to_clean.topic_partition[1]}"
        self.directory = to_clean.log.directory
        self.first_dirty_offset = to_clean.first_dirty_offset
        self.first_uncleanable_offset = to_clean.first_uncleanable_offset
        self.truncations = to_clean.log.truncations
        self.log_end_offset = to_clean.log.log_end_offset
        self.sources = sources
        self.config = config
        self.cleaner_config = cleaner_config
        self.now_ms = now_ms
        # Measures the cleaning and paces the throttle's sleeps; SYSTEM_CLOCK pickles as itself,
        # so a worker process reads its own real clock.
        self.clock = clock
        self.aborted = False
        self.stats = CleanerStats(start_s=clock.monotonic_s())
        self._throttle: Callable[[int], None] = lambda n: None
        # producer id -> (the last offset of its last data batch or -1, its epoch): Kafka's
        # lastRecordsOfActiveProducers
        self.producers = {
            pid: (entry.last_data_offset, entry.producer_epoch)
            for pid, entry in to_clean.log.producer_state.active_producers().items()
        }
        # Every aborted transaction that began below the uncleanable offset (its marker may be
        # above it, in a segment this cleaning does not touch).
        self.aborted_txns = to_clean.log.aborted_transactions_below(self.first_uncleanable_offset)
        self._txns = CleanedTransactions([])

    def __getstate__(self) -> dict:
        # Pickled to a worker process (cleaner_worker.py): the Log stays here.
        return {**self.__dict__, "log": None, "_throttle": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._throttle = lambda n: None

    def abort(self) -> None:
        """Stop at the next batch (any thread)."""
        self.aborted = True

    def _sleep(self, seconds: float) -> None:
        """Sleep for the throttle, in slices, so that `abort` is seen within 0.1 s."""
        clock = self.clock
        until = clock.monotonic_s() + seconds
        while not self.aborted and (left := until - clock.monotonic_s()) > 0:
            clock.sleep(min(left, 0.1))

    def _check(self) -> None:
        if self.aborted:
            raise CleaningAborted(f"cleaning of {self.name} aborted")

    def run(self, swap: SwapFn, throttler: Throttler | None = None) -> CleanerStats:
        """Clean, handing each cleaned group to `swap` (which runs it on the log's thread and
        says whether it went in). The stats' end_offset is the new checkpoint."""
        if throttler is not None and throttler.rate != math.inf:
            self._throttle = lambda n: self._sleep(throttler.delay(n))
        stats = self.stats
        cfg = self.cleaner_config
        # Each cleaner thread has its share of the dedupe buffer, as in Kafka.
        offset_map = OffsetMap(
            cfg.dedupe_buffer_size // max(cfg.threads, 1), cfg.io_buffer_load_factor
        )
        self._build_offset_map(offset_map)
        end_offset = offset_map.latest_offset + 1
        stats.map_done_s = self.clock.monotonic_s()
        stats.map_keys = len(offset_map)
        stats.map_utilization = offset_map.utilization
        to_clean = [s for s in self.sources if s.base_offset < end_offset and not s.active]
        self._txns = CleanedTransactions(self.aborted_txns)
        groups = group_segments(
            to_clean,
            self.config.segment_bytes,
            self.config.segment_index_bytes,
            self.first_uncleanable_offset,
        )
        for group in groups:
            self._check()
            cleaned = self._clean_group(group, offset_map)
            if not swap(CleanedGroup(cleaned, group)):
                raise CleaningAborted(f"{self.name} changed during cleaning; the swap was refused")
            stats.groups += 1
        stats.end_offset = end_offset
        stats.end_s = self.clock.monotonic_s()
        return stats

    # -- the offset map --

    def _build_offset_map(self, offset_map: OffsetMap) -> None:
        """Map the dirty section, up to where the map fills."""
        start = self.first_dirty_offset
        end = self.first_uncleanable_offset
        offset_map.latest_offset = start - 1
        dirty = [
            i
            for i, s in enumerate(self.sources)
            if s.base_offset < end and s.next_offset > start and not s.active
        ]
        if not dirty:
            return
        io_size = self.cleaner_config.io_buffer_size
        stats = self.stats
        txns = CleanedTransactions([e for e in self.aborted_txns if e.last_offset >= start])
        for i in dirty:
            src = self.sources[i]
            fd = src.open()
            try:
                for pos, fields, batch in _iter_batches(fd, src.size, io_size, self._throttle):
                    self._check()
                    base = fields[BASE_OFFSET]
                    last = base + fields[LAST_OFFSET_DELTA]
                    attributes = fields[ATTRIBUTES]
                    if attributes & _TXN_OR_CONTROL:
                        # Markers have no keys, and aborted records must not hide committed ones.
                        pid = fields[PRODUCER_ID]
                        if attributes & rb.CONTROL_FLAG:
                            try:
                                txns.on_control_batch(pid, last, control_type(batch, fields))
                            except Exception as exc:  # BadRecords, or a codec's error
                                raise CorruptSegment(
                                    f"{src.path} at position {pos}: {exc}"
                                ) from exc
                            skip = True
                        else:
                            skip = txns.on_batch(pid, last)
                        if skip:
                            if last >= start:
                                offset_map.latest_offset = max(offset_map.latest_offset, last)
                            continue
                    if last < start or not fields[RECORDS_COUNT]:
                        continue
                    try:
                        spans = record_spans(records_data(batch, fields), fields[RECORDS_COUNT])
                    except Exception as exc:  # BadRecords, or a codec's error
                        raise CorruptSegment(f"{src.path} at position {pos}: {exc}") from exc
                    put = offset_map.put
                    for span in spans:
                        key = span[4]
                        offset = base + span[3]
                        if key is not None and offset >= start and not put(key, offset):
                            if offset_map.latest_offset < start:
                                raise UncleanableLog(
                                    f"{self.name}: log.cleaner.dedupe.buffer.size holds no whole batch "
                                    f"at offset {base}; raise it"
                                )
                            return
                    stats.map_records_read += len(spans)
                    stats.map_bytes_read += len(batch)
                    offset_map.latest_offset = max(offset_map.latest_offset, last)
            finally:
                os.close(fd)
            # Offsets up to the next segment are all seen (gaps included).
            offset_map.latest_offset = max(offset_map.latest_offset, src.next_offset - 1)

    # -- rewriting --

    def _clean_group(self, group: list[SourceSegment], offset_map: OffsetMap) -> LogSegment:
        base = group[0].base_offset
        cfg = self.config
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            stale = os.path.join(self.directory, f"{base:020d}{suffix}{CLEANED_SUFFIX}")
            if os.path.exists(stale):
                os.unlink(stale)
        cleaned = LogSegment(
            self.directory,
            base,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_size=cfg.segment_index_bytes,
            active=True,
            now_ms=self.now_ms,
            file_suffix=CLEANED_SUFFIX,
        )
        self._txns.cleaned_index = cleaned.txn_index
        try:
            cleaned.ensure_created()
            for src in group:
                self._clean_into(src, cleaned, offset_map)
            # Both index files exist even when nothing was indexed, as after a roll.
            cleaned.offset_index.entries  # noqa: B018
            cleaned.time_index.entries  # noqa: B018
            cleaned.on_become_inactive()
            cleaned.flush()
            for path in (cleaned.offset_index.path, cleaned.time_index.path):
                _fsync_path(path)
            cleaned.close_handles()
            self._txns.cleaned_index = None
        except Exception:
            cleaned.delete()
            raise
        return cleaned

    def _clean_into(self, src: SourceSegment, dest: LogSegment, offset_map: OffsetMap) -> None:
        io_size = self.cleaner_config.io_buffer_size
        out = bytearray()
        infos: list[BatchInfo] = []
        stats = self.stats
        fd = src.open()
        try:
            for pos, fields, batch in _iter_batches(fd, src.size, io_size, self._throttle):
                self._check()
                if crc32c(memoryview(batch)[rb.ATTRIBUTES_OFFSET :]) != fields[CRC]:
                    raise CorruptSegment(f"{src.path}: CRC mismatch in the batch at position {pos}")
                try:
                    kept, max_ts, records_kept = self._filter_batch(fields, batch, offset_map)
                except BadRecords as exc:
                    raise CorruptSegment(f"{src.path} at position {pos}: {exc}") from exc
                stats.bytes_read += len(batch)
                stats.records_read += fields[RECORDS_COUNT]
                if kept is None:
                    continue
                base = fields[BASE_OFFSET]
                infos.append(
                    BatchInfo(len(out), base, base + fields[LAST_OFFSET_DELTA], max_ts, len(kept))
                )
                out += kept
                stats.records_written += records_kept
                if len(out) >= io_size:
                    self._write(dest, out, infos)
                    out, infos = bytearray(), []
            if out:
                self._write(dest, out, infos)
        finally:
            os.close(fd)

    def _write(self, dest: LogSegment, data: bytearray, infos: list[BatchInfo]) -> None:
        dest.append(memoryview(data), infos)
        self.stats.bytes_written += len(data)
        self._throttle(len(data))

    def _filter_batch(
        self, fields: tuple[int, ...], batch: bytes, offset_map: OffsetMap
    ) -> tuple[bytes | None, int, int]:
        """(the batch to write or None, its max timestamp, records kept), as Kafka's
        LogCleaner.cleanInto and MemoryRecords.filterTo decide."""
        attributes = fields[ATTRIBUTES]
        count = fields[RECORDS_COUNT]
        base = fields[BASE_OFFSET]
        last = base + fields[LAST_OFFSET_DELTA]
        pid = fields[PRODUCER_ID]
        discard_records = False  # every record goes: aborted data, a marker past its horizon
        marker_done = False  # a marker whose transaction has no data left in this cleaning
        if attributes & _TXN_OR_CONTROL:
            if attributes & rb.CONTROL_FLAG:
                marker_done = self._txns.on_control_batch(pid, last, control_type(batch, fields))
                discard_records = (
                    marker_done
                    and bool(attributes & rb.DELETE_HORIZON_FLAG)
                    and fields[BASE_TIMESTAMP] <= self.now_ms
                )
            else:
                discard_records = self._txns.on_batch(pid, last)
        retain_empty = (
            pid >= 0 and self._last_of_producer(pid, last, attributes, fields[PRODUCER_EPOCH])
        ) or (last + 1 == self.first_uncleanable_offset)
        if count == 0:
            return (batch if retain_empty else None), fields[MAX_TIMESTAMP], 0
        if discard_records:
            return (empty_batch(fields) if retain_empty else None), fields[MAX_TIMESTAMP], 0
        if attributes & rb.CONTROL_FLAG:
            if not marker_done or attributes & rb.DELETE_HORIZON_FLAG:
                return batch, fields[MAX_TIMESTAMP], count
            # Its transaction has no data left: it goes at the horizon, as a tombstone would.
            data = records_data(batch, fields)
            spans = record_spans(data, count)
            rebuilt, max_ts = rebuild_batch(
                fields, data, spans, self.now_ms + self.config.delete_retention_ms
            )
            return rebuilt, max_ts, count
        return self._filter_records(fields, batch, offset_map, retain_empty)

    def _filter_records(
        self, fields: tuple[int, ...], batch: bytes, offset_map: OffsetMap, retain_empty: bool
    ) -> tuple[bytes | None, int, int]:
        """`_filter_batch` for a data batch to keep: each record stays if it is its key's latest
        (or lies past the map), a tombstone only until its horizon; the batch is rebuilt if a
        record went or a kept tombstone needs a delete horizon."""
        attributes = fields[ATTRIBUTES]
        count = fields[RECORDS_COUNT]
        base = fields[BASE_OFFSET]
        data = records_data(batch, fields)
        spans = record_spans(data, count)
        has_horizon = bool(attributes & rb.DELETE_HORIZON_FLAG)
        retain_deletes = not has_horizon or self.now_ms < fields[BASE_TIMESTAMP]
        latest = offset_map.latest_offset
        found = offset_map.offsets.get
        kept = []
        tombstones = False
        for span in spans:
            offset = base + span[3]
            if offset <= latest:
                key = span[4]
                if key is None or offset < found(key, -1):
                    continue
                if not span[5] and not retain_deletes:
                    continue
            kept.append(span)
            if not span[5]:
                tombstones = True
        if not kept:
            return (empty_batch(fields) if retain_empty else None), fields[MAX_TIMESTAMP], 0
        new_horizon = tombstones and not has_horizon
        if len(kept) == count and not new_horizon:
            return batch, fields[MAX_TIMESTAMP], count
        horizon = self.now_ms + self.config.delete_retention_ms if new_horizon else None
        rebuilt, max_ts = rebuild_batch(fields, data, kept, horizon)
        if len(rebuilt) > len(batch) and len(rebuilt) > self.config.max_message_bytes:
            # Recompressed fewer records into more bytes than the topic allows: keep the
            # original rather than write a batch recovery would refuse.
            log.warning(
                "%s: batch at offset %d kept whole: cleaned it is above max.message.bytes",
                self.name,
                base,
            )
            return batch, fields[MAX_TIMESTAMP], count
        return rebuilt, max_ts, len(kept)

    def _last_of_producer(self, pid: int, last: int, attributes: int, epoch: int) -> bool:
        """Whether the batch holds its producer's last record (kept, if only empty, so that a
        reload of the log finds the producer's sequence and epoch): the batch with its last
        data offset, or, for a producer whose last batch was a marker, a marker of its epoch."""
        found = self.producers.get(pid)
        if found is None:
            return False
        last_data, producer_epoch = found
        if last_data >= 0:
            return last == last_data
        return bool(attributes & rb.CONTROL_FLAG) and epoch == producer_epoch


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the cleaner of a broker (the log's thread) ----------------------------------------------


class LogCleaner:
    """Chooses logs, makes tasks, swaps their groups in and keeps the checkpoints; every method
    runs on the logs' thread. Who runs `CleaningTask.run` (a worker thread, or this thread in
    `clean_once`) is the caller's choice: see broker.py for the broker's. Its clock is the log
    manager's."""

    def __init__(self, logs: LogManager, config: CleanerConfig | None = None) -> None:
        self.logs = logs
        self.clock = logs.clock
        self.config = config or CleanerConfig()
        self.throttler = Throttler(self.config.io_max_bytes_per_second, self.clock)
        self.in_progress: dict[TopicPartition, CleaningTask] = {}
        self.uncleanable: set[TopicPartition] = set()
        self.last_stats: CleanerStats | None = None
        self.cleanings = 0  # completed
        # False: a swap leaves its last directory fsync to the caller, which runs it off the
        # logs' thread (runtime/cleaner_thread.py); see Log.replace_segments.
        self.sync_swaps = True
        self._checkpoints: dict[TopicPartition, int] = {}
        # The log each checkpoint was made for: a partition deleted and created again under the
        # same name starts from nothing, not from its predecessor's checkpoint.
        self._owners: dict[TopicPartition, Log] = {}
        for d in logs.log_dirs:
            path = os.path.join(d, CHECKPOINT_FILE)
            try:
                self._checkpoints.update(checkpoints.read_offsets(path))
            except (checkpoints.CheckpointError, ValueError) as exc:
                log.warning("ignoring damaged %s: %s", path, exc)
        # One cleaner per log manager: a new one (a test's restart) replaces the one before.
        logs.truncation_listeners[:] = [
            f
            for f in logs.truncation_listeners
            if not isinstance(getattr(f, "__self__", None), LogCleaner)
        ]
        logs.truncation_listeners.append(self.maybe_truncate_checkpoint)

    def maybe_truncate_checkpoint(self, tp: TopicPartition, offset: int) -> None:
        """A log was truncated, and `offset` is its active segment's base now: a checkpoint
        above it would call offsets written again after the truncation clean (Kafka's
        LogCleanerManager.maybeTruncateCheckpoint). A cleaning in progress is refused at its
        next swap (the log's truncation count changed)."""
        checkpoint = self._checkpoints.get(tp)
        if checkpoint is not None and checkpoint > offset:
            log.info("%s-%d: truncated; cleaner checkpoint %d -> %d", *tp, checkpoint, offset)
            self._update_checkpoint(tp, offset)

    def checkpoint_of(self, topic: str, partition: int) -> int | None:
        return self._checkpoints.get((topic, partition))

    def _write_checkpoint(self, d: str) -> None:
        mine = {tp: o for tp, o in self._checkpoints.items() if self.logs.dir_of(*tp) == d}
        checkpoints.write_offsets(os.path.join(d, CHECKPOINT_FILE), mine)

    def _update_checkpoint(self, tp: TopicPartition, offset: int) -> None:
        self._checkpoints[tp] = offset
        d = self.logs.dir_of(*tp)
        if d is not None:
            self._write_checkpoint(d)

    def logs_to_clean(self, now_ms: int) -> list[LogToClean]:
        """Every compacted log that may be cleaned, with its figures."""
        out = []
        for tp, log_ in self.logs.partitions():
            if (
                not log_.config.compact
                or log_.closed
                or log_.offline
                or tp in self.in_progress
                or tp in self.uncleanable
            ):
                continue
            owner = self._owners.setdefault(tp, log_)
            if owner is not log_:
                self._owners[tp] = log_
                if self._checkpoints.pop(tp, None) is not None and (d := self.logs.dir_of(*tp)):
                    self._write_checkpoint(d)
            checkpoint = self._checkpoints.get(tp)
            first_dirty, _, reset = cleanable_offsets(log_, checkpoint, now_ms)
            if reset:
                log.warning(
                    "%s-%d: cleaner checkpoint %s is outside the log; starting from %d",
                    *tp,
                    checkpoint,
                    first_dirty,
                )
                self._update_checkpoint(tp, first_dirty)
            ltc = log_to_clean(tp, log_, self._checkpoints.get(tp), now_ms)
            if ltc.total_bytes > 0:
                out.append(ltc)
        return out

    def grab_filthiest(
        self, now_ms: int, only: TopicPartition | None = None, force: bool = False
    ) -> CleaningTask | None:
        """The dirtiest log over its threshold (or `only`, and with `force` whatever its
        ratio: a tool's "clean now"), as a task now in progress; None if there is none."""
        if not self.config.enabled and not force:
            return None
        candidates = [
            ltc
            for ltc in self.logs_to_clean(now_ms)
            if (only is None or ltc.topic_partition == only)
            and (
                force
                or (ltc.need_compaction_now and ltc.cleanable_bytes > 0)
                or ltc.cleanable_ratio > ltc.log.config.min_cleanable_dirty_ratio
            )
        ]
        if not candidates:
            return None
        best = max(candidates, key=lambda ltc: ltc.cleanable_ratio)
        task = CleaningTask(
            best,
            _snapshot(best.log),
            config=best.log.config,
            cleaner_config=self.config,
            now_ms=now_ms,
            clock=self.clock,
        )
        self.in_progress[best.topic_partition] = task
        log.info(
            "cleaning %s: dirty [%d, %d), %.0f%% of %.1f MB%s",
            task.name,
            best.first_dirty_offset,
            best.first_uncleanable_offset,
            100 * best.cleanable_ratio,
            best.total_bytes / (1024 * 1024),
            " (max.compaction.lag.ms passed)" if best.need_compaction_now else "",
        )
        return task

    def swap(self, task: CleaningTask, group: CleanedGroup) -> bool:
        """Swap a cleaned group in if the log still holds exactly its segments; else drop it."""
        log_ = task.log
        old = group.old
        segs = log_.segments
        ok = (
            not task.aborted
            and not log_.closed
            and self.logs.get(*task.topic_partition) is log_
            and log_.truncations == task.truncations
            and log_.log_end_offset >= task.log_end_offset
            and any(s is old[0] for s in segs)
        )
        if ok:
            first = next(i for i, s in enumerate(segs) if s is old[0])
            here = segs[first : first + len(old)]
            ok = (
                len(here) == len(old)
                and all(a is b for a, b in zip(here, old, strict=True))
                and first + len(old) < len(segs)
                and all(s.size == src.size for s, src in zip(old, group.sources, strict=True))
            )
        if not ok:
            log.info(
                "%s: log changed during cleaning; dropping the cleaned segment %d",
                task.name,
                group.cleaned.base_offset,
            )
            group.cleaned.delete()
            task.abort()
            return False
        log_.replace_segments(group.cleaned, old, sync=self.sync_swaps)
        return True

    def done(self, task: CleaningTask, stats: CleanerStats | None) -> None:
        """The task ended: completed (`stats`), or aborted (None); the checkpoint moves only
        when every group went in."""
        self.in_progress.pop(task.topic_partition, None)
        if stats is not None and task.log is not None and task.log.truncations != task.truncations:
            stats = None  # truncated after the last swap: its end offset may name lost offsets
        if stats is None:
            log.info("cleaning %s stopped before the end; the checkpoint stays", task.name)
            _remove_cleaned_files(task.directory)
            return
        self.last_stats = stats
        self.cleanings += 1
        self._update_checkpoint(task.topic_partition, stats.end_offset)
        mb = 1024 * 1024
        log.info(
            "cleaned %s: [%d, %d) in %d group(s), %.1f MB read, %.1f MB written (%.0f%% less), "
            "%d of %d records kept, %.2f s (%.1f MB/s); map: %d keys, %.0f%% full",
            task.name,
            task.first_dirty_offset,
            stats.end_offset,
            stats.groups,
            stats.bytes_read / mb,
            stats.bytes_written / mb,
            100 * (1 - stats.bytes_written / stats.bytes_read) if stats.bytes_read else 0,
            stats.records_written,
            stats.records_read,
            stats.elapsed_s,
            (stats.bytes_read + stats.map_bytes_read) / mb / stats.elapsed_s,
            stats.map_keys,
            100 * stats.map_utilization,
        )

    def failed(self, task: CleaningTask, exc: BaseException) -> None:
        """The task raised something other than CleaningAborted: the log is left alone until
        a restart (Kafka's uncleanable partitions), unless it was deleted meanwhile (its
        directory went away under the worker)."""
        self.in_progress.pop(task.topic_partition, None)
        _remove_cleaned_files(task.directory)
        if self.logs.get(*task.topic_partition) is not task.log or task.log.closed:
            log.info("cleaning %s stopped: the log was deleted or closed (%s)", task.name, exc)
            return
        self.uncleanable.add(task.topic_partition)
        log.error("cleaning %s failed; it is not cleaned again until a restart: %s", task.name, exc)

    def abort_all(self) -> list[CleaningTask]:
        tasks = list(self.in_progress.values())
        for task in tasks:
            task.abort()
        return tasks

    def clean_once(
        self, now_ms: int, only: TopicPartition | None = None, force: bool = False
    ) -> CleanerStats | None:
        """Grab a log and clean it on this thread (tests, tools); None if nothing was cleaned."""
        task = self.grab_filthiest(now_ms, only, force)
        if task is None:
            return None
        return self.run_here(task)

    def run_here(self, task: CleaningTask) -> CleanerStats | None:
        try:
            stats = task.run(lambda group: self.swap(task, group), self.throttler)
        except CleaningAborted as exc:
            log.info("%s", exc)
            self.done(task, None)
            return None
        except Exception as exc:
            self.failed(task, exc)
            raise
        self.done(task, stats)
        return stats


def _remove_cleaned_files(directory: str) -> None:
    """What a stopped task (a killed worker process) may have left: only that task writes
    `.cleaned` files in its log's directory, and it has ended."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass


def _snapshot(log_: Log) -> list[SourceSegment]:
    """What the worker needs of every segment, taken on the log's thread."""
    out = []
    segs = log_.segments
    last = len(segs) - 1
    for i, seg in enumerate(segs):
        active = i == last
        st = os.stat(seg.log_path)
        out.append(
            SourceSegment(
                segment=seg,
                base_offset=seg.base_offset,
                next_offset=log_.log_end_offset if active else segs[i + 1].base_offset,
                path=seg.log_path,
                size=seg.size,
                inode=(st.st_dev, st.st_ino),
                index_bytes=0 if active else seg.offset_index.entries * 8,
                time_index_bytes=0 if active else seg.time_index.entries * 12,
                active=active,
            )
        )
    return out
