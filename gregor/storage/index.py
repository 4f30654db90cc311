"""Sparse, memory-mapped indexes of a segment: offset -> position and timestamp -> offset.

File layouts (big-endian, Kafka's exactly)::

    <base>.index      entries of 8 bytes:  relativeOffset: int32, position: int32
    <base>.timeindex  entries of 12 bytes: timestamp: int64, relativeOffset: int32

`relativeOffset` is the offset minus the segment's base offset. An offset-index entry names the
*last* offset of the batch that starts at `position`; a time-index entry says "the batches up to
relativeOffset hold timestamps up to `timestamp`", and timestamps only grow along the file.

While its segment is active an index lives in memory: its entries sit in a `bytearray` that
grows by doubling, and reach the file only when the segment is flushed, rolls or closes (then
the new entries are written with one `pwrite`). The file is never mapped read-write: the first
write into a fresh mapping of a large sparse file costs milliseconds (the page fault sets the
whole mapping up), and the loop thread must not pay that once per segment. When the segment
rolls, or the log closes, the file holds exactly its entries, so a reader that knows nothing of
us (Kafka's DumpLogSegments) sees only real entries. An inactive index is mapped read-only, and
only when first used: 10,000 partitions open without touching their indexes.

After a crash the file of an active index may lack its last entries (or hold reserved zeros):
such a segment lies past the recovery point, and recovery rebuilds its indexes before anyone
reads them. A flush writes and syncs the entries with the log, so a segment below the recovery
point has its whole index on disk.

On a full disk a write of entries must not fail half way through a roll. So before entries are
added, `reserve` allocates blocks for them with `posix_fallocate`, `_RESERVE_BYTES` at a time
(with 4 KiB between entries, one call per ~32 MiB of log): a full disk is an OSError at a point
where nothing has changed yet, and the later `pwrite` of those entries lands in blocks it owns.

Lookups are binary searches. Most lookups are for recent offsets (consumers near the tail,
followers), so a search first tries the last `_WARM_BYTES` of the file, the pages that are
certainly in memory; only an older target touches the cold part. With 4 KiB between entries an
8 KiB warm section covers the last 1024 entries, i.e. the last ~4 MiB of the segment. (The same
reasoning as Kafka's AbstractIndex.)

Knows files and numbers; knows nothing of batches, leaders or the network.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
from bisect import bisect_right
from collections.abc import Callable
from socket import ntohl
from typing import NamedTuple

_WARM_BYTES = 8192
_RESERVE_BYTES = 64 * 1024
_FIRST_ENTRIES = 32  # an active index's first buffer: grown by doubling

# One key of an entry, unpacked in place by the searches (no call or tuple per probe).
_KEY32 = struct.Struct(">i").unpack_from
_PACK_OFFSET = struct.Struct(">ii").pack_into
_KEY64 = struct.Struct(">q").unpack_from


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
        # The entries: a read-only map of the file, or (active) a bytearray of them in memory.
        self._mm: mmap.mmap | bytearray | None = None
        self._entries: int | None = None  # known without mapping when the file is new
        self._max_entries = max(1, max_index_size // self.ENTRY_SIZE)
        self._allocated = 0  # bytes from the start known to have disk blocks (see `reserve`)
        self._written = 0  # active: entries the file holds (those after it are in memory only)
        self._unsynced = False  # active: entries written to the file and not yet synced

    # -- mapping ------------------------------------------------------------------------------

    def _open(self) -> mmap.mmap | bytearray | None:
        """The entries: an active index's read into memory, an inactive one's file mapped."""
        if self._writable:
            return self._load()
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._entries = self._entries or 0
            return None
        try:
            length = os.fstat(fd).st_size
            if self._entries is None:
                # A file from a previous run: every whole entry in it counts. A trimmed index is
                # exact; an untrimmed one (a crash) is rebuilt by recovery before anyone reads it.
                self._entries = length // self.ENTRY_SIZE
            if length == 0:
                return None
            return mmap.mmap(fd, length, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)

    def _load(self) -> bytearray:
        """An active index's entries, read once from its file (created if new)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            length = os.fstat(fd).st_size
            if self._entries is None:
                self._entries = length // self.ENTRY_SIZE  # see `_open`
            size = min(self._entries * self.ENTRY_SIZE, length)
            data = os.pread(fd, size, 0) if size else b""
        finally:
            os.close(fd)
        self._written = len(data) // self.ENTRY_SIZE
        buf = bytearray(data)
        capacity = max(_FIRST_ENTRIES, self._entries) * self.ENTRY_SIZE
        if capacity > len(buf):
            buf.extend(bytes(capacity - len(buf)))
        return buf

    def _map(self) -> mmap.mmap | bytearray | None:
        if self._mm is None:
            self._mm = self._open()
        return self._mm

    def _release_views(self) -> None:
        """Drop any view of the buffer (a bytearray cannot grow while one is alive)."""

    def _grow(self, buf: bytearray) -> None:
        """Double an active index's buffer (up to its maximum number of entries)."""
        self._release_views()
        top = self._max_entries * self.ENTRY_SIZE
        buf.extend(bytes(max(self.ENTRY_SIZE, min(len(buf), top - len(buf)))))

    def reserve(self, more: int) -> None:
        """Make sure the next `more` entries have disk blocks (an OSError such as ENOSPC
        otherwise, with nothing changed); see the module docstring."""
        n = self._entries if self._entries is not None else self.entries
        need = n + more if n + more < self._max_entries else self._max_entries
        need *= self.ENTRY_SIZE
        if need <= self._allocated:
            return
        start = max(self._allocated, (n * self.ENTRY_SIZE) // mmap.PAGESIZE * mmap.PAGESIZE)
        end = min(self._max_entries * self.ENTRY_SIZE, -(-need // _RESERVE_BYTES) * _RESERVE_BYTES)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, start, end - start)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
        finally:
            os.close(fd)
        self._allocated = end

    @property
    def entries(self) -> int:
        if self._entries is None:
            if self._writable:  # counted from the file's size: no need to read it (see `_open`)
                try:
                    self._entries = os.stat(self.path).st_size // self.ENTRY_SIZE
                except FileNotFoundError:
                    self._entries = 0
            else:
                self._map()
        assert self._entries is not None
        return self._entries

    def is_full(self) -> bool:
        n = self._entries  # checked before every append: spare the property when known
        return (n if n is not None else self.entries) >= self._max_entries

    def _write_out(self, sync: bool) -> None:
        """An active index's entries not yet in its file, written there (and synced)."""
        buf = self._mm
        n = self._entries or 0
        if not isinstance(buf, bytearray) or (n <= self._written and not self._unsynced):
            return
        size = self.ENTRY_SIZE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if n > self._written:
                os.pwrite(fd, buf[self._written * size : n * size], self._written * size)
                self._written = n
                self._unsynced = True
            if sync:
                os.fdatasync(fd)
                self._unsynced = False
        finally:
            os.close(fd)

    def close(self) -> None:
        """Release the map or the buffer (an active index's new entries go to its file first);
        it is read again on next use."""
        self._write_out(sync=False)
        self._drop()

    def _drop(self) -> None:
        self._release_views()
        mm = self._mm
        self._mm = None
        if mm is not None and not isinstance(mm, bytearray):
            mm.close()

    def flush(self) -> None:
        if self._writable:
            self._write_out(sync=True)

    def trim_to_valid_size(self) -> None:
        """Cut the file to its live entries and map it read-only from now on."""
        entries = self.entries
        self.close()
        with open(self.path, "r+b" if os.path.exists(self.path) else "w+b") as f:
            f.truncate(entries * self.ENTRY_SIZE)  # a segment always has both index files
        self._allocated = 0
        self._written = 0
        self._writable = False

    def make_writable(self, max_index_size: int) -> None:
        """Reopen as an active index: read into memory on next use. An index not yet read
        counts its entries from the file's size (as `_open` would), without mapping it."""
        if self._mm is None and self._entries is None:
            try:
                self._entries = os.stat(self.path).st_size // self.ENTRY_SIZE
            except FileNotFoundError:
                self._entries = 0
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
        """Keep the first `n` entries. An inactive index's file is cut to them; an active
        index's file is left as it is (cutting a file with reserved blocks costs ms on ext4):
        its entries past `n` are dead, and the next write-out and the trim at roll or close
        make the file exact."""
        if n <= 0 and self._mm is None:
            self._entries = 0  # nothing to read first (a rebuild after a crash comes here)
        else:
            self._map()
            self._entries = min(n, self.entries)
        if self._writable:
            self._written = min(self._written, self._entries)
            return
        self._drop()
        if os.path.exists(self.path):
            with open(self.path, "r+b") as f:
                f.truncate(self._entries * self.ENTRY_SIZE)

    def delete(self) -> None:
        self._drop()
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

    def _entry(self, mm: mmap.mmap | bytearray, n: int) -> tuple[int, ...]:
        return self._ENTRY.unpack_from(mm, n * self.ENTRY_SIZE)

    def _append_raw(self, *values: int) -> None:
        mm = self._map()
        n = self.entries
        if n >= self._max_entries or not isinstance(mm, bytearray) or not self._writable:
            raise CorruptIndexError(f"index {self.path} is full or read-only ({n} entries)")
        if (n + 1) * self.ENTRY_SIZE > len(mm):
            self._grow(mm)
        self._ENTRY.pack_into(mm, n * self.ENTRY_SIZE, *values)
        self._entries = n + 1

    def _search(self, key_of: Callable[[mmap.mmap | bytearray, int], int], target: int) -> int:
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

    def _search_key(
        self, unpack_key: Callable[..., tuple[int, ...]], delta: int, target: int
    ) -> int:
        """`_search` for the key at byte `delta` of each entry, read with `unpack_key` (a Struct's
        unpack_from of that one field): the same slot, without a Python call per probe (the
        lookups of every fetch come here)."""
        mm = self._mm
        if mm is None:
            mm = self._map()
        n = self._entries
        if n is None:
            n = self.entries
        if mm is None or n == 0:
            return -1
        size = self.ENTRY_SIZE
        warm = n - 1 - _WARM_BYTES // size
        if warm < 0:
            warm = 0
        if unpack_key(mm, warm * size + delta)[0] <= target:
            lo, hi = warm, n - 1
        else:
            if unpack_key(mm, delta)[0] > target:
                return -1
            lo, hi = 0, warm
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack_key(mm, mid * size + delta)[0] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo


class OffsetIndex(_Index):
    ENTRY_SIZE = 8
    _ENTRY = struct.Struct(">ii")
    # (the map, as 32-bit words, its offsets, its positions): views the searches bisect in C.
    _views: tuple[memoryview, memoryview, memoryview, memoryview] | None = None

    def _release_views(self) -> None:
        views = self._views
        if views is not None:
            self._views = None
            for view in reversed(views):
                view.release()  # the map cannot close, nor the buffer grow, while one is alive

    def _search32(self, field: int, target: int) -> int:
        """`_search` by offset (`field` 0) or position (1), bisecting in C.

        The keys are big-endian words of the map, read as native words through `ntohl`: the
        same slot as `_search` for any index whose keys rise along the file (what every writer
        produces and `sanity_check` enforces), including its warm-section-first order."""
        views = self._views
        if views is None:
            mm = self._map()
            if mm is None:
                return -1
            if len(mm) % 8:  # a damaged file (a clean open does not check): the plain search
                return self._search_key(_KEY32, 4 * field, target)
            whole = memoryview(mm)
            words = whole.cast("I")
            views = self._views = (whole, words, words[0::2], words[1::2])
        n = self._entries or 0
        if n == 0:
            return -1
        keys = views[2 + field]
        warm = n - 1 - _WARM_BYTES // 8
        if warm < 0:
            warm = 0
        if ntohl(keys[warm]) <= target:
            return bisect_right(keys, target, warm, n, key=ntohl) - 1
        if ntohl(keys[0]) > target:
            return -1
        return bisect_right(keys, target, 0, warm, key=ntohl) - 1

    def append(self, offset: int, position: int) -> None:
        mm = self._mm
        n = self._entries
        if (
            mm is None
            or n is None
            or n >= self._max_entries
            or (n + 1) * 8 > len(mm)
            or not self._writable
        ):
            self._append_raw(offset - self.base_offset, position)  # loads, grows, or raises
            return
        _PACK_OFFSET(mm, n * 8, offset - self.base_offset, position)
        self._entries = n + 1

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
        slot = self._search32(0, offset - self.base_offset)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def lookup_position(self, position: int) -> OffsetPosition:
        """The entry with the largest position <= `position`, or (base, 0)."""
        slot = self._search32(1, position)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry(slot)

    def _span(self, slot: int) -> tuple[int, int]:
        """(position of entry `slot`, or 0 when it is -1; position of the entry after it, or -1
        when there is none). Assumes the index is mapped (a search just ran)."""
        mm = self._mm
        n = self._entries or 0
        pos = _KEY32(mm, slot * 8 + 4)[0] if slot >= 0 else 0  # type: ignore[arg-type]
        nxt = _KEY32(mm, slot * 8 + 12)[0] if slot + 1 < n else -1  # type: ignore[arg-type]
        return pos, nxt

    def lookup_span(self, offset: int) -> tuple[int, int]:
        """(`lookup(offset).position`, the position of the next entry or -1): a scan for
        `offset` starts at the first and finds its batch at or before the second."""
        return self._span(self._search32(0, offset - self.base_offset))

    def lookup_position_span(self, position: int) -> tuple[int, int]:
        """(`lookup_position(position).position`, the position of the next entry or -1)."""
        return self._span(self._search32(1, position))

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= `offset`."""
        slot = self._search32(0, offset - self.base_offset - 1)
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
        n = self._entries
        return (n if n is not None else self.entries) >= self._max_entries - 1

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
            mm = self._mm if self._mm is not None else self._map()
            last_ts, rel = self._ENTRY.unpack_from(mm, (n - 1) * 12)  # type: ignore[arg-type]
            if timestamp <= last_ts:
                return  # the common case: no new largest timestamp
            last_off = self.base_offset + rel
            if offset < last_off:
                raise CorruptIndexError(
                    f"{self.path}: offset {offset} is below the last entry's {last_off}"
                )
        if not skip_full_check and self.is_full():
            raise CorruptIndexError(f"{self.path} is full")
        self._append_raw(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= `timestamp`, or (-1, base)."""
        slot = self._search_key(_KEY64, 0, timestamp)
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
