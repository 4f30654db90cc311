"""One segment of a partition log: `<base>.log` and its `.index`, `.timeindex` and `.txnindex`.

    <20-digit base offset>.log        record batches, back to back, exactly as appended
    <20-digit base offset>.index      sparse offset -> position (see index.py)
    <20-digit base offset>.timeindex  sparse timestamp -> offset
    <20-digit base offset>.txnindex   aborted transactions whose marker is here (txn_index.py);
                                      only once there is one

Index rule (the same on append and on rebuild, so a rebuilt index equals the original): a batch
that starts more than `index.interval.bytes` after the last indexed batch gets an offset-index
entry (its last offset, its position) and a time-index entry (the segment's largest timestamp so
far and the last offset of the batch that carries it), the latter only if that timestamp is new.
When the segment stops being active it gets one more time-index entry for its largest timestamp,
so the last entry of an inactive segment's time index is always the segment's maximum. A full
index takes no more entries (one append of many batches can fill it part way; the log rolls
before the next append); a rebuild meets the same full index at the same batch.

The log writes the .txnindex (it knows the transactions); the segment truncates, flushes, renames
and deletes it with the rest. A segment being built by the log cleaner carries a suffix on all
its names (`.cleaned`, then `.swap`; see Log.replace_segments) until it is swapped into the log.

Batches rewritten by the cleaner keep their offset range with fewer records (recordsCount <
lastOffsetDelta + 1), or none (an empty batch kept for its producer's sequence); recovery takes
them as Kafka does, while a produce still needs the two to agree.

A segment knows bytes, positions and offsets; not leaders, high watermarks, retention or the
network. Single-threaded: the log that owns it calls it from one thread, except `flush`, which
may run on a worker thread while appends continue (fsync of an fd is safe against writes).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.storage.index import OffsetIndex, TimeIndex, TimestampOffset
from gregor.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

if TYPE_CHECKING:
    from gregor.storage.config import LogConfig

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
INT32_MAX = (1 << 31) - 1

_SCAN_CHUNK = 16384
# What a scan needs of a batch header: baseOffset, batchLength, lastOffsetDelta, maxTimestamp.
_SCAN_FIELDS = struct.Struct(">qi11xi8xq").unpack_from
_HEADER = rb.HEADER_SIZE
_MIN_LENGTH = rb.HEADER_SIZE - rb.LOG_OVERHEAD
_new_info = tuple.__new__  # a BatchInfo (AppendMark) without the Python-level __new__


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class FileSlice(NamedTuple):
    """`length` bytes of an open file from `position`: what a fetch sendfiles to the socket."""

    fd: int
    position: int
    length: int

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        return os.pread(self.fd, self.length, self.position)

    def dup(self) -> FileSlice:
        """The same slice on a duplicate fd, which stays readable if the segment is deleted;
        whoever takes it closes it."""
        return FileSlice(os.dup(self.fd), self.position, self.length)


class BatchInfo(NamedTuple):
    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int


class AppendMark(NamedTuple):
    size: int
    offset_entries: int
    time_entries: int
    bytes_since_index: int
    max_ts: TimestampOffset | None
    first_batch_ts: int | None


class RecoveryResult(NamedTuple):
    valid_bytes: int
    truncated_bytes: int
    reason: str


class LogSegment:
    def __init__(
        self,
        directory: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        active: bool,
        now_ms: int,
        file_suffix: str = "",
        new: bool = False,
    ) -> None:
        """`new`: its file is not there yet (a log made just now): its size is 0, not read."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        # <directory>/<base>: the four files' path less its suffixes (one join, not four)
        stem = os.path.join(directory, file_name(base_offset, ""))
        self.log_path = stem + LOG_SUFFIX + file_suffix
        self.offset_index = OffsetIndex(
            stem + INDEX_SUFFIX + file_suffix,
            base_offset,
            max_index_size,
            writable=active,
        )
        self.time_index = TimeIndex(
            stem + TIME_INDEX_SUFFIX + file_suffix,
            base_offset,
            max_index_size,
            writable=active,
        )
        self.txn_index = TransactionIndex(
            stem + TXN_INDEX_SUFFIX + file_suffix,
            base_offset,
        )
        self._fd: int | None = None
        # The batch appended last (its position in this file), while known: a read at or past
        # its base offset (a follower or consumer keeping up) starts there, without an index
        # search and a scan of the headers before it; one within it (the common case: the
        # batch just appended) needs no read of its header either, which says what the
        # append already knew.
        self._tail: BatchInfo | None = None
        self.size = 0
        if not new:
            try:
                self.size = os.stat(self.log_path).st_size
            except FileNotFoundError:
                pass
        self.created_ms = now_ms  # when this broker made or first opened it (segment.ms)
        self._bytes_since_index = 0
        # Largest timestamp so far and the last offset of the batch that holds it; None until
        # known (read from the time index or by a scan).
        self._max_ts: TimestampOffset | None = None
        self._first_batch_ts: int | None = None
        self._flushed_size = self.size
        # (leader epoch, base offset) where a larger epoch begins among the batches the last
        # `recover` kept: the leader-epoch cache takes them back (see Log.open).
        self.recovered_epochs: list[tuple[int, int]] = []
        # Whether a batch the last `recover` kept carries a producer id (the log then skips the
        # producer-state replay of a recovered tail that has none; see loader.py).
        self.recovered_producer_batches = True

    # -- files --------------------------------------------------------------------------------

    @property
    def fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def close_handles(self) -> None:
        """Release the fd and the maps; they reopen on next use."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def ensure_created(self) -> None:
        self.fd  # noqa: B018  (opening creates the file)

    def create_file(self) -> None:
        """Create the empty `.log` of a segment made just now, and hold no handle on it (its
        indexes are not opened): what `ensure_created` then `close_handles` leave."""
        os.close(os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644))

    # -- append -------------------------------------------------------------------------------

    def append(self, data: memoryview | bytes, batches: list[BatchInfo]) -> None:
        """Write validated, offset-assigned batches that sit back to back in `data`.

        `BatchInfo.position` is relative to the start of `data`. All or nothing: when the
        write fails (ENOSPC, EIO) the file is cut back to where it was and the OSError raised;
        the index entries are added only after the bytes are written, into blocks reserved
        before (index.py), so they cannot fail half way.
        """
        start = self.size
        self.offset_index.reserve(len(batches))
        self.time_index.reserve(len(batches) + 1)  # + the entry added at roll
        try:
            written = os.write(self.fd, data)
            while written < len(data):  # short: the disk is full, or a signal came
                written += os.write(self.fd, memoryview(data)[written:])
        except OSError:
            self._cut(start)
            raise
        for info in batches:
            self._maybe_index(start + info.position, info)
        self.size = start + len(data)
        if batches:
            last = batches[-1]
            self._tail = _new_info(
                BatchInfo,
                (start + last.position, last.base_offset, last.last_offset,
                 last.max_timestamp, last.size),
            )  # fmt: skip

    def _cut(self, size: int) -> None:
        """Best effort: drop a failed write's bytes (the log goes offline whatever happens)."""
        try:
            os.ftruncate(self.fd, size)
        except OSError as exc:
            log.error(
                "%s: could not cut a failed write back to %d bytes: %s", self.log_path, size, exc
            )

    def mark(self) -> AppendMark:
        """Where the segment stands, for `rollback` after a later step of an append failed."""
        return _new_info(
            AppendMark,
            (self.size, self.offset_index.entries, self.time_index.entries,
             self._bytes_since_index, self._max_ts, self._first_batch_ts),
        )  # fmt: skip

    def rollback(self, mark: AppendMark, first_offset: int) -> None:
        """Undo every append since `mark` (the batches from `first_offset` on): the file, both
        indexes, the .txnindex and the running state are as they were (best effort: a failure
        here is logged; the log is offline by then and recovery cuts what remains)."""
        self._cut(mark.size)
        self._tail = None
        self.size = min(self.size, mark.size)
        self._flushed_size = min(self._flushed_size, mark.size)
        try:
            self.offset_index.truncate_to_entries(mark.offset_entries)
            self.time_index.truncate_to_entries(mark.time_entries)
            self.txn_index.truncate_to(first_offset)
        except OSError as exc:
            log.error("%s: could not cut the indexes back: %s", self.log_path, exc)
        self._bytes_since_index = mark.bytes_since_index
        self._max_ts = mark.max_ts
        self._first_batch_ts = mark.first_batch_ts

    def _maybe_index(self, position: int, info: BatchInfo) -> None:
        """Apply the index rule to one batch at `position` (see the module docstring)."""
        max_ts = self._max_ts
        if max_ts is None:
            max_ts = self.max_timestamp_so_far()
        timestamp = info.max_timestamp
        if timestamp > max_ts.timestamp:
            max_ts = self._max_ts = _new_info(TimestampOffset, (timestamp, info.last_offset))
        if position == 0 and self._first_batch_ts is None:
            self._first_batch_ts = timestamp
        if self._bytes_since_index > self.index_interval_bytes and not (
            self.offset_index.is_full() or self.time_index.is_full()
        ):
            self.offset_index.append(info.last_offset, position)
            self.time_index.maybe_append(max_ts.timestamp, max_ts.offset)
            self._bytes_since_index = 0
        self._bytes_since_index += info.size

    def max_timestamp_so_far(self) -> TimestampOffset:
        if self._max_ts is None:
            self._max_ts = self.time_index.last_entry()
        return self._max_ts

    @property
    def largest_timestamp(self) -> int:
        """The largest timestamp in the segment (-1 when empty or unknown)."""
        return self.max_timestamp_so_far().timestamp

    def roll_reason(
        self, config: LogConfig, size: int, last_offset: int, max_ts: int, now_ms: int
    ) -> str:
        """Why an append of `size` bytes ending at `last_offset`, its largest timestamp
        `max_ts`, must start a new segment (Kafka's LogSegment.shouldRoll); "" when it may go
        in this one. segment.ms counts from the first batch's timestamp (from when this broker
        made or opened the segment when that is unknown)."""
        if self.size > config.segment_bytes - size:
            return "segment.bytes"
        if self.size > 0:
            first = self._first_batch_ts
            if first is None:
                first = self.first_batch_timestamp()
            waited = max_ts - first if first >= 0 and max_ts >= 0 else now_ms - self.created_ms
            if waited > config.segment_ms - config.segment_jitter_ms:
                return "segment.ms"
        if self.offset_index.is_full() or self.time_index.is_full():
            return "a full index"
        if not 0 <= last_offset - self.base_offset <= INT32_MAX:
            return "relative offset overflow"
        return ""

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def first_batch_timestamp(self) -> int:
        """The max timestamp of the first batch (what segment.ms rolling counts from)."""
        if self._first_batch_ts is None and self.size >= rb.HEADER_SIZE:
            header = rb.read_header(os.pread(self.fd, rb.HEADER_SIZE, 0))
            self._first_batch_ts = header.max_timestamp
        return self._first_batch_ts if self._first_batch_ts is not None else -1

    def rolling_based_timestamp(self) -> int:
        ts = self.first_batch_timestamp()
        return ts if ts >= 0 else self.created_ms

    # -- scanning -----------------------------------------------------------------------------

    def iter_batches(self, start_position: int = 0, end: int | None = None) -> Iterator[BatchInfo]:
        """Batch headers from `start_position` on, read in chunks; stops at a partial batch."""
        end = self.size if end is None else end
        pos = start_position
        fd = self.fd
        while end - pos >= _HEADER:
            chunk = os.pread(fd, min(_SCAN_CHUNK, end - pos), pos)
            n = len(chunk)
            off = 0
            while n - off >= _HEADER:
                base, length, delta, max_ts = _SCAN_FIELDS(chunk, off)
                size = length + rb.LOG_OVERHEAD
                if length < _MIN_LENGTH or pos + size > end:
                    return
                yield _new_info(BatchInfo, (pos, base, base + delta, max_ts, size))
                off += size
                pos += size
            if off == 0:
                # The next header straddles the chunk: reread starting at it.
                if n < _HEADER:
                    return

    @staticmethod
    def _read_size(pos: int, end: int, hint: int) -> int:
        """How much a scan at `pos` reads: up to `hint` (where the index says the header it looks
        for ends), else a whole chunk; never past `end`. Sizes reads, never changes a result."""
        if hint > pos:
            n = hint - pos if hint - pos > _HEADER else _HEADER
            if n > _SCAN_CHUNK:
                n = _SCAN_CHUNK
        else:
            n = _SCAN_CHUNK
        return n if n < end - pos else end - pos

    def _large_gap(self, gap: int) -> bool:
        """Index entries this far apart mean batches of more than a few KiB: a scan's first
        read then takes one header rather than a chunk of which it would use 61 bytes."""
        return gap > _SCAN_CHUNK // 2 and gap > 2 * self.index_interval_bytes

    def find_batch(self, offset: int, start_position: int = 0, hint: int = -1) -> BatchInfo | None:
        """The first batch at or after `start_position` whose last offset is >= `offset`.

        `hint`, where the index says that batch's header ends at the latest, only sizes the
        reads: one read up to it, or just a header first when the batches are large."""
        end = self.size
        pos = start_position
        fd = self._fd if self._fd is not None else self.fd
        small_first = hint > pos and self._large_gap(hint - pos)
        while end - pos >= _HEADER:
            if small_first:
                chunk = os.pread(fd, _HEADER, pos)
                small_first = False
            else:
                chunk = os.pread(fd, self._read_size(pos, end, hint), pos)
            n = len(chunk)
            off = 0
            while n - off >= _HEADER:
                base, length, delta, max_ts = _SCAN_FIELDS(chunk, off)
                size = length + rb.LOG_OVERHEAD
                if length < _MIN_LENGTH or pos + size > end:
                    return None
                if base + delta >= offset:
                    return _new_info(BatchInfo, (pos, base, base + delta, max_ts, size))
                off += size
                pos += size
            if off == 0:
                return None  # a short read: the file ends before the header does
        return None

    def translate_offset(self, offset: int) -> BatchInfo | None:
        """The batch holding `offset` (or the first after it): an index search, then a short scan
        (from the last batch appended, when `offset` is not below its base offset)."""
        tail = self._tail
        if tail is not None and offset >= tail[1]:
            if offset <= tail[2]:
                return tail
            return self.find_batch(offset, tail[0], self.size)
        position, next_position = self.offset_index.lookup_span(offset)
        # The batch is at or before the next entry's (its last offset is above `offset`).
        hint = next_position + _HEADER if next_position >= 0 else self.size
        return self.find_batch(offset, position, hint)

    def batch_boundary_at_or_before(self, position: int, not_before: int) -> int:
        """The largest batch end <= `position`, scanning from the index entry below it."""
        entry, next_entry = self.offset_index.lookup_position_span(position)
        start = max(entry, not_before)
        boundary = pos = start
        # Only whole batches that end by `position` count, so only headers that start at least
        # `_HEADER` bytes before it need reading.
        stop = min(position, self.size)
        small_first = self._large_gap((next_entry if next_entry >= 0 else stop) - entry)
        fd = self._fd if self._fd is not None else self.fd
        while stop - pos >= _HEADER:
            if small_first:
                chunk = os.pread(fd, _HEADER, pos)
                small_first = False
            else:
                n = stop - pos  # every header that can matter, up to a chunk
                chunk = os.pread(fd, n if n < _SCAN_CHUNK else _SCAN_CHUNK, pos)
            n = len(chunk)
            off = 0
            while n - off >= _HEADER:
                length = _SCAN_FIELDS(chunk, off)[1]
                size = length + rb.LOG_OVERHEAD
                if length < _MIN_LENGTH or pos + size > stop:
                    return boundary
                pos += size
                off += size
                boundary = pos
            if off == 0:
                return boundary
        return boundary

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_batch: bool = True,
    ) -> tuple[FileSlice, BatchInfo] | None:
        """Whole batches from the one holding `start_offset`, up to `max_size` bytes and
        `max_position` (at least one whole batch if `min_one_batch`); None if nothing is there."""
        size = self.size  # (`min`s written out: a read of every Fetch)
        end_limit = size if max_position is None or max_position > size else max_position
        first = self.translate_offset(start_offset)
        if first is None or first.position >= end_limit:
            return None
        start = first.position
        if first.size > max_size or start + first.size > end_limit:
            if not min_one_batch or start + first.size > end_limit:
                return None
            return FileSlice(self.fd, start, first.size), first
        limit = start + max_size
        if end_limit < limit:
            limit = end_limit
        # end_limit is a batch boundary (the file's end or the start of the batch at the upper
        # bound offset); a byte budget that ends inside a batch is rounded down to one.
        end = limit if limit == end_limit else self.batch_boundary_at_or_before(limit, start)
        return FileSlice(self.fd, start, end - start), first

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> int | None:
        """The first offset >= start_offset in a batch whose max timestamp is >= `timestamp`.

        The offset is the batch's base offset: the broker answers at batch granularity, which
        is what a consumer seeking by time needs (it filters records below the time itself).
        """
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, start_offset)).position
        for info in self.iter_batches(position):
            if info.max_timestamp >= timestamp and info.last_offset >= start_offset:
                return max(info.base_offset, start_offset)
        return None

    # -- recovery, truncation -----------------------------------------------------------------

    def recover(self, max_message_bytes: int | None = None) -> RecoveryResult:
        """Validate every batch, rebuild both indexes, cut the file after the last good batch."""
        self.offset_index.reset()
        self.time_index.reset()
        self._bytes_since_index = 0
        self._max_ts = TimestampOffset(-1, self.base_offset)
        self._first_batch_ts = None
        pos = 0
        reason = ""
        fd = self.fd
        file_size = os.fstat(fd).st_size
        prev_next = self.base_offset
        epochs: list[tuple[int, int]] = []
        producers = False
        while pos < file_size:
            head = os.pread(fd, rb.HEADER_SIZE, pos)
            if len(head) < rb.HEADER_SIZE:
                reason = f"a torn header of {len(head)} bytes at position {pos}"
                break
            size = rb.peek_offset_and_size(head)[1]
            if size < rb.HEADER_SIZE or pos + size > file_size or size > 2**31:
                reason = f"a torn or damaged batch of claimed size {size} at position {pos}"
                break
            data = os.pread(fd, size, pos)
            try:
                header = _check_stored_batch(data, size, max_message_bytes)
            except KafkaError as exc:
                reason = f"a corrupt batch at position {pos}: {exc.message}"
                break
            if header.base_offset < prev_next or not self.can_convert_to_relative_offset(
                header.last_offset
            ):
                reason = (
                    f"batch at position {pos} has base offset {header.base_offset} out of order"
                )
                break
            self._maybe_index(
                pos,
                BatchInfo(pos, header.base_offset, header.last_offset, header.max_timestamp, size),
            )
            producers = producers or header.producer_id >= 0
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not epochs or epoch > epochs[-1][0]):
                epochs.append((epoch, header.base_offset))
            prev_next = header.last_offset + 1
            pos += size
        self.recovered_epochs = epochs
        self.recovered_producer_batches = producers
        truncated = file_size - pos
        if truncated:
            os.ftruncate(fd, pos)
        self._tail = None
        self.size = pos
        # What a crash left may be in the page cache only: no byte of it is known durable
        # until the next flush of this segment fsyncs it.
        self._flushed_size = 0
        return RecoveryResult(pos, truncated, reason)

    def truncate_to(self, offset: int) -> int:
        """Drop every batch holding offsets >= `offset` (whole batches only); bytes removed."""
        info = self.translate_offset(offset)
        if info is None:
            return 0
        position = info.position
        self.offset_index.truncate_to(offset)
        # A time entry is written with an offset entry and names an offset at or below that
        # entry's, so the index rule gives the kept batches only time entries up to the last
        # kept offset entry. Entries past it (one paired with a removed offset entry, or the
        # one added at roll) would make the index differ from what a rebuild makes.
        if self.offset_index.entries:
            self.time_index.truncate_to(min(offset, self.offset_index.last_offset + 1))
        else:
            self.time_index.truncate_to(self.base_offset)
        self.txn_index.truncate_to(offset)
        removed = self.size - position
        os.ftruncate(self.fd, position)
        self._tail = None
        self.size = position
        self._flushed_size = min(self._flushed_size, position)
        # Recompute the running state from what is left.
        last_index_pos = self.offset_index.last_entry().position if self.offset_index.entries else 0
        self._bytes_since_index = position - last_index_pos
        self._max_ts = None
        if self.time_index.entries == 0:
            self._max_ts = TimestampOffset(-1, self.base_offset)
            for b in self.iter_batches():
                if b.max_timestamp > self._max_ts.timestamp:
                    self._max_ts = TimestampOffset(b.max_timestamp, b.last_offset)
        else:
            self._max_ts = self.time_index.last_entry()
            for b in self.iter_batches(self.offset_index.lookup(self._max_ts.offset).position):
                if b.max_timestamp > self._max_ts.timestamp:
                    self._max_ts = TimestampOffset(b.max_timestamp, b.last_offset)
        if position == 0:
            self._first_batch_ts = None
        return removed

    def read_next_offset(self) -> int:
        """The offset after the last batch: from the last index entry, scanning the tail."""
        next_offset = self.base_offset
        for info in self.iter_batches(self.offset_index.last_entry().position):
            next_offset = info.last_offset + 1
        return next_offset

    def load_running_state(self) -> None:
        """After opening an existing active segment: where the next index entry falls."""
        last = self.offset_index.last_entry()
        self._bytes_since_index = (
            self.size - last.position if self.offset_index.entries else self.size
        )
        max_ts = self.time_index.last_entry()
        for info in self.iter_batches(self.offset_index.lookup(max_ts.offset).position):
            if info.max_timestamp > max_ts.timestamp:
                max_ts = TimestampOffset(info.max_timestamp, info.last_offset)
        self._max_ts = max_ts

    # -- lifecycle ----------------------------------------------------------------------------

    def on_become_inactive(self) -> None:
        """At roll: record the largest timestamp, trim both indexes to their entries."""
        max_ts = self.max_timestamp_so_far()
        if max_ts.timestamp >= 0:
            self.time_index.maybe_append(max_ts.timestamp, max_ts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def flush(self) -> None:
        if self._flushed_size != self.size:
            size = self.size
            if self._fd is not None:
                os.fsync(self._fd)
            else:  # recovered after a crash, its handles closed since: fsync without keeping one
                fd = os.open(self.log_path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            self._flushed_size = size
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        self.close_handles()

    def delete(self) -> None:
        self.close_handles()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.txn_index.delete()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the files from `old_suffix` to `new_suffix` ("" is the live name), the log
        first: recovery judges a swap by its `.log` file (see loader.py)."""
        paths = [self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path]
        renamed = []
        for path in paths:
            if old_suffix and not path.endswith(old_suffix):
                raise ValueError(f"{path} does not end with {old_suffix!r}")
            renamed.append(path[: len(path) - len(old_suffix)] + new_suffix)
        if os.path.exists(self.log_path):
            os.rename(self.log_path, renamed[0])
        self.log_path = renamed[0]
        self.offset_index.rename(renamed[1])
        self.time_index.rename(renamed[2])
        self.txn_index.rename(renamed[3])

    def rename_to_deleted(self) -> None:
        """First step of an asynchronous delete: the files stop being part of the log."""
        if os.path.exists(self.log_path):
            os.rename(self.log_path, self.log_path + DELETED_SUFFIX)
        self.log_path += DELETED_SUFFIX
        self.offset_index.rename(self.offset_index.path + DELETED_SUFFIX)
        self.time_index.rename(self.time_index.path + DELETED_SUFFIX)
        self.txn_index.rename(self.txn_index.path + DELETED_SUFFIX)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"


def _check_stored_batch(data: bytes, size: int, max_message_bytes: int | None) -> rb.BatchHeader:
    """`check_batch`, except that a batch the cleaner rewrote may hold fewer records than its
    offset range (0 <= recordsCount <= lastOffsetDelta + 1), as Kafka's recovery allows. Length,
    magic and CRC are checked before any count (INVALID_RECORD comes only after them)."""
    try:
        return rb.check_batch(data, 0, size, max_message_bytes)
    except KafkaError as exc:
        if exc.code != errors.INVALID_RECORD:
            raise
        header = rb.read_header(data)
        if (
            header.last_offset_delta >= 0
            and 0 <= header.records_count <= header.last_offset_delta + 1
        ):
            return header
        raise
