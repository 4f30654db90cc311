"""Sparse, memory-mapped indexes of a segment: offset -> position and timestamp -> offset.

File layouts (big-endian, Kafka's exactly)::

    <base>.index      entries of 8 bytes:  relativeOffset: int32, position: int32
    <base>.timeindex  entries of 12 bytes: timestamp: int64, relativeOffset: int32

`relativeOffset` is the offset minus the segment's base offset. An offset-index entry names the
*last* offset of the batch that starts at `position`; a time-index entry says "the batches up to
relativeOffset hold timestamps up to `timestamp`", and timestamps only grow along the file.

While its segment is active an index file is preallocated to `segment.index.bytes` (rounded down
to whole entries) and mapped read-write; the number of live entries is kept in memory. When the
segment rolls, or the log closes, the file is trimmed to exactly its entries, so a reader that
knows nothing of us (Kafka's DumpLogSegments) sees only real entries. A trimmed index is mapped
read-only, and only when first used: 10,000 partitions open without touching their indexes.

Lookups are binary searches. Most lookups are for recent offsets (consumers near the tail,
followers), so a search first tries the last `_WARM_BYTES` of the file, the pages that are
certainly in memory; only an older target touches the cold part. With 4 KiB between entries an
8 KiB warm section covers the last 1024 entries, i.e. the last ~4 MiB of the segment. (The same
reasoning as Kafka's AbstractIndex.)

Knows files and numbers; knows nothing of batches, leaders or the network.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from typing import NamedTuple

_WARM_BYTES = 8192


class CorruptIndexError(Exception):
    pass


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class _Index:
    ENTRY_SIZE = 0
    _ENTRY: struct.Struct

    def __init__(self, path: str, base_offset: int, max_index_size: int, writable: bool) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self._writable = writable
        self._mm: mmap.mmap | None = None
        self._entries: int | None = None  # known without mapping when the file is new
        self._max_entries = max(1, max_index_size // self.ENTRY_SIZE)

    # -- mapping ------------------------------------------------------------------------------

    def _open(self) -> mmap.mmap | None:
        """Map the file; an active index is grown to its preallocated size first."""
        exists = os.path.exists(self.path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size
            if self._entries is None:
                # A file from a previous run: every whole entry in it counts. A trimmed index is
                # exact; an untrimmed one (a crash) is rebuilt by recovery before anyone reads it.
                self._entries = length // self.ENTRY_SIZE if exists else 0
            if self._writable:
                size = self._max_entries * self.ENTRY_SIZE
                if length != size:
                    os.ftruncate(fd, max(size, self._entries * self.ENTRY_SIZE))
                length = max(size, self._entries * self.ENTRY_SIZE)
            if length == 0:
                return None
            access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
            return mmap.mmap(fd, length, access=access)
        finally:
            os.close(fd)

    def _map(self) -> mmap.mmap | None:
        if self._mm is None:
            self._mm = self._open()
        return self._mm

    @property
    def entries(self) -> int:
        if self._entries is None:
            self._map()
        assert self._entries is not None
        return self._entries

    def is_full(self) -> bool:
        return self.entries >= self._max_entries

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def flush(self) -> None:
        if self._mm is not None and self._writable:
            self._mm.flush()

    def trim_to_valid_size(self) -> None:
        """Cut the file to its live entries and map it read-only from now on."""
        entries = self.entries
        self.close()
        if os.path.exists(self.path) or entries:
            with open(self.path, "r+b" if os.path.exists(self.path) else "w+b") as f:
                f.truncate(entries * self.ENTRY_SIZE)
        self._writable = False

    def make_writable(self, max_index_size: int) -> None:
        """Reopen as an active index: preallocated again on next use."""
        entries = self.entries
        self.close()
        self.max_index_size = max_index_size
        self._max_entries = max(1, max_index_size // self.ENTRY_SIZE)
        self._writable = True
        self._entries = entries

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self.truncate_to_entries(0)

    def truncate_to_entries(self, n: int) -> None:
        self._map()
        self._entries = min(n, self.entries)
        if not self._writable:
            self.close()
            with open(self.path, "r+b") as f:
                f.truncate(self._entries * self.ENTRY_SIZE)
        elif self._mm is not None:
            # Zero the dropped tail so the preallocated region reads as empty, as a new file does.
            start = self._entries * self.ENTRY_SIZE
            self._mm[start : len(self._mm)] = bytes(len(self._mm) - start)

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def rename(self, path: str) -> None:
        self.close()
        if os.path.exists(self.path):
            os.rename(self.path, path)
        self.path = path

    # -- entries ------------------------------------------------------------------------------

    def _entry(self, mm: mmap.mmap, n: int) -> tuple[int, ...]:
        return self._ENTRY.unpack_from(mm, n * self.ENTRY_SIZE)

    def _append_raw(self, *values: int) -> None:
        mm = self._map()
        n = self.entries
        if n >= self._max_entries or mm is None or not self._writable:
            raise CorruptIndexError(f"index {self.path} is full or read-only ({n} entries)")
        self._ENTRY.pack_into(mm, n * self.ENTRY_SIZE, *values)
        self._entries = n + 1

    def _search(self, key_of: Callable[[mmap.mmap, int], int], target: int) -> int:
        """Slot of the largest entry whose key is <= target, or -1."""
        mm = self._map()
        n = self.entries
        if mm is None or n == 0:
            return -1
        warm = max(0, n - 1 - _WARM_BYTES // self.ENTRY_SIZE)
        if key_of(mm, warm) <= target:
            lo, hi = warm, n - 1
        else:
            if key_of(mm, 0) > target:
                return -1
            lo, hi = 0, warm
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if key_of(mm, mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo


class OffsetIndex(_Index):
    ENTRY_SIZE = 8
    _ENTRY = struct.Struct(">ii")

    def append(self, offset: int, position: int) -> None:
        self._append_raw(offset - self.base_offset, position)

    def entry(self, n: int) -> OffsetPosition:
        mm = self._map()
        assert mm is not None
        rel, pos = self._ENTRY.unpack_from(mm, n * 8)
        return OffsetPosition(self.base_offset + rel, pos)

    def last_entry(self) -> OffsetPosition:
        n = self.entries
        if n == 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(n - 1)

    @property
    def last_offset(self) -> int:
        return self.last_entry().offset

    def lookup(self, offset: int) -> OffsetPosition:
        """The entry with the largest offset <= `offset`, or (base, 0)."""
        unpack = self._ENTRY.unpack_from
        slot = self._search(lambda mm, n: unpack(mm, n * 8)[0], offset - self.base_offset)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def lookup_position(self, position: int) -> OffsetPosition:
        """The entry with the largest position <= `position`, or (base, 0)."""
        unpack = self._ENTRY.unpack_from
        slot = self._search(lambda mm, n: unpack(mm, n * 8)[1], position)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= `offset`."""
        unpack = self._ENTRY.unpack_from
        slot = self._search(lambda mm, n: unpack(mm, n * 8)[0], offset - self.base_offset - 1)
        self.truncate_to_entries(slot + 1)

    def all_entries(self) -> list[OffsetPosition]:
        return [self.entry(i) for i in range(self.entries)]

    def sanity_check(self, log_size: int) -> None:
        """Entries strictly increasing in offset, non-decreasing in position, within the log."""
        if os.path.exists(self.path) and not self._writable:
            length = os.path.getsize(self.path)
            if length % self.ENTRY_SIZE:
                raise CorruptIndexError(f"{self.path}: size {length} is not a multiple of 8")
        prev_off, prev_pos = -1, -1
        for i in range(self.entries):
            off, pos = self.entry(i)
            if off <= prev_off or pos < prev_pos or pos >= log_size or off < self.base_offset:
                raise CorruptIndexError(f"{self.path}: entry {i} ({off}, {pos}) is out of order")
            prev_off, prev_pos = off, pos


class TimeIndex(_Index):
    ENTRY_SIZE = 12
    _ENTRY = struct.Struct(">qi")

    def is_full(self) -> bool:
        # One slot is kept for the entry written when the segment rolls.
        return self.entries >= self._max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        mm = self._map()
        assert mm is not None
        ts, rel = self._ENTRY.unpack_from(mm, n * 12)
        return TimestampOffset(ts, self.base_offset + rel)

    def last_entry(self) -> TimestampOffset:
        n = self.entries
        if n == 0:
            return TimestampOffset(-1, self.base_offset)
        return self.entry(n - 1)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's."""
        n = self.entries
        if n:
            last_ts, last_off = self.entry(n - 1)
            if timestamp <= last_ts:
                return
            if offset < last_off:
                raise CorruptIndexError(
                    f"{self.path}: offset {offset} is below the last entry's {last_off}"
                )
        if not skip_full_check and self.is_full():
            raise CorruptIndexError(f"{self.path} is full")
        self._append_raw(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= `timestamp`, or (-1, base)."""
        unpack = self._ENTRY.unpack_from
        slot = self._search(lambda mm, n: unpack(mm, n * 12)[0], timestamp)
        if slot < 0:
            return TimestampOffset(-1, self.base_offset)
        return self.entry(slot)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= `offset`."""
        n = self.entries
        keep = n
        while keep > 0 and self.entry(keep - 1).offset >= offset:
            keep -= 1
        self.truncate_to_entries(keep)

    def all_entries(self) -> list[TimestampOffset]:
        return [self.entry(i) for i in range(self.entries)]

    def sanity_check(self, last_offset: int) -> None:
        if os.path.exists(self.path) and not self._writable:
            length = os.path.getsize(self.path)
            if length % self.ENTRY_SIZE:
                raise CorruptIndexError(f"{self.path}: size {length} is not a multiple of 12")
        prev_ts, prev_off = -(1 << 63), self.base_offset
        for i in range(self.entries):
            ts, off = self.entry(i)
            if ts <= prev_ts or off < prev_off or off > last_offset:
                raise CorruptIndexError(f"{self.path}: entry {i} ({ts}, {off}) is out of order")
            prev_ts, prev_off = ts, off
