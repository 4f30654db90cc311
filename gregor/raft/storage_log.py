"""The Raft log over our own storage: the partition directory `__cluster_metadata-0`.

    <log dir>/__cluster_metadata-0/
        00000000000000000000.log  .index  .timeindex     record batches (v2), one per Raft batch,
                                                         partitionLeaderEpoch = the Raft epoch
        leader-epoch-checkpoint                          epoch -> start offset (end_offset_for_epoch)
        00000000000000004711-0000000003.checkpoint       a snapshot: end offset 4711, epoch 3
        quorum-state                                     the election state (store.py)

A Raft batch becomes one record batch whose records have no key and the Raft record as value;
the start-of-epoch batch is a control batch whose record has Kafka's LEADER_CHANGE key
(control.py). Offsets are the core's (`assign_offsets=False`,
as a follower copies its leader), so a batch's bytes are the same on every replica.

Snapshots are named as Kafka names them (`<20-digit end offset>-<10-digit epoch>.checkpoint`),
written to `.checkpoint.part`, fsynced and renamed. Their content is the state machine's bytes,
as given: the metadata store hands over Kafka's layout (record batches between a SnapshotHeader
and a SnapshotFooter control batch, snapshot_file.py), so the file on disk is Kafka's. The log
starts where the latest snapshot ends.

`open(..., check_snapshot=f)`: f(bytes) says what is wrong with a snapshot file (None: nothing).
A bad one is logged and renamed `<name>.corrupt`, and the next older one is used, or none; if
the segments left on disk do not reach back to where the snapshot in use ends (they were
deleted below the bad one), `SnapshotUnavailableError` says so rather than open a log with a
hole in it.

Opening always re-validates the segments (`clean_shutdown=False`): the metadata log is small,
and a crash may have left a torn tail; a snapshot newer than the log's end (a crash while one
fetched from the leader was being installed) empties the log to start at it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from functools import partial

from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch, read_batch_records
from gregor.raft.control import LEADER_CHANGE_KEY
from gregor.raft.log import Batch, SnapshotId, new_batch
from gregor.storage.checkpoints import fsync_dir
from gregor.storage.config import LogConfig
from gregor.storage.log import Log

TOPIC = "__cluster_metadata"
DIR_NAME = f"{TOPIC}-0"
SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
CORRUPT_SUFFIX = ".corrupt"
_SNAPSHOT_FILE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
# The last batches appended, kept as they were given with the bytes written (`_tail`): the
# followers' next Fetch asks for them, and answering from memory spares a read of the segment,
# a decode and an encode per batch.
TAIL_BATCHES = 64
TAIL_BYTES = 1 << 20

logger = logging.getLogger(__name__)


class SnapshotUnavailableError(RuntimeError):
    """The latest snapshot cannot be read and nothing older (snapshot or log) replaces it."""


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


class StorageRaftLog:
    def __init__(self, log: Log, clock: Clock) -> None:
        self._log = log
        self._clock = clock
        self.directory = log.directory
        # Told once when a write to the log fails (a full disk, EIO): the log is offline from
        # then on. The process decides what follows (the server halts, as Kafka does).
        self.on_failure: Callable[[str, OSError], None] | None = None
        log.on_failure = lambda _log, exc, doing: self.on_failure and self.on_failure(doing, exc)
        self._snapshots = sorted(_list_snapshots(self.directory))
        # base offset -> (batch, its size in the segment), oldest first; forgotten at a
        # truncation or a snapshot installed, so it only ever holds what the segments hold.
        self._tail: dict[int, tuple[Batch, int]] = {}
        self._tail_bytes = 0

    @classmethod
    def open(
        cls,
        log_dir: str,
        config: LogConfig | None = None,
        clock: Clock = SYSTEM_CLOCK,
        check_snapshot: Callable[[bytes], str | None] | None = None,
    ) -> StorageRaftLog:
        """Open (or create) `<log_dir>/__cluster_metadata-0`. `clock` is the log's: it stamps
        batch timestamps, segment creation and roll times, and flush times, as a partition
        log's does; `check_snapshot` vets snapshot files (module docstring)."""
        directory = os.path.join(log_dir, DIR_NAME)
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(PARTIAL_SUFFIX):
                os.unlink(os.path.join(directory, name))
        snapshots = sorted(_list_snapshots(directory))
        rejected: list[SnapshotId] = []
        while snapshots and check_snapshot is not None:
            path = os.path.join(directory, snapshot_file_name(snapshots[-1]))
            with open(path, "rb") as f:
                problem = check_snapshot(f.read())
            if problem is None:
                break
            bad = snapshots.pop()
            rejected.append(bad)
            logger.warning(
                "%s: ignoring snapshot %s, which is damaged: %s", directory, bad, problem
            )
            os.replace(path, path + CORRUPT_SUFFIX)
        start = snapshots[-1].end_offset if snapshots else 0
        log = Log.open(
            directory,
            config or LogConfig(),
            log_start_offset=start,
            recovery_point=0,
            clean_shutdown=False,
            clock=clock,
        )
        first = log.segments[0].base_offset
        if rejected and first > start:
            log.close()
            older = f"snapshot {snapshots[-1]}" if snapshots else "offset 0"
            raise SnapshotUnavailableError(
                f"{directory}: snapshot {rejected[0]} is damaged (renamed *{CORRUPT_SUFFIX}) and "
                f"the log it replaced was deleted: the segments start at {first}, not at {older}. "
                "Restore the snapshot file, or this node's metadata from another node's"
            )
        if log.log_end_offset < start:
            log.truncate_fully_and_start_at(start)
        return cls(log, clock)

    # -- offsets --------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def flushed_offset(self) -> int:
        return max(self._log.recovery_point, self._log.log_start_offset)

    @property
    def last_epoch(self) -> int:
        entries = self._log.leader_epochs.entries
        if entries:
            return entries[-1][0]
        return self._snapshots[-1].epoch if self._snapshots else 0

    # -- writes ---------------------------------------------------------------------------------

    def append(self, batch: Batch) -> None:
        if batch.base_offset != self.end_offset:
            raise ValueError(
                f"batch at {batch.base_offset} does not continue the log at {self.end_offset}"
            )
        if batch.epoch < self.last_epoch:
            raise ValueError(
                f"batch epoch {batch.epoch} is below the log's last epoch {self.last_epoch}"
            )
        now = self._clock.now_ms()
        buf: memoryview | bytearray
        if batch.encoded is not None:  # a follower copies its leader's batch as it is
            buf = memoryview(batch.encoded)
        else:
            key = LEADER_CHANGE_KEY if batch.control else None
            buf = build_batch(
                [(key, record) for record in batch.records],
                base_offset=batch.base_offset,
                base_timestamp=now,
                partition_leader_epoch=batch.epoch,
                control=batch.control,
            )
        self._log.append(buf, leader_epoch=batch.epoch, now_ms=now, assign_offsets=False)
        self._log.leader_epochs.assign(batch.epoch, batch.base_offset)
        if batch.encoded is None:
            batch = new_batch(
                batch.base_offset, batch.epoch, batch.records, batch.control, bytes(buf)
            )
        self._remember(batch, len(buf))

    def _remember(self, batch: Batch, size: int) -> None:
        tail = self._tail
        tail[batch.base_offset] = (batch, size)
        self._tail_bytes += size
        while len(tail) > 1 and (len(tail) > TAIL_BATCHES or self._tail_bytes > TAIL_BYTES):
            self._tail_bytes -= tail.pop(next(iter(tail)))[1]

    def _forget_tail(self) -> None:
        self._tail.clear()
        self._tail_bytes = 0

    def truncate_to(self, offset: int) -> int:
        self._forget_tail()
        self._log.truncate_to(max(offset, self.start_offset))
        return self.end_offset

    def flush(self, up_to: int | None = None) -> None:
        self._log.flush(up_to)

    def begin_flush(self, up_to: int) -> tuple[Callable[[], None], Callable[[], None]]:
        """`flush(up_to)` in two halves, so the fsync runs on a worker thread: `sync()` fsyncs
        duplicates of the segments' descriptors (any thread, once); `done()`, back on the log's
        thread, moves the flushed offset, unless the log was truncated meanwhile."""
        fds, done = self.begin_flush_fds(up_to)
        return partial(fsync_and_close, fds), done

    def begin_flush_fds(self, up_to: int) -> tuple[list[int], Callable[[], None]]:
        """`begin_flush` for a caller that fsyncs by itself: duplicates of the descriptors to
        fsync (the caller closes them) and `done()`, as there."""
        fds = [os.dup(seg.fd) for seg in self._log.segments_to_flush(up_to)]
        truncations = self._log.truncations

        def done() -> None:
            self._log.mark_flushed(up_to, truncations)

        return fds, done

    # -- reads ----------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> list[Batch]:
        """Whole batches from the one starting at `offset`, within `max_bytes` (at least one),
        as the segments hold them; from `_tail` when it holds the first."""
        cached = self._read_tail(offset, max_bytes)
        if cached is not None:
            return cached
        found = self._log.read(offset, max_bytes)
        if found is None:
            return []
        data = found.read()
        out = []
        for pos, _header in rb.iter_headers(data):
            header, records = read_batch_records(data, pos)
            values = tuple(r.value if r.value is not None else b"" for r in records)
            out.append(
                Batch(header.base_offset, header.partition_leader_epoch, values, header.is_control)
            )
        return out

    def _read_tail(self, offset: int, max_bytes: int) -> list[Batch] | None:
        tail = self._tail
        if offset not in tail or offset < self.start_offset or self._log.offline:
            return None
        # A read of the segments ends at its segment's end: so does this one.
        segment_end = None
        for seg in reversed(self._log.segments):
            if seg.base_offset <= offset:
                break
            segment_end = seg.base_offset
        out: list[Batch] = []
        total = 0
        while offset in tail:
            batch, size = tail[offset]
            if out and (total + size > max_bytes or offset == segment_end):
                break
            out.append(batch)
            total += size
            offset = batch.next_offset
        return out

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        entries = self._log.leader_epochs.entries  # (epoch, start offset), both increasing
        found = None
        for i, (e, _start) in enumerate(entries):
            if e > epoch:
                break
            found = i
        if found is not None:
            end = entries[found + 1][1] if found + 1 < len(entries) else self.end_offset
            return entries[found][0], end
        start = self.start_offset
        snap = self.latest_snapshot()
        if snap is not None and snap.epoch <= epoch and snap.end_offset == start:
            return snap.epoch, start
        return epoch, start

    # -- snapshots ------------------------------------------------------------------------------

    def latest_snapshot(self) -> SnapshotId | None:
        return self._snapshots[-1] if self._snapshots else None

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None:
        if snapshot_id not in self._snapshots:
            return None
        with open(os.path.join(self.directory, snapshot_file_name(snapshot_id)), "rb") as f:
            return f.read()

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        if not self.start_offset <= snapshot_id.end_offset <= self.end_offset:
            raise ValueError(
                f"snapshot {snapshot_id} is outside the log [{self.start_offset}, {self.end_offset}]"
            )
        self._write_snapshot(snapshot_id, data)

    def install_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self._write_snapshot(snapshot_id, data)
        self._forget_tail()
        self._log.truncate_fully_and_start_at(snapshot_id.end_offset)
        self._delete_older_snapshots()

    def delete_before_snapshot(self) -> None:
        snap = self.latest_snapshot()
        if snap is None or snap.end_offset <= self.start_offset:
            return
        log = self._log
        log.update_high_watermark(max(log.high_watermark, snap.end_offset))
        log.increment_log_start_offset(snap.end_offset)
        self._delete_older_snapshots()

    def _write_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self.write_snapshot_file(snapshot_id, data)
        self._register_snapshot(snapshot_id)

    def write_snapshot_file(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Write the snapshot's file durably (`.part`, fsync, rename, fsync the directory) and
        nothing else: safe on another thread. `add_snapshot` then makes the log use it."""
        path = os.path.join(self.directory, snapshot_file_name(snapshot_id))
        partial = path[: -len(SNAPSHOT_SUFFIX)] + PARTIAL_SUFFIX
        with open(partial, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
        fsync_dir(self.directory)

    def add_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Count a snapshot file `write_snapshot_file` wrote among the log's snapshots."""
        if not self.start_offset <= snapshot_id.end_offset <= self.end_offset:
            raise ValueError(
                f"snapshot {snapshot_id} is outside the log [{self.start_offset}, {self.end_offset}]"
            )
        self._register_snapshot(snapshot_id)

    def _register_snapshot(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            self._snapshots.append(snapshot_id)
            self._snapshots.sort()

    def _delete_older_snapshots(self) -> None:
        latest = self.latest_snapshot()
        for sid in [s for s in self._snapshots if s != latest]:
            os.unlink(os.path.join(self.directory, snapshot_file_name(sid)))
            self._snapshots.remove(sid)

    def close(self) -> None:
        self._log.close()

    @property
    def closed(self) -> bool:
        return self._log.closed

    def __repr__(self) -> str:
        return f"StorageRaftLog({self.directory}, start={self.start_offset}, end={self.end_offset})"


def _list_snapshots(directory: str) -> list[SnapshotId]:
    out = []
    for name in os.listdir(directory):
        match = _SNAPSHOT_FILE.match(name)
        if match:
            out.append(SnapshotId(int(match.group(1)), int(match.group(2))))
    return out


def fsync_and_close(fds: list[int]) -> None:
    """fsync each of `fds`, then close them all (whatever the fsyncs did)."""
    try:
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
