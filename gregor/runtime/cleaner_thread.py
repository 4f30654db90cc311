"""The log cleaner's threads, as the broker runs them (the cleaning itself: storage/cleaner.py).

`log.cleaner.threads` loops on the event loop, each with a worker thread of its own:

    loop thread                                   worker thread
    grab_filthiest(now) -> task   (Log state)
    run_in_executor(task.run) ------------------> build the offset map, write group 1 .cleaned
                                  <-------------- swap(group 1): call_soon_threadsafe, wait
    cleaner.swap(task, group 1)   (checks, renames)
                                  --------------> write group 2 .cleaned ...
    cleaner.done(task, stats)     (checkpoint)
    nothing to clean: wait log.cleaner.backoff.ms

Every Log access happens on the loop thread, so the log's single-threaded contract holds and a
produce or fetch on the partition never waits for more than one swap.

With `log.cleaner.worker.process` (gregor's own setting; true by default, on Linux) the worker
thread hands the task to a child process and relays its swaps (storage/cleaner_worker.py): the
cleaning then runs beside the event loop instead of taking turns with it on the GIL. On the
benchmark's 1 GiB partition (bench/cleaner_bench.py, 2 shared cores, two runs) producers kept
68-79% of their idle rate while it was cleaned, against 32-48% with the thread, and the cleaner
itself ran 1.2-1.7x faster. Kafka's design is the thread; ours differs only in where the CPU work
runs. `stop` aborts the tasks
(they stop at their next batch), waits for the workers and only then lets the logs close: no
swap can reach a closed log, and no worker is left waiting for a loop that is gone.

`reconfigure` applies changed `log.cleaner.*` settings (dynamic broker configs, as Kafka's
LogCleaner.reconfigure does): the running threads are stopped (a cleaning in progress is
aborted; nothing is lost, the log is picked again later) and started again with the new ones.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from dataclasses import replace

from gregor.storage import cleaner_worker
from gregor.storage.checkpoints import fsync_dir
from gregor.storage.cleaner import (
    CleanedGroup,
    CleanerConfig,
    CleaningAborted,
    CleaningTask,
    LogCleaner,
    Throttler,
)
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.cleaner")


class CleanerThreads:
    def __init__(self, logs: LogManager, config: CleanerConfig, now_ms: Callable[[], int]) -> None:
        self.cleaner = LogCleaner(logs, config)
        self.cleaner.sync_swaps = False  # the swap's last fsync runs on the worker: `_swap_on`
        self.config = config
        self._now_ms = now_ms
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._reconfiguring = asyncio.Lock()
        self._closed = False

    def start(self) -> None:
        if not self.config.enabled:
            log.info("log cleaner disabled (log.cleaner.enable / log.cleaner.threads)")
            return
        if self.config.in_process and not cleaner_worker.SUPPORTED:
            log.info("log.cleaner.worker.process needs Linux; cleaning on threads")
            self.config = replace(self.config, in_process=False)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.config.threads, thread_name_prefix="gregor-cleaner"
        )
        self._wake = asyncio.Event()
        self._loops = [
            asyncio.ensure_future(self._clean_logs()) for _ in range(self.config.threads)
        ]

    def wakeup(self) -> None:
        """Look for work now rather than after the backoff (a test, a tool)."""
        if self._wake is not None:
            self._wake.set()

    async def _clean_logs(self) -> None:
        assert self._pool is not None and self._wake is not None
        loop = asyncio.get_running_loop()
        backoff_s = self.config.backoff_ms / 1000.0
        while not self._stopping:
            try:
                task = self.cleaner.grab_filthiest(self._now_ms())
            except Exception:
                log.exception("choosing a log to clean failed")
                task = None
            if task is None:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), backoff_s)
                except TimeoutError:
                    pass
                continue
            swap = self._swap_on(loop, task)
            try:
                if self.config.in_process:
                    rate = self.config.io_max_bytes_per_second
                    stats = await loop.run_in_executor(
                        self._pool, cleaner_worker.run_in_process, task, swap, rate
                    )
                else:
                    stats = await loop.run_in_executor(
                        self._pool, task.run, swap, self.cleaner.throttler
                    )
            except CleaningAborted as exc:
                log.info("%s", exc)
                self.cleaner.done(task, None)
            except Exception as exc:
                self.cleaner.failed(task, exc)
            else:
                self.cleaner.done(task, stats)

    def _swap_on(
        self, loop: asyncio.AbstractEventLoop, task: CleaningTask
    ) -> Callable[[CleanedGroup], bool]:
        """What the worker calls to swap a group: runs `cleaner.swap` on the loop, waits, then
        fsyncs the partition's directory here, off the loop (the swap's last fsync: the loop
        did the one that orders the renames; see Log.replace_segments)."""
        directory = task.directory

        def swap(group: CleanedGroup) -> bool:
            done: concurrent.futures.Future[bool] = concurrent.futures.Future()

            def on_loop() -> None:
                try:
                    done.set_result(self.cleaner.swap(task, group))
                except BaseException as exc:
                    done.set_exception(exc)

            loop.call_soon_threadsafe(on_loop)
            swapped = done.result()
            if swapped:
                fsync_dir(directory)
            return swapped

        return swap

    async def reconfigure(self, config: CleanerConfig) -> bool:
        """Run with `config` from now on (True) unless it changes nothing (False)."""
        async with self._reconfiguring:
            config = replace(config, in_process=self.config.in_process)  # fixed at start-up
            if config == self.config or self._closed:
                return False
            log.info(
                "log cleaner reconfigured: %d thread(s)%s, io.max.bytes.per.second %g",
                config.threads,
                "" if config.enable else " (disabled)",
                config.io_max_bytes_per_second,
            )
            await self._stop_threads()
            self._stopping = False
            self.config = config
            self.cleaner.config = config
            self.cleaner.throttler = Throttler(config.io_max_bytes_per_second, self.cleaner.clock)
            self.start()
            return True

    async def stop(self) -> None:
        async with self._reconfiguring:
            self._closed = True
            await self._stop_threads()

    async def _stop_threads(self) -> None:
        self._stopping = True
        self.cleaner.abort_all()
        if self._wake is not None:
            self._wake.set()
        if self._loops:
            await asyncio.gather(*self._loops, return_exceptions=True)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._loops, self._pool, self._wake = [], None, None
