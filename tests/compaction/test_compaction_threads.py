"""The cleaner on its worker thread while the event loop appends and reads the same log: the
threading design of cleaner.py / runtime/cleaner_thread.py, without sockets."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any

import pytest
from compaction_helpers import (
    Model,
    append_random,
    check_deduplicated,
    check_log,
    leftovers,
    new_manager,
)

from gregor.runtime.cleaner_thread import CleanerThreads
from gregor.storage.cleaner import CleanerConfig
from gregor.storage.config import LogConfig

T0 = 1_700_000_000_000
# The cleaning in a worker process (gregor.storage.cleaner_worker) starts a child: not a unit test.
IN_PROCESS = pytest.param(True, marks=pytest.mark.client)


def small_compacted_config() -> LogConfig:
    """A compacted log of small segments, cleanable at once, whose old files go at once."""
    return LogConfig(
        segment_bytes=2500,
        index_interval_bytes=200,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.3,
        delete_retention_ms=10_000_000,
        file_delete_delay_ms=0,
    )


def check_cleaned(threads: CleanerThreads, log: Any, model: Model) -> None:
    """The log is whole, left no temporary files, and is deduplicated up to its checkpoint."""
    check_log(log, model)
    assert not leftovers(log.directory)
    end = threads.cleaner.checkpoint_of("t", 0)
    assert end is not None and end > 0
    check_deduplicated(log, model, end)


@pytest.mark.parametrize("in_process", [False, IN_PROCESS], ids=["thread", "process"])
def test_cleaning_on_a_worker_while_the_loop_appends_and_reads(tmp_path, in_process):
    cfg = small_compacted_config()
    mgr, log, _ = new_manager(str(tmp_path), cfg)
    model = Model()
    rng = random.Random(1)
    loop_thread: list[threading.Thread] = []
    swap_threads: set[str] = set()

    async def main() -> CleanerThreads:
        loop_thread.append(threading.current_thread())
        threads = CleanerThreads(
            mgr, CleanerConfig(backoff_ms=5, in_process=in_process), lambda: T0
        )
        swap = threads.cleaner.swap

        def swap_and_note(task, group):
            swap_threads.add(threading.current_thread().name)
            return swap(task, group)

        threads.cleaner.swap = swap_and_note  # type: ignore[method-assign]
        threads.start()
        deadline = time.monotonic() + 4
        i = 0
        while time.monotonic() < deadline or threads.cleaner.cleanings < 3:
            append_random(log, model, rng, batches=3, keys=40, now_ms=T0)
            i += 1
            if i % 25 == 0:
                check_log(log, model)  # reads between swaps see a whole log
            await asyncio.sleep(0.002)
            assert time.monotonic() < deadline + 60, "the cleaner never got going"
        await threads.stop()
        return threads

    threads = asyncio.run(main())
    assert threads.cleaner.cleanings >= 3
    # Every swap ran on the loop's thread, never on the worker.
    assert swap_threads == {loop_thread[0].name}
    check_cleaned(threads, log, model)
    mgr.shutdown()


@pytest.mark.parametrize("in_process", [False, IN_PROCESS], ids=["thread", "process"])
def test_stop_aborts_a_cleaning_in_progress(tmp_path, in_process):
    cfg = LogConfig(
        segment_bytes=4000,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0,
        file_delete_delay_ms=0,
    )
    mgr, log, _ = new_manager(str(tmp_path), cfg)
    model = Model()
    append_random(log, model, random.Random(2), batches=400, keys=50, now_ms=T0)
    log.roll(now_ms=T0)
    append_random(log, model, random.Random(3), batches=1, keys=1, now_ms=T0)

    async def main() -> CleanerThreads:
        # 2 KB/s: the cleaning would take minutes (the throttle sleeps seconds at a time), and
        # stop() must not wait for it.
        config = CleanerConfig(backoff_ms=5, io_max_bytes_per_second=2_000, in_process=in_process)
        threads = CleanerThreads(mgr, config, lambda: T0)
        threads.start()
        while not threads.cleaner.in_progress:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await threads.stop()
        assert time.monotonic() - started < 1
        return threads

    threads = asyncio.run(main())
    assert threads.cleaner.cleanings == 0 and not threads.cleaner.in_progress
    assert threads.cleaner.checkpoint_of("t", 0) is None
    assert not leftovers(log.directory)
    check_log(log, model)
    mgr.shutdown()


def test_a_swap_fsyncs_its_directory_once_on_the_loop_and_once_on_the_worker(tmp_path, monkeypatch):
    """The swap's first directory fsync (ordering `.swap` before the old segments' renames)
    stays on the loop, inside the swap; its last one runs on the cleaner's worker thread, which
    waits for it before cleaning on. The log is whole and deduplicated after."""
    import gregor.runtime.cleaner_thread as cleaner_thread_module
    import gregor.storage.log as log_module

    cfg = small_compacted_config()
    mgr, log, _ = new_manager(str(tmp_path), cfg)
    model = Model()
    rng = random.Random(2)
    for _ in range(60):
        append_random(log, model, rng, batches=3, keys=40, now_ms=T0)
    fsyncs: list[tuple[str, str]] = []  # (thread name, directory) of every directory fsync
    swaps: list[bool] = []

    def recording(real):
        def fsync(directory: str) -> None:
            fsyncs.append((threading.current_thread().name, directory))
            real(directory)

        return fsync

    monkeypatch.setattr(log_module, "fsync_dir", recording(log_module.fsync_dir))
    monkeypatch.setattr(
        cleaner_thread_module, "fsync_dir", recording(cleaner_thread_module.fsync_dir)
    )

    async def main() -> tuple[str, CleanerThreads]:
        threads = CleanerThreads(mgr, CleanerConfig(backoff_ms=5, in_process=False), lambda: T0)
        swap = threads.cleaner.swap

        def swap_and_note(task, group):
            swapped = swap(task, group)
            swaps.append(swapped)
            return swapped

        threads.cleaner.swap = swap_and_note  # type: ignore[method-assign]
        threads.start()
        deadline = time.monotonic() + 60
        while threads.cleaner.cleanings < 1:
            assert time.monotonic() < deadline, "the cleaner never got going"
            await asyncio.sleep(0.01)
        await threads.stop()
        return threading.current_thread().name, threads

    loop_name, threads = asyncio.run(main())
    done = swaps.count(True)
    assert done >= 1
    on_loop = [d for name, d in fsyncs if name == loop_name]
    on_worker = [d for name, d in fsyncs if name.startswith("gregor-cleaner")]
    assert on_loop == [log.directory] * done  # was two per swap
    assert on_worker == [log.directory] * done
    check_cleaned(threads, log, model)
    mgr.shutdown()
