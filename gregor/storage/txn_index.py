"""The aborted-transaction index of a segment: `<20-digit base offset>.txnindex`, Kafka's
TransactionIndex byte for byte (Kafka's DumpLogSegments reads ours, we read Kafka's).

Byte layout (big-endian), entries of 34 bytes back to back, nothing else::

    AbortedTxn =>
      offset  size  field
      0       2     version: int16            = 0
      2       8     producerId: int64
      10      8     firstOffset: int64        the transaction's first offset in this partition
      18      8     lastOffset: int64         the offset of its ABORT marker
      26      8     lastStableOffset: int64   the LSO right after the abort: the first offset of
                                              the oldest transaction of another producer still
                                              open, else lastOffset + 1

Only aborted transactions are indexed: a read_committed fetch answers, with its records, the
(producerId, firstOffset) of every aborted transaction overlapping them, and the client drops
that producer's records from firstOffset up to the ABORT marker. An entry lives in the index of
the segment its marker went to (the transaction may have begun segments earlier), so entries are
in marker order: lastOffset strictly increases along a file.

Unlike .index and .timeindex the file is neither preallocated nor mapped: it is created by the
first aborted transaction of its segment (most segments never get one, and have no file),
appended with `pwrite`, and read when asked. `collect` binary-searches for the first entry that
can matter (a consumer near the tail skips the rest of the file) and reads on from there until an
entry's lastStableOffset reaches the fetch's upper bound: no later entry can then start below
it, so the search is complete, and later segments need not be read (Kafka's
TxnIndexSearchResult). An index left with no entry (reset, truncation) is deleted, keeping
"no file" and "no aborted transaction" the same thing; a torn partial entry at the end is cut
before the next append and never read.

Knows files and numbers; the log decides what goes in (log.py, producer_state.py).
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from gregor.storage.checkpoints import fsync_dir
from gregor.storage.index import CorruptIndexError

TXN_INDEX_SUFFIX = ".txnindex"
VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_LAST_OFFSET = struct.Struct(">q")
_LAST_OFFSET_AT = 18
_READ_CHUNK = ENTRY_SIZE * 1024


class AbortedTxn(NamedTuple):
    """What a read_committed fetch answers for an aborted transaction (FetchResponse's
    AbortedTransaction)."""

    producer_id: int
    first_offset: int


class TxnIndexEntry(NamedTuple):
    """One entry of a .txnindex file (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return _ENTRY.pack(VERSION, *self)


def parse_entries(data: bytes | memoryview, path: str = "") -> list[TxnIndexEntry]:
    """The whole entries of a .txnindex file's bytes (a torn tail is ignored)."""
    out = []
    unpack = _ENTRY.unpack_from
    for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        version, pid, first, last, lso = unpack(data, pos)
        if version != VERSION:
            raise CorruptIndexError(f"{path}: entry at position {pos} has version {version}")
        out.append(TxnIndexEntry(pid, first, last, lso))
    return out


class TransactionIndex:
    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fd: int | None = None
        self._size: int | None = None  # bytes on disk; None until first looked at
        self._last_offset: int | None = None  # of the last entry, once known
        self._unsynced = False
        self._dir_unsynced = False  # the file was created or removed since the last flush

    # -- state --------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes of the file (0 when there is none); one stat, then known."""
        if self._size is None:
            try:
                self._size = os.stat(self.path).st_size
            except FileNotFoundError:
                self._size = 0
        return self._size

    @property
    def entries_count(self) -> int:
        return self.size // ENTRY_SIZE

    def is_empty(self) -> bool:
        return self.size < ENTRY_SIZE

    def _open(self, create: bool = False) -> int | None:
        if self._fd is None:
            flags = os.O_RDWR | (os.O_CREAT if create else 0)
            try:
                self._fd = os.open(self.path, flags, 0o644)
            except FileNotFoundError:
                return None
            self._size = os.fstat(self._fd).st_size
        return self._fd

    # -- writing ------------------------------------------------------------------------------

    def append(self, entry: TxnIndexEntry) -> None:
        """Add the entry of an aborted transaction whose marker is after every indexed one."""
        existed = self._fd is not None or os.path.exists(self.path)
        fd = self._open(create=True)
        assert fd is not None
        size = self.size
        whole = size - size % ENTRY_SIZE
        if whole != size:  # a torn entry from a crash: cut it, or every later entry shifts
            os.ftruncate(fd, whole)
            self._size = size = whole
        last = self.last_offset()
        if last is not None and entry.last_offset <= last:
            raise ValueError(
                f"{self.path}: an aborted transaction ending at {entry.last_offset} after one "
                f"ending at {last}"
            )
        data = entry.pack()
        written = os.pwrite(fd, data, size)
        if written != ENTRY_SIZE:
            raise OSError(f"{self.path}: short write of {written} bytes")
        self._size = size + ENTRY_SIZE
        self._last_offset = entry.last_offset
        self._unsynced = True
        if not existed:
            self._dir_unsynced = True

    def last_offset(self) -> int | None:
        """lastOffset of the last entry (None if there is none)."""
        if self._last_offset is None and not self.is_empty():
            fd = self._open()
            if fd is None:
                return None
            pos = (self.size // ENTRY_SIZE - 1) * ENTRY_SIZE
            self._last_offset = _LAST_OFFSET.unpack(os.pread(fd, 8, pos + _LAST_OFFSET_AT))[0]
        return self._last_offset

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose marker is at or above `offset` (Kafka's truncateTo: the entries
        from the first one with lastOffset >= offset on)."""
        if self.is_empty():
            return
        fd = self._open()
        if fd is None:
            self._forget()
            return
        first = self._first_ending_at_or_after(fd, offset)
        if first >= self.entries_count:
            return
        if first == 0:
            self._remove()
            return
        os.ftruncate(fd, first * ENTRY_SIZE)
        self._size = first * ENTRY_SIZE
        self._last_offset = None
        self._unsynced = True

    def reset(self) -> None:
        """Remove every entry (before a recovery rebuilds them)."""
        if self._fd is not None or os.path.exists(self.path):
            self._remove()
        else:
            self._forget()

    def _remove(self) -> None:
        """Delete the file of an index that stays in use: the next flush fsyncs the directory,
        so that a crash cannot bring the old entries back."""
        self.delete()
        self._dir_unsynced = True

    def flush(self) -> None:
        # Flags first: an append racing a flush on another thread sets them again.
        if self._unsynced:
            self._unsynced = False
            fd = self._fd
            if fd is not None:
                os.fsync(fd)
            else:  # written, then closed (close_handles) before this flush
                try:
                    fd = os.open(self.path, os.O_RDONLY)
                except FileNotFoundError:
                    fd = None
                if fd is not None:
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
        if self._dir_unsynced:
            self._dir_unsynced = False
            fsync_dir(os.path.dirname(self.path) or ".")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._forget()

    def _forget(self) -> None:
        self._size = 0
        self._last_offset = None
        self._unsynced = False
        self._dir_unsynced = False

    def rename(self, new_path: str) -> None:
        """Give the file (if there is one) a new name; an open fd stays valid."""
        if self._fd is not None or os.path.exists(self.path):
            os.rename(self.path, new_path)
        self.path = new_path

    # -- reading ------------------------------------------------------------------------------

    def all_entries(self) -> list[TxnIndexEntry]:
        if self.is_empty():
            return []
        fd = self._open()
        if fd is None:
            self._forget()
            return []
        return parse_entries(_pread_all(fd, self.entries_count * ENTRY_SIZE, 0), self.path)

    def collect(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[TxnIndexEntry], bool]:
        """The entries of transactions overlapping [fetch_offset, upper_bound_offset) (lastOffset
        >= fetch_offset and firstOffset < upper_bound_offset), and whether the search is complete
        (an entry's lastStableOffset reached the upper bound: later segments hold none that
        overlap)."""
        if self.is_empty():
            return [], False
        fd = self._open()
        if fd is None:
            self._forget()
            return [], False
        count = self.entries_count
        # Entries before the first one ending at or after fetch_offset cannot overlap, nor end
        # the search (their lastStableOffset is at most lastOffset + 1 <= fetch_offset).
        i = self._first_ending_at_or_after(fd, fetch_offset)
        found: list[TxnIndexEntry] = []
        unpack = _ENTRY.unpack_from
        while i < count:
            n = min(count - i, _READ_CHUNK // ENTRY_SIZE)
            data = _pread_all(fd, n * ENTRY_SIZE, i * ENTRY_SIZE)
            for pos in range(0, n * ENTRY_SIZE, ENTRY_SIZE):
                version, pid, first, last, lso = unpack(data, pos)
                if version != VERSION:
                    raise CorruptIndexError(
                        f"{self.path}: entry {i + pos // ENTRY_SIZE} has version {version}"
                    )
                if last >= fetch_offset and first < upper_bound_offset:
                    found.append(TxnIndexEntry(pid, first, last, lso))
                if lso >= upper_bound_offset:
                    return found, True
            i += n
        return found, False

    def _first_ending_at_or_after(self, fd: int, offset: int) -> int:
        """Index of the first entry with lastOffset >= offset (entries_count if none)."""
        lo, hi = 0, self.entries_count
        last = self.last_offset()
        if last is None or last < offset:
            return hi
        while lo < hi:
            mid = (lo + hi) // 2
            (value,) = _LAST_OFFSET.unpack(os.pread(fd, 8, mid * ENTRY_SIZE + _LAST_OFFSET_AT))
            if value >= offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def sanity_check(self) -> None:
        """CorruptIndexError unless every entry is version 0, ends at or above the segment's
        base offset, starts at or before its end, and the markers increase."""
        previous = None
        for e in self.all_entries():
            if e.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"{self.path}: aborted transaction ending at {e.last_offset}, below the base "
                    f"offset {self.base_offset}"
                )
            if e.first_offset > e.last_offset or (
                previous is not None and e.last_offset <= previous
            ):
                raise CorruptIndexError(f"{self.path}: entries out of order at {e}")
            previous = e.last_offset

    def __getstate__(self) -> dict:
        # Pickled with a cleaned segment (cleaner_worker.py): no fd, and sizes looked up again.
        return {**self.__dict__, "_fd": None, "_size": None, "_last_offset": None}

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path}, entries={self.entries_count})"


def _pread_all(fd: int, n: int, pos: int) -> bytes:
    data = os.pread(fd, n, pos)
    while len(data) < n:
        more = os.pread(fd, n - len(data), pos + len(data))
        if not more:
            break
        data += more
    return data
