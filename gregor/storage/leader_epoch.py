"""The leader-epoch cache of a partition: which leader epoch began at which offset.

Entries `(epoch, start_offset)`, both strictly increasing, persisted to the partition's
`leader-epoch-checkpoint` whenever they change. It answers OffsetForLeaderEpoch (the end offset of
an epoch: the start offset of the next larger epoch, or the log end offset) and is trimmed when
the log is truncated at either end.

A new epoch is written at once, and fsynced at once unless the owner set `sync_later`: a broker
hands the fsyncs to a worker thread, so that becoming leader of thousands of partitions at
start-up or after a failover waits for no fsync on the event loop (a killed process loses
nothing: the file is in the page cache), and the file is then written in place when it does not
shrink (checkpoints.overwrite_lines). A truncation's write may be handed to `write_later` (the
broker: a worker thread), as Kafka does since KAFKA-15046/16541: retention and DeleteRecords
move the start often. A deferred write writes the entries as they are when it runs, under the
same lock as every write, so the file never goes back to an older state, and fsyncs it after
the lock is released (or hands it to `sync_deferred`: the broker batches those fsyncs); `flush_pending` (at close) writes one still waiting. Entries the file may
still hold after a crash are trimmed when the log opens (`truncate_from_*`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from gregor.storage import checkpoints

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1

log = logging.getLogger(__name__)


class LeaderEpochCache:
    def __init__(self, directory: str, new: bool = False) -> None:
        """`new`: the directory was made just now: no checkpoint to read."""
        self.path = os.path.join(directory, FILE_NAME)
        self.entries: list[tuple[int, int]] = []
        self._new = new
        # The file `create_file` left to be made (a new directory's): see `make_file`.
        self._unmade = False
        if not new:
            try:
                self.entries = checkpoints.read_epochs(self.path)
            except (checkpoints.CheckpointError, ValueError) as exc:
                log.warning("ignoring damaged %s: %s", self.path, exc)

        # Where the fsync of a write goes (None: done at once), and where a truncation's write
        # goes (None: written at once); told of a failed deferred write with its OSError.
        self.sync_later: Callable[[str], None] | None = None
        self.write_later: Callable[[Callable[[], None]], object] | None = None
        self.on_write_failure: Callable[[OSError], None] | None = None
        # Where a deferred write's fsync goes (callable from its worker thread; None: done
        # there, file by file). The log manager hands it to the broker's batched fsyncs.
        self.sync_deferred: Callable[[str], None] | None = None
        self._lock = threading.Lock()
        self._pending = False
        self._size: int | None = None  # of the file, when this cache wrote it last

    def _write(self, sync: bool) -> None:
        """The entries to the file (the lock held): replaced by a rename and fsynced with
        `sync`, else written in place when it does not shrink, for a fsync later."""
        entries = list(self.entries)
        if sync or self.sync_later is None:
            checkpoints.write_epochs(self.path, entries, sync=sync)
            self._size = None
        else:
            self._size = checkpoints.overwrite_epochs(self.path, entries, self._size)
        self._unmade = False

    def create_file(self, first: tuple[int, int] | None = None) -> None:
        """Create the checkpoint when a new partition's files are made, as Kafka's
        CheckpointFile does: its owner calls this on the worker thread making them, so that
        the event loop never creates it (a directory change, waiting behind the file system's
        journal: often milliseconds). `first`: the epoch the partition is led in from offset 0
        when the metadata names this broker its leader; becoming leader in that epoch then
        finds it recorded and writes nothing, else the first epoch overwrites the file in
        place (a pwrite, microseconds). Not fsynced (the caller syncs it). Nothing if the file
        exists or the cache has entries.

        In a directory made just now (`new`) the file is not made here: `first` is recorded,
        and the file is made holding the entries as they are then by `make_file`, which the
        log's first flush calls before it fsyncs the file and moves the recovery point (off the
        loop: log_io.py), and its close; an epoch assigned or cut before then makes it on a
        worker thread (`write_later`), as a truncation's write, never on the loop. A partition
        created and not written to then costs one inode fewer: ext4 allocates one in tens to
        hundreds of microseconds of system time. Until that first flush the recovery point stays
        at the log start, so a crash (which may find no checkpoint) recovers the log from there
        and takes its epochs from its batches, as for a log `LogManager.get_or_create` made."""
        with self._lock:
            if self.entries:
                return
            entries = [] if first is None else [first]
            if self._new:
                self.entries, self._unmade = entries, True
                return
            size = checkpoints.create_lines(self.path, (f"{e} {o}" for e, o in entries))
            if size is not None:
                self._size = size
                self.entries = entries

    def make_file(self) -> None:
        """Make the file `create_file` left to be made, holding the entries as they are now, not
        fsynced (the caller syncs it, then the directory); nothing if it is made already, or
        if the partition's directory is gone (deleted meanwhile)."""
        if not self._unmade:
            return
        with self._lock:
            if not self._unmade:
                return
            self._unmade = False
            lines = [f"{e} {o}" for e, o in list(self.entries)]
            try:
                self._size = checkpoints.create_lines(self.path, lines)
            except FileNotFoundError:
                return

    def _persist(self) -> None:
        if self._unmade and self.write_later is not None:
            # The file is still to be made: made, holding the new epoch, on a worker thread
            # as a truncation's write is (or by `make_file`, whichever runs first).
            self._write_off_loop()
            return
        later = self.sync_later
        with self._lock:
            self._pending = False
            self._write(sync=later is None)
        if later is not None:
            later(self.path)

    def _persist_truncation(self) -> None:
        if self.write_later is None:
            with self._lock:
                self._pending = False
                self._write(sync=False)  # not fsynced: a crash brings back what opening cuts
            if self.sync_later is not None:
                self.sync_later(self.path)
        else:
            self._write_off_loop()

    def _write_off_loop(self) -> None:
        assert self.write_later is not None
        if not self._pending:
            self._pending = True
            self.write_later(self._write_deferred)

    def _write_deferred(self) -> None:
        """The entries as they are now, unless a write since took them already; nothing if the
        partition's dir is gone (deleted meanwhile). Runs on a worker thread."""
        with self._lock:
            if not self._pending:
                return
            self._pending = False
            if not os.path.isdir(os.path.dirname(self.path)):
                return
            try:
                self._write(sync=False)
            except FileNotFoundError:
                return  # the dir went while writing
            except OSError as exc:
                if self.on_write_failure is None:
                    raise
                self.on_write_failure(exc)
                return
        if self.sync_deferred is not None:
            self.sync_deferred(self.path)
            return
        try:
            checkpoints.sync_file(self.path)
        except OSError as exc:
            if self.on_write_failure is None:
                raise
            self.on_write_failure(exc)

    def flush_pending(self) -> None:
        """Write now a deferred write still waiting, or make the file still to be made (a clean
        close)."""
        if self._pending:
            self._persist()
        self.make_file()

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
            self._persist_truncation()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch holding it begins there."""
        keep = [(e, o) for e, o in self.entries if o > start_offset]
        older = [(e, o) for e, o in self.entries if o <= start_offset]
        if older:
            keep.insert(0, (older[-1][0], start_offset))
        if keep != self.entries:
            self.entries = keep
            self._persist_truncation()
