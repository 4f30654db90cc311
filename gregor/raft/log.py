"""The replicated log as the Raft core sees it: batches of records, each stamped with the leader
epoch that wrote it, and snapshots at its start (KIP-630).

    offsets:  start_offset <= flushed_offset <= end_offset
              [snapshot (end_offset=start, epoch)] [batch][batch]...[batch]   end_offset ->

A batch is the unit of append, replication and truncation: the leader writes one per `append`,
followers copy them unchanged, and `truncate_to` removes whole batches (Kafka truncates at batch
boundaries too). Every offset the core truncates to is a batch boundary: divergence points are
epoch boundaries and an epoch begins with a batch.

`end_offset_for_epoch(e)` answers as OffsetForLeaderEpoch: the largest epoch <= e this log knows
(its batches and its latest snapshot) and the offset where that epoch ends (the start of the next
epoch, or the end offset). For an epoch older than anything here it returns (e, start_offset).

`RaftLog` is the interface; `MemoryLog` keeps everything in lists (tests and the simulator, which
adds crash behaviour on top); `storage_log.StorageRaftLog` is the same over our segment files.
Both are single-threaded; `flush` is synchronous.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from gregor.frozen import positional_constructor

BATCH_OVERHEAD = 70  # bytes a batch header and one record's framing take on disk (a rough size)


class SnapshotId(NamedTuple):
    """A snapshot holds every record below `end_offset`; `epoch` is the epoch of the last one."""

    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    epoch: int
    records: tuple[bytes, ...]
    control: bool = False  # a control batch (the leader's start-of-epoch marker), not user data
    # The batch as a record batch v2, when a log has it at hand (StorageRaftLog's last appends):
    # a leader's Fetch answers send these bytes rather than build them again per follower.
    encoded: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)

    @property
    def size(self) -> int:
        return BATCH_OVERHEAD + sum(len(r) for r in self.records)


# Batch(base_offset, epoch, records, control, encoded): every field, in order (frozen.py)
new_batch = positional_constructor(Batch)


class RaftLog(Protocol):
    @property
    def start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    @property
    def last_epoch(self) -> int:
        """Epoch of the last batch; of the latest snapshot if there is none after it; else 0."""
        ...

    def append(self, batch: Batch) -> None:
        """Append `batch`, whose base offset must be the end offset. Not durable until flushed."""
        ...

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= `offset`; return the new end offset."""
        ...

    def read(self, offset: int, max_bytes: int) -> list[Batch]:
        """Whole batches from the one holding `offset` (at least one if any), about `max_bytes`."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...

    def flush(self, up_to: int | None = None) -> None:
        """Make everything below `up_to` (default: the end offset) durable."""
        ...

    def latest_snapshot(self) -> SnapshotId | None: ...

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None: ...

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Store (durably) a snapshot of the records below its end offset, which is in the log."""
        ...

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """A snapshot fetched from the leader: store it and empty the log, which now starts and
        ends at its end offset (Kafka's truncateToLatestSnapshot)."""
        ...

    def delete_before_snapshot(self) -> None:
        """Drop the batches wholly below the latest snapshot; the log then starts at its end."""
        ...


class MemoryLog:
    """`RaftLog` in memory. `flushed_offset` is bookkeeping only: the simulator's disk decides
    what a crash keeps."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self._bases: list[int] = []
        self._start = 0
        self._flushed = 0
        self.snapshots: dict[SnapshotId, bytes] = {}

    # -- offsets --------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self.batches[-1].next_offset if self.batches else self._start

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def last_epoch(self) -> int:
        if self.batches:
            return self.batches[-1].epoch
        snap = self.latest_snapshot()
        return snap.epoch if snap is not None else 0

    # -- writes ---------------------------------------------------------------------------------

    def append(self, batch: Batch) -> None:
        if batch.base_offset != self.end_offset:
            raise ValueError(
                f"batch at {batch.base_offset} does not continue the log at {self.end_offset}"
            )
        if not batch.records:
            raise ValueError("a batch holds at least one record")
        if batch.epoch < self.last_epoch:
            raise ValueError(
                f"batch epoch {batch.epoch} is below the log's last epoch {self.last_epoch}"
            )
        self.batches.append(batch)
        self._bases.append(batch.base_offset)

    def truncate_to(self, offset: int) -> int:
        i = bisect.bisect_left(self._bases, offset)
        # the batch before i holds `offset` if it straddles it: it goes too
        if i > 0 and self.batches[i - 1].next_offset > offset:
            i -= 1
        del self.batches[i:]
        del self._bases[i:]
        self._flushed = min(self._flushed, self.end_offset)
        return self.end_offset

    def flush(self, up_to: int | None = None) -> None:
        end = self.end_offset
        target = end if up_to is None else min(up_to, end)
        self._flushed = max(self._flushed, target)

    # -- reads ----------------------------------------------------------------------------------

    def _index_of(self, offset: int) -> int:
        """Index of the batch holding `offset` (len(batches) if none)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            return 0
        return i if self.batches[i].next_offset > offset else i + 1

    def read(self, offset: int, max_bytes: int) -> list[Batch]:
        if offset < self._start or offset > self.end_offset:
            raise ValueError(f"offset {offset} is outside [{self._start}, {self.end_offset}]")
        out: list[Batch] = []
        total = 0
        for batch in self.batches[self._index_of(offset) :]:
            if out and total + batch.size > max_bytes:
                break
            out.append(batch)
            total += batch.size
        return out

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        # the last batch with an epoch <= `epoch` (epochs never decrease along the log)
        lo, hi = 0, len(self.batches)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.batches[mid].epoch <= epoch:
                lo = mid + 1
            else:
                hi = mid
        if lo > 0:
            found = self.batches[lo - 1].epoch
            end = self.batches[lo].base_offset if lo < len(self.batches) else self.end_offset
            return found, end
        snap = self.latest_snapshot()
        if snap is not None and snap.epoch <= epoch and snap.end_offset == self._start:
            return snap.epoch, self._start
        return epoch, self._start

    # -- snapshots ------------------------------------------------------------------------------

    def latest_snapshot(self) -> SnapshotId | None:
        return max(self.snapshots) if self.snapshots else None

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None:
        return self.snapshots.get(snapshot_id)

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        if not self._start <= snapshot_id.end_offset <= self.end_offset:
            raise ValueError(
                f"snapshot {snapshot_id} is outside the log [{self._start}, {self.end_offset}]"
            )
        self.snapshots[snapshot_id] = bytes(data)

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self.snapshots[snapshot_id] = bytes(data)
        self.batches.clear()
        self._bases.clear()
        self._start = snapshot_id.end_offset
        self._flushed = self._start
        self._drop_older_snapshots()

    def delete_before_snapshot(self) -> None:
        snap = self.latest_snapshot()
        if snap is None or snap.end_offset <= self._start:
            return
        i = self._index_of(snap.end_offset)
        if i < len(self.batches) and self.batches[i].base_offset != snap.end_offset:
            raise ValueError(f"snapshot {snap} does not end on a batch boundary")
        del self.batches[:i]
        del self._bases[:i]
        self._start = snap.end_offset
        self._flushed = max(self._flushed, self._start)
        self._drop_older_snapshots()

    def _drop_older_snapshots(self) -> None:
        latest = self.latest_snapshot()
        for sid in [s for s in self.snapshots if s != latest]:
            del self.snapshots[sid]

    def __repr__(self) -> str:
        return f"MemoryLog(start={self._start}, end={self.end_offset}, flushed={self._flushed}, batches={len(self.batches)})"
