"""The log manager's background work: fsyncs after a roll, of leader-epoch checkpoints and
checkpoint writes on worker threads (so they never hold the event loop), with their results
handed back to the log on the loop; and the periodic tasks (flushes, deleted files,
checkpoints, retention, idle producers).

    logs.roll_flusher = flush_after_roll      # LogManager calls it after each roll
    logs.deferred_sync = DeferredSyncs()      # leader-epoch checkpoints, new dirs: fsynced later
    logs.write_later = DeferredWrites()       # and its logs, for deferred checkpoint writes
    logs.dir_remover = remove_dir_in_background  # a deleted partition's files
    tasks = maintenance(logs, config_value, clock)      # coroutines to run until stopped
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import logging
import os
import shutil
from collections.abc import Callable, Collection, Coroutine
from typing import Any

from gregor.clock import Clock
from gregor.runtime.slicing import run_in_slices
from gregor.runtime.timers import every
from gregor.storage import checkpoints
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.runtime")


def flush_after_roll(log_: Log, up_to: int) -> None:
    """fsync a log up to `up_to` on a worker thread (a rolled segment, as Kafka does after a
    roll; or every `flush.ms`), so the event loop never waits for the disk; the recovery point
    moves when the fsync is done."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not serving yet (opening logs): flush inline
        log_.flush(up_to)
        return
    fds = [os.dup(seg.fd) for seg in log_.segments_to_flush(up_to)]
    fds += log_.producer_state.pending_sync_fds()  # the roll's producer snapshot
    truncations = log_.truncations
    created = log_.creation_syncs  # a new log's first flush: its files and directory first

    def fsync_all() -> None:
        try:
            if created:  # its leader-epoch checkpoint may be still to be made (leader_epoch.py)
                log_.leader_epochs.make_file()
            for path in created:
                checkpoints.fsync_if_exists(path)
            for fd in fds:
                os.fsync(fd)
        finally:
            for fd in fds:
                os.close(fd)

    def done(fut: asyncio.Future[None]) -> None:
        exc = fut.exception()
        if exc is None:
            log_.mark_flushed(up_to, truncations, created)
        elif isinstance(exc, OSError):
            log_.fail(exc, "flushing")
        else:
            log.error("background flush of %s failed: %s", log_, exc)

    loop.run_in_executor(None, fsync_all).add_done_callback(done)


class DeferredSyncs:
    """fsyncs of files written without one (leader-epoch checkpoints), done on a worker thread
    in batches: whatever was asked for while one batch ran makes the next.

        logs.deferred_sync = syncs = DeferredSyncs()
        ...
        syncs.drain()      # at stop: what is still pending, synced before the logs close
    """

    def __init__(self) -> None:
        self._pending: set[str] = set()
        self._running = False

    def __call__(self, path: str) -> None:
        self._pending.add(path)
        if self._running:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving: at once
            self.drain()
            return
        self._running = True
        loop.call_soon(self._next_batch)

    def _next_batch(self) -> None:
        paths, self._pending = self._pending, set()
        if not paths:
            self._running = False
            return
        asyncio.get_running_loop().run_in_executor(None, sync_files, paths).add_done_callback(
            self._done
        )

    def _done(self, fut: asyncio.Future[None]) -> None:
        exc = fut.exception()
        if exc is not None:
            log.error("could not sync leader-epoch checkpoints: %s", exc)
        self._next_batch()

    def drain(self) -> None:
        paths, self._pending = self._pending, set()
        sync_files(paths)


def sync_files(paths: Collection[str]) -> None:
    """fsync each file and its directory; many at once: one syncfs per file system.

    Each path and each directory is fsynced once however many of the paths name it: a new
    partition hands over its directory and its leader-epoch checkpoint, which is in that
    directory, and the directory's own fsync (after both were made) covers the checkpoint's
    entry too. So a partition costs its checkpoint, its directory and a share of the log dir's
    fsync: 2-3 where it was 4 (its directory twice), on a node whose batches stay small."""
    if len(paths) > _SYNCFS_ABOVE and _syncfs is not None:
        devices: dict[int, str] = {}
        for path in paths:
            directory = os.path.dirname(path) or "."
            with contextlib.suppress(OSError):
                devices.setdefault(os.stat(directory).st_dev, directory)
        for directory in devices.values():
            fd = os.open(directory, os.O_RDONLY)
            try:
                if _syncfs(fd) != 0:
                    raise OSError(ctypes.get_errno(), f"syncfs of {directory} failed")
            finally:
                os.close(fd)
        return
    synced: set[str] = set()
    parents: dict[str, None] = {}  # in order, each once
    for path in paths:
        if path not in synced and checkpoints.fsync_if_exists(path):
            synced.add(path)
            parents.setdefault(os.path.dirname(path) or ".", None)
    for directory in parents:
        if directory not in synced:
            checkpoints.fsync_dir(directory)


_SYNCFS_ABOVE = 32  # files per batch above which one syncfs beats a fsync each
_syncfs = checkpoints.load_syncfs()


class DeferredWrites:
    """A log's deferred writes (leader-epoch truncations), run on a worker thread in batches:
    those asked for while the loop is busy go in one job, which starts once the loop is free.
    Opening 10,000 logs after a crash asks for thousands; by the time the job runs, the new
    epoch each partition got as it was led has written most of those files already, and their
    deferred writes find nothing left to do (leader_epoch.py).

        logs.write_later = DeferredWrites()
    """

    def __init__(self) -> None:
        self._pending: list[Callable[[], None]] = []
        self._scheduled = False

    def __call__(self, write: Callable[[], None]) -> None:
        self._pending.append(write)
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving: at once
            self._run(self._take())
            return
        self._scheduled = True
        loop.call_soon(self._submit)

    def _take(self) -> list[Callable[[], None]]:
        writes, self._pending = self._pending, []
        self._scheduled = False
        return writes

    def _submit(self) -> None:
        writes = self._take()
        asyncio.get_running_loop().run_in_executor(None, self._run, writes).add_done_callback(
            _log_failure
        )

    @staticmethod
    def _run(writes: list[Callable[[], None]]) -> None:
        for write in writes:  # one failure does not keep the others from their files
            try:
                write()
            except Exception as exc:
                log.error("a background write failed: %s", exc)


def in_thread(work: Callable[[], Any], done: Callable[[Any], None]) -> None:
    """Run `work` on a worker thread, then `done` with its result (or the exception it raised)
    back on the event loop (the partition hosting makes new partitions' logs so)."""

    def finished(fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        done(exc if exc is not None else fut.result())

    asyncio.get_running_loop().run_in_executor(None, work).add_done_callback(finished)


def _log_failure(fut: asyncio.Future[None]) -> None:
    if (exc := fut.exception()) is not None:
        log.error("a background write failed: %s", exc)


def remove_dir_in_background(path: str) -> None:
    """Remove a deleted partition's renamed dir on a worker thread."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not serving: at once
        shutil.rmtree(path, ignore_errors=True)
        return
    loop.run_in_executor(None, functools.partial(shutil.rmtree, path, ignore_errors=True))


def purge_in_background(logs: LogManager, now_ms: int) -> None:
    """Remove the segment files whose `file.delete.delay.ms` has passed: their handles are
    released on the loop, the files unlinked on a worker thread (freeing a large file's
    extents takes milliseconds on ext4)."""
    due = logs.take_due_deletions(now_ms)
    if not due:
        return
    paths = []
    for seg in due:
        seg.close_handles()
        paths += logs.deleted_paths(seg)

    def unlink_all() -> None:
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.error("removing deleted segment file %s failed: %s", path, exc)

    asyncio.get_running_loop().run_in_executor(None, unlink_all)


async def checkpoint_in_background(logs: LogManager) -> None:
    """Take the offsets on the loop, in slices; write and fsync the three files on a worker
    thread."""
    snapshot = await run_in_slices(logs.checkpoint_snapshot_steps())
    asyncio.get_running_loop().run_in_executor(None, logs.write_checkpoints, snapshot)


async def retention_in_background(logs: LogManager, now_ms: int) -> int:
    """Apply retention on the loop (renames, offsets), in slices; the checkpoints after it are
    written on a worker thread."""

    def checkpoint() -> None:
        asyncio.ensure_future(checkpoint_in_background(logs))

    return await run_in_slices(logs.enforce_retention_steps(now_ms, checkpoint))


def maintenance(
    logs: LogManager, value: Callable[[str], Any], clock: Clock
) -> list[Coroutine[Any, Any, None]]:
    """The log manager's timers, each at its config's interval. Producers idle past
    producer.id.expiration.ms are forgotten at once (state loaded from snapshots may be old),
    then every check interval (producer_state.py)."""

    async def flush_and_purge() -> None:
        now = clock.now_ms()
        # flush.ms: fsynced on a worker thread
        await run_in_slices(logs.flush_due_steps(now, flush_after_roll))
        purge_in_background(logs, now)

    def forgot(n: int, expiration_ms: int) -> None:
        if n:
            log.info(
                "forgot %d partition producer state(s) idle for %d ms or more", n, expiration_ms
            )

    async def expire_producers() -> None:
        expiration_ms = int(value("producer.id.expiration.ms"))
        steps = logs.remove_expired_producers_steps(clock.now_ms(), expiration_ms)
        forgot(await run_in_slices(steps), expiration_ms)

    expiration_ms = int(value("producer.id.expiration.ms"))
    forgot(logs.remove_expired_producers(clock.now_ms(), expiration_ms), expiration_ms)
    seconds = {
        key: int(value(key)) / 1000
        for key in (
            "log.flush.offset.checkpoint.interval.ms",
            "log.retention.check.interval.ms",
            "producer.id.expiration.check.interval.ms",
        )
    }
    return [
        every(1.0, flush_and_purge),
        every(seconds["log.flush.offset.checkpoint.interval.ms"], lambda: checkpoint_in_background(logs)),
        every(seconds["log.retention.check.interval.ms"], lambda: retention_in_background(logs, clock.now_ms())),
        every(seconds["producer.id.expiration.check.interval.ms"], expire_producers),
    ]  # fmt: skip
