"""The leader-epoch cache of a partition: which leader epoch began at which offset.

Entries `(epoch, start_offset)`, both strictly increasing, persisted to the partition's
`leader-epoch-checkpoint` whenever they change: written at once, and fsynced at once unless the
owner set `sync_later` (a broker hands the fsyncs to a worker thread, so that becoming leader of
thousands of partitions at start-up or after a failover does not wait for thousands of fsyncs
on the event loop; a killed process loses nothing, the file is in the page cache). A truncation
is written without waiting for its fsync even then, as Kafka does: a stale entry a machine crash
brings back is cut again when the log is loaded, which truncates the cache to the log. It answers OffsetForLeaderEpoch (the end offset of
an epoch: the start offset of the next larger epoch, or the log end offset) and is trimmed when
the log is truncated at either end.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from gregor.storage import checkpoints

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1

log = logging.getLogger(__name__)


class LeaderEpochCache:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        try:
            self.entries: list[tuple[int, int]] = checkpoints.read_epochs(self.path)
        except (checkpoints.CheckpointError, ValueError) as exc:
            log.warning("ignoring damaged %s: %s", self.path, exc)
            self.entries = []
        self.sync_later: Callable[[str], None] | None = None
        self._size: int | None = None  # of the file, when this cache wrote it last

    def _persist(self, truncated: bool = False) -> None:
        later = self.sync_later
        if later is None:
            checkpoints.write_epochs(self.path, self.entries, sync=not truncated)
            self._size = None
            return
        self._size = checkpoints.overwrite_epochs(self.path, self.entries, self._size)
        later(self.path)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` began at `start_offset` (ignored unless it is a new, larger epoch)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        # An epoch may not start before a later-recorded one: drop entries it supersedes.
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self._persist()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers: the largest epoch <= `epoch`
        and the offset where the next epoch begins; our latest epoch ends at the log end; an
        epoch newer than ours is unknown, (-1, -1)."""
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, -1
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        for i, (e, start) in enumerate(self.entries):
            if e > epoch:
                if i == 0:
                    # Older than anything we know: it ended where our first epoch begins.
                    return epoch, start
                return self.entries[i - 1][0], start
        return UNDEFINED_EPOCH, -1  # newer than our latest epoch

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after `end_offset` (the log was truncated there)."""
        before = len(self.entries)
        self.entries = [(e, o) for e, o in self.entries if o < end_offset]
        if len(self.entries) != before:
            self._persist(truncated=True)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch holding it begins there."""
        keep = [(e, o) for e, o in self.entries if o > start_offset]
        older = [(e, o) for e, o in self.entries if o <= start_offset]
        if older:
            keep.insert(0, (older[-1][0], start_offset))
        if keep != self.entries:
            self.entries = keep
            self._persist(truncated=True)
