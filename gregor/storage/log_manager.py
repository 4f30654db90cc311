"""Every partition log of a broker, across one or more `log.dirs`.

    <log dir>/
        .kafka_cleanshutdown                 written last on a clean shutdown, removed at start
        recovery-point-offset-checkpoint     per partition: offset everything below is fsynced
        log-start-offset-checkpoint          per partition: the log start offset
        replication-offset-checkpoint        per partition: the high watermark
        <topic>-<partition>/                 one Log each (see log.py)
        <topic>-<partition>.<id>-delete/     a deleted partition, removed in the background
        __cluster_metadata-0/                the KRaft metadata log: not a partition here; the
                                             Raft log opens it (raft/storage_log.py)

A new partition goes to the log dir holding the fewest partitions. Opening 10,000 partitions
opens no index and leaves no file open: segments are listed, and each log's active segment is
read once to find its end and then released; fds and maps come back on first use.

A failed log dir (Kafka's LogDirFailureChannel): any I/O error in a log (a full disk, EIO), a
checkpoint or a new partition's files takes the whole dir offline at once: its logs refuse
appends and reads with KAFKA_STORAGE_ERROR, it gets no new partitions, no checkpoints, no
flushes, retention or clean-shutdown marker (its next start recovers it), and one error line
names it; `dir_failure_listeners` hear of it (the broker tells the controller). The other dirs
carry on. Only a restart brings an offline dir back.

No I/O scheduling lives here: the broker calls `flush_due`, `checkpoint`, `purge_deleted` from
its timers (and may run them on a worker thread), passing the time in. The sweeps over every log
(flushes, retention, producer expiration, checkpoint offsets) are also generators (`*_steps`)
that yield after each log, so the broker can run them in slices (runtime/slicing.py).
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Generator, Iterator
from typing import TypeVar

from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.storage import checkpoints
from gregor.storage.config import LogConfig
from gregor.storage.log import Log, dir_name, parse_dir_name
from gregor.storage.segment import LogSegment

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
DELETE_DIR_SUFFIX = "-delete"
SWEEP_STEP = 256  # logs a periodic sweep looks at between turns of the loop, when it does nothing
SYNC_EACH_UP_TO = 32  # logs a shutdown fsyncs one by one; more: one syncfs per log dir
METADATA_LOG_DIR = "__cluster_metadata-0"  # never loaded, retained, cleaned or recovered here

TopicPartition = tuple[str, int]
CheckpointSnapshot = tuple[int, list[tuple[str, dict[TopicPartition, int]]]]
T = TypeVar("T")


def _remove_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def run_at_once(steps: Generator[None, None, T]) -> T:
    """Run a sweep to its end without a break."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


class LogManager:
    def __init__(
        self,
        log_dirs: list[str],
        default_config: LogConfig | None = None,
        *,
        config_for: Callable[[str], LogConfig] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if not log_dirs:
            raise ValueError("log.dirs names no directory")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.default_config = default_config or LogConfig()
        self.config_for = config_for or (lambda topic: self.default_config)
        self.clock = clock  # every log's, and the cleaner's
        self.logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, str] = {}
        self._dir_counts: dict[str, int] = dict.fromkeys(self.log_dirs, 0)
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_seq = 0
        self._checkpoint_written = 0
        # How a log's roll flushes its old segment (default: Log.flush, synchronously).
        self.roll_flusher: Callable[[Log, int], None] | None = None
        # Set by a serving broker: fsyncs of leader-epoch checkpoints and of new partition
        # directories, done off the loop (runtime/log_io.py).
        self.deferred_sync: Callable[[str], None] | None = None
        # How a deleted partition's renamed dir is removed (the broker: on a worker thread,
        # unlinking a large segment takes milliseconds); None: at once.
        self.dir_remover: Callable[[str], None] | None = None
        # Where a log's deferred writes run (leader-epoch truncations); None: at once.
        self.write_later: Callable[[Callable[[], None]], object] | None = None
        self._pending_deletes: list[tuple[int, list[LogSegment]]] = []
        self.had_clean_shutdown: dict[str, bool] = {}
        # Told (partition, the active segment's base) after any log is truncated: the log
        # cleaner lowers its checkpoint (Kafka's LogManager.truncateTo does the same).
        self.truncation_listeners: list[Callable[[TopicPartition, int], None]] = []
        # Failed dirs and why; listeners are told each dir once, as it fails.
        self.offline_dirs: dict[str, str] = {}
        self.dir_failure_listeners: list[Callable[[str], None]] = []
        # Moves whenever a log's start moves or a log goes offline (`note_change`): what a
        # reader skipping unchanged partitions checks (a partition event tells the rest).
        self.changes = 0
        self._change_seq = itertools.count(1)
        # How a worker thread hands a failure to the logs' thread (the broker gives its loop's
        # call_soon_threadsafe); None: call at once.
        self.call_soon_on_owner: Callable[..., object] | None = None

    # -- start and stop -----------------------------------------------------------------------

    def startup(self) -> None:
        """Open every partition found in the log dirs (recovering after an unclean stop)."""
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
            marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
            clean = os.path.exists(marker)
            self.had_clean_shutdown[d] = clean
            recovery = self._read_checkpoint(d, RECOVERY_POINT_CHECKPOINT)
            starts = self._read_checkpoint(d, LOG_START_OFFSET_CHECKPOINT)
            hws = self._read_checkpoint(d, REPLICATION_OFFSET_CHECKPOINT)
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                if name == METADATA_LOG_DIR:
                    continue
                tp = parse_dir_name(name)
                if tp is None:
                    continue
                log_ = Log.open(
                    path,
                    self.config_for(tp[0]),
                    log_start_offset=starts.get(tp, 0),
                    recovery_point=recovery.get(tp, 0),
                    clean_shutdown=clean,
                    file_deleter=self._schedule_delete,
                    clock=self.clock,
                    deferred_sync=self.deferred_sync,
                    write_later=self.write_later,
                )
                if tp in hws:
                    log_.update_high_watermark(hws[tp])
                self._place(tp, d, log_)
            if clean:
                # From here on a crash must be recovered: the marker goes before any write.
                os.unlink(marker)
                checkpoints.fsync_dir(d)
        log.info(
            "loaded %d partitions from %s (clean shutdown: %s)",
            len(self.logs),
            ", ".join(self.log_dirs),
            all(self.had_clean_shutdown.values()),
        )

    def shutdown(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown markers.
        Many logs are closed without an fsync each, then each log dir's file system is synced
        once (syncfs): 10,000 partitions stop in a second, not after 30,000 fsyncs."""
        at_once = len(self.logs) > SYNC_EACH_UP_TO and checkpoints.load_syncfs() is not None
        closed = []
        for log_ in self.logs.values():
            if log_.offline:
                log_.close_handles()  # nothing more is written there; its start recovers it
                continue
            try:
                log_.close(sync=not at_once)
                closed.append(log_)
            except OSError as exc:
                log_.close_handles()
                self.fail_dir(
                    self._dir_of.get((log_.topic, log_.partition), ""), exc, f"closing {log_}"
                )
        if at_once:
            self._sync_dirs_at_once(closed)
        self.checkpoint()
        self.purge_deleted(force=True)
        for d in self.log_dirs:
            if d in self.offline_dirs:
                continue
            path = os.path.join(d, CLEAN_SHUTDOWN_FILE)
            with open(path, "w") as f:
                f.write('{"version":0,"brokerEpoch":-1}')
                f.flush()
                os.fsync(f.fileno())
            checkpoints.fsync_dir(d)

    def _sync_dirs_at_once(self, closed: list[Log]) -> None:
        synced = set()
        for d in self.log_dirs:
            if d in self.offline_dirs:
                continue
            try:
                checkpoints.syncfs(d)
                synced.add(d)
            except OSError as exc:
                self.fail_dir(d, exc, "syncing the log dir at shutdown")
        for log_ in closed:
            if self._dir_of.get((log_.topic, log_.partition)) in synced:
                log_.synced()

    # -- partitions ---------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        tp = (topic, partition)
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        if dir_name(topic, partition) == METADATA_LOG_DIR:
            raise ValueError(f"{METADATA_LOG_DIR} is the metadata log, not a partition")
        d = self._least_loaded_dir()
        try:
            log_ = Log.create(
                os.path.join(d, dir_name(topic, partition)),
                config or self.config_for(topic),
                file_deleter=self._schedule_delete,
                clock=self.clock,
                deferred_sync=self.deferred_sync,
            )
            log_.creation_syncs = [log_.directory, d]  # fsynced by its first flush (log.py)
        except OSError as exc:
            self.fail_dir(d, exc, f"creating {topic}-{partition}")
            raise KafkaError(
                errors.KAFKA_STORAGE_ERROR,
                f"cannot create {topic}-{partition} in {d}: {exc.strerror or exc}",
            ) from None
        self._place(tp, d, log_)
        return log_

    def prepare(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        first_epoch: int | None = None,
    ) -> tuple[str, Callable[[], Log]]:
        """A new partition's log in two halves, so its directory and files are made on a worker
        thread: (log dir, open) where `open()` creates and opens the log without placing it
        (any thread, once); `adopt(topic, partition, log dir, log)` then places it, on this
        one. The log dir is taken now, as `get_or_create` takes it (the least loaded).
        `first_epoch`: the leader epoch the metadata names this broker leader in, recorded in
        the new leader-epoch checkpoint from offset 0 (leader_epoch.py `create_file`). Nothing
        is fsynced: the log's first flush syncs what was made (log.py `creation_syncs`)."""
        d = self._least_loaded_dir()
        self._dir_counts[d] += 1  # reserved: partitions prepared at once spread over the dirs
        path = os.path.join(d, dir_name(topic, partition))
        cfg = config or self.config_for(topic)

        def open_log() -> Log:
            log_ = Log.create(
                path,
                cfg,
                file_deleter=self._schedule_delete,
                clock=self.clock,
                deferred_sync=self.deferred_sync,
            )
            try:  # here, not on the loop when it becomes leader
                first = None
                if first_epoch is not None and log_.log_end_offset == 0:
                    first = (first_epoch, 0)
                log_.leader_epochs.create_file(first)
            except BaseException:
                log_.close()
                raise
            log_.creation_syncs = [log_.leader_epochs.path, log_.directory, d]
            return log_

        return d, open_log

    def adopt(self, topic: str, partition: int, d: str, log_: Log | BaseException) -> None:
        """Place a log `prepare`d in log dir `d` (or take `d` offline: the OSError opening it
        raised). A partition placed meanwhile keeps its log; the prepared one is closed."""
        self._dir_counts[d] -= 1
        if isinstance(log_, BaseException):
            if isinstance(log_, OSError):
                self.fail_dir(d, log_, f"creating {topic}-{partition}")
            return
        if (topic, partition) in self.logs:
            log_.close()
            return
        self._place((topic, partition), d, log_)

    def _least_loaded_dir(self) -> str:
        online = [d for d in self.log_dirs if d not in self.offline_dirs]
        if not online:
            raise KafkaError(
                errors.KAFKA_STORAGE_ERROR, f"every log dir is offline: {', '.join(self.log_dirs)}"
            )
        return min(online, key=lambda d: self._dir_counts[d])

    # -- failed dirs --------------------------------------------------------------------------

    def fail_dir(self, d: str, exc: OSError, doing: str) -> None:
        """Take log dir `d` offline (once): every log in it, with one line saying why."""
        if d in self.offline_dirs:
            return
        self.offline_dirs[d] = f"{doing}: {exc.strerror or exc}"
        mine = [lg for tp, lg in self.logs.items() if self._dir_of.get(tp) == d]
        for log_ in mine:
            log_.offline = True
        self.note_change()
        log.error(
            "log dir %s failed (%s: %s); its %d partitions are offline on this broker until it "
            "restarts; free the disk or fix the error, then restart",
            d,
            doing,
            exc.strerror or exc,
            len(mine),
        )
        for listener in self.dir_failure_listeners:
            listener(d)

    def _log_failed(self, tp: TopicPartition, log_: Log, exc: OSError, doing: str) -> None:
        d = self._dir_of.get(tp)
        if d is not None and self.logs.get(tp) is log_:
            self.fail_dir(d, exc, f"{doing} in {tp[0]}-{tp[1]}")

    def note_change(self) -> None:
        """A log's start moved or a log went offline (any thread: one step of a C iterator
        gives a value no reader has seen)."""
        self.changes = next(self._change_seq)

    def online_logs(self) -> list[Log]:
        return [lg for lg in self.logs.values() if not lg.offline]

    def _place(self, tp: TopicPartition, d: str, log_: Log) -> None:
        if self.roll_flusher is not None:
            log_.roll_flusher = self.roll_flusher
        log_.leader_epochs.sync_later = self.deferred_sync
        if self.write_later is not None:
            log_.leader_epochs.write_later = self.write_later
            log_.leader_epochs.on_write_failure = lambda exc: self._fail_dir_soon(
                d, exc, f"writing the leader-epoch checkpoint of {tp[0]}-{tp[1]}"
            )
            if self.deferred_sync is not None and self.call_soon_on_owner is not None:
                # A deferred write's fsync joins the others (one syncfs for many files, as
                # after a crash start, when thousands of trims may run on the worker at once).
                log_.leader_epochs.sync_deferred = self._sync_on_owner
        log_.on_truncation = lambda offset: self._truncated(tp, log_, offset)
        log_.on_change = self.note_change
        log_.on_failure = lambda lg, exc, doing: self._log_failed(tp, lg, exc, doing)
        if d in self.offline_dirs:
            log_.offline = True
        self.logs[tp] = log_
        self._dir_of[tp] = d
        self._dir_counts[d] += 1

    def _sync_on_owner(self, path: str) -> None:
        """Hand a file written on a worker thread to `deferred_sync`, on the logs' thread."""
        if self.deferred_sync is not None and self.call_soon_on_owner is not None:
            self.call_soon_on_owner(self.deferred_sync, path)

    def _truncated(self, tp: TopicPartition, log_: Log, offset: int) -> None:
        if self.logs.get(tp) is log_:
            for listener in self.truncation_listeners:
                listener(tp, offset)

    def delete(self, topic: str, partition: int) -> None:
        """Remove a partition: its directory is renamed away at once and removed later."""
        tp = (topic, partition)
        log_ = self.logs.pop(tp, None)
        d = self._dir_of.pop(tp, None)
        if log_ is None or d is None:
            return
        self._dir_counts[d] -= 1
        log_.close_handles()
        target = os.path.join(
            d, f"{dir_name(topic, partition)}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        )
        os.rename(log_.directory, target)
        checkpoints.fsync_dir(d)
        # Its files go now, or on another thread (a start removes a `-delete` dir left over).
        (self.dir_remover or _remove_dir)(target)

    def partitions(self) -> Iterator[tuple[TopicPartition, Log]]:
        return iter(list(self.logs.items()))

    def dir_of(self, topic: str, partition: int) -> str | None:
        return self._dir_of.get((topic, partition))

    # -- background work ----------------------------------------------------------------------

    def flush_due(self, now_ms: int, flusher: Callable[[Log, int], None] | None = None) -> int:
        """fsync logs whose `flush.ms` has passed since their last flush; how many were.
        `flusher(log, up_to)` (the broker's: on a worker thread, as after a roll) instead of
        `Log.flush` here."""
        return run_at_once(self.flush_due_steps(now_ms, flusher))

    def flush_due_steps(
        self, now_ms: int, flusher: Callable[[Log, int], None] | None = None
    ) -> Generator[None, None, int]:
        """`flush_due` as a sweep. A step is a flush, or `SWEEP_STEP` logs looked at: with
        `flush.ms` unset (Kafka's default) nothing is due, and a step per log would cost an idle
        node of thousands of partitions a millisecond a second."""
        count = 0
        for looked, (tp, log_) in enumerate(list(self.logs.items()), 1):
            if looked % SWEEP_STEP == 0:
                yield
            if (
                now_ms - log_.last_flush_ms >= log_.config.flush_ms
                and log_.recovery_point < log_.log_end_offset
                and not log_.offline
                and self.logs.get(tp) is log_
            ):
                try:
                    if flusher is not None:
                        log_.last_flush_ms = now_ms  # begun: not begun again while it runs
                        flusher(log_, log_.log_end_offset)
                    else:
                        log_.guarded("flushing", log_.flush)
                except KafkaError:
                    continue  # offline now, with its dir
                count += 1
                yield
        return count

    def enforce_retention(self, now_ms: int, checkpoint: Callable[[], None] | None = None) -> int:
        """Delete segments past retention.ms / retention.bytes in every log; how many went.
        Then the checkpoints are written: `checkpoint()` (the broker's: on a worker thread), or
        here."""
        return run_at_once(self.enforce_retention_steps(now_ms, checkpoint))

    def enforce_retention_steps(
        self, now_ms: int, checkpoint: Callable[[], None] | None = None
    ) -> Generator[None, None, int]:
        """`enforce_retention` as a sweep."""
        from gregor.storage import retention

        deleted = 0
        for (topic, partition), log_ in list(self.logs.items()):
            yield
            if log_.offline or self.logs.get((topic, partition)) is not log_:
                continue
            n = retention.enforce(log_, now_ms)
            if n:
                log.info(
                    "%s-%d: deleted %d segment(s) by retention; log start offset now %d",
                    topic,
                    partition,
                    n,
                    log_.log_start_offset,
                )
                deleted += n
        if deleted:
            (checkpoint or self.checkpoint)()
        return deleted

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget idempotent producers idle for `producer.id.expiration.ms` in every log."""
        return run_at_once(self.remove_expired_producers_steps(now_ms, expiration_ms))

    def remove_expired_producers_steps(
        self, now_ms: int, expiration_ms: int
    ) -> Generator[None, None, int]:
        """`remove_expired_producers` as a sweep."""
        removed = 0
        for tp, lg in list(self.logs.items()):
            yield
            if not lg.offline and self.logs.get(tp) is lg:
                removed += lg.producer_state.remove_expired(now_ms, expiration_ms)
        return removed

    def checkpoint(self) -> None:
        """Write the three per-dir offset checkpoints."""
        self.write_checkpoints(self.checkpoint_snapshot())

    def checkpoint_snapshot(self) -> CheckpointSnapshot:
        """The offsets the checkpoints would hold now, taken on the logs' thread; the (fsyncing)
        writes can then happen on another with `write_checkpoints`."""
        return run_at_once(self.checkpoint_snapshot_steps())

    def checkpoint_snapshot_steps(self) -> Generator[None, None, CheckpointSnapshot]:
        """`checkpoint_snapshot` as a sweep: each log's offsets as the sweep reaches it (as
        Kafka's checkpoint task reads each log in turn); a log deleted meanwhile is left out."""
        self._checkpoint_seq += 1
        seq = self._checkpoint_seq
        per_dir: dict[str, tuple[dict[TopicPartition, int], ...]] = {
            d: ({}, {}, {}) for d in self.log_dirs if d not in self.offline_dirs
        }
        taken = list(self.logs.items())
        for tp, lg in taken:
            yield
            maps = per_dir.get(self._dir_of.get(tp, ""))
            if maps is not None and self.logs.get(tp) is lg:
                maps[0][tp] = lg.recovery_point
                maps[1][tp] = lg.log_start_offset
                maps[2][tp] = lg.high_watermark
        files: list[tuple[str, dict[TopicPartition, int]]] = []
        for d, (recovery, starts, hws) in per_dir.items():
            if d in self.offline_dirs:  # failed meanwhile
                continue
            files.append((os.path.join(d, RECOVERY_POINT_CHECKPOINT), recovery))
            files.append((os.path.join(d, LOG_START_OFFSET_CHECKPOINT), starts))
            files.append((os.path.join(d, REPLICATION_OFFSET_CHECKPOINT), hws))
        return seq, files

    def write_checkpoints(self, snapshot: CheckpointSnapshot) -> None:
        """Write a snapshot's files, unless a newer snapshot was written already (writes from
        two threads never interleave, and an older view never replaces a newer one)."""
        seq, files = snapshot
        with self._checkpoint_lock:
            if seq < self._checkpoint_written:
                return
            for path, offsets in files:
                d = os.path.dirname(path)
                if d in self.offline_dirs:
                    continue
                try:
                    checkpoints.write_offsets(path, offsets)
                except OSError as exc:
                    self._fail_dir_soon(d, exc, f"writing {os.path.basename(path)}")
            self._checkpoint_written = seq

    def _fail_dir_soon(self, d: str, exc: OSError, doing: str) -> None:
        """A failure seen on a worker thread: the dir goes offline on the logs' thread."""
        call = self.call_soon_on_owner
        if call is None:
            self.fail_dir(d, exc, doing)
        else:
            call(self.fail_dir, d, exc, doing)

    def _schedule_delete(self, segments: list[LogSegment]) -> None:
        delay = min(
            (self.config_for(self._topic_of(s)).file_delete_delay_ms for s in segments), default=0
        )
        self._pending_deletes.append((self.clock.now_ms() + delay, segments))

    @staticmethod
    def _topic_of(seg: LogSegment) -> str:
        tp = parse_dir_name(os.path.basename(seg.directory))
        return tp[0] if tp else ""

    def purge_deleted(self, now_ms: int | None = None, force: bool = False) -> int:
        """Remove `.deleted` segment files whose `file.delete.delay.ms` has passed."""
        due = self.take_due_deletions(now_ms, force)
        for seg in due:
            seg.delete()
        return len(due)

    def take_due_deletions(
        self, now_ms: int | None = None, force: bool = False
    ) -> list[LogSegment]:
        """The `.deleted` segments whose `file.delete.delay.ms` has passed, no longer pending:
        the caller removes them (`seg.delete()`, or `close_handles` here and `deleted_paths`
        unlinked on another thread: a 1 GiB file's unlink frees its extents for milliseconds)."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        due = [seg for t, segs in self._pending_deletes if force or t <= now for seg in segs]
        self._pending_deletes = [
            (t, segs) for t, segs in self._pending_deletes if not (force or t <= now)
        ]
        return due

    @staticmethod
    def deleted_paths(seg: LogSegment) -> list[str]:
        """The files `seg.delete()` unlinks."""
        return [seg.log_path, seg.offset_index.path, seg.time_index.path, seg.txn_index.path]

    @staticmethod
    def _read_checkpoint(d: str, name: str) -> dict[TopicPartition, int]:
        path = os.path.join(d, name)
        try:
            return checkpoints.read_offsets(path)
        except (checkpoints.CheckpointError, ValueError) as exc:
            log.warning("ignoring damaged checkpoint %s: %s", path, exc)
            return {}
