"""The log manager's background work as the broker runs it (runtime/log_io.py): what would
hold the event loop on the disk happens on a worker thread, with the same files as the result."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from gregor.clock import ManualClock
from gregor.protocol.records.records import build_batch
from gregor.runtime import log_io, slicing
from gregor.runtime.timers import every
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager

DAY = 86_400_000


def fill(log: Log, batches: int, ts0: int, step_ms: int) -> None:
    for i in range(batches):
        log.append(build_batch([(b"k%d" % i, b"v" * 1000)], base_timestamp=ts0 + i * step_ms))
    log.update_high_watermark(log.log_end_offset)


def record_threads(monkeypatch: pytest.MonkeyPatch, name: str) -> list[tuple[int, Any]]:
    """Calls of os.<name> from now on: (thread ident, first argument)."""
    calls: list[tuple[int, Any]] = []
    real: Callable[..., Any] = getattr(os, name)

    def spy(arg: Any, *rest: Any, **kw: Any) -> Any:
        calls.append((threading.get_ident(), arg))
        return real(arg, *rest, **kw)

    monkeypatch.setattr(os, name, spy)
    return calls


async def until(done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


def retention_manager(tmp_path: Path) -> tuple[LogManager, Log, ManualClock]:
    clock = ManualClock(10 * DAY)
    config = LogConfig(segment_bytes=5000, retention_ms=DAY, file_delete_delay_ms=0)
    mgr = LogManager([str(tmp_path)], config, clock=clock)
    mgr.startup()
    log = mgr.get_or_create("t", 0)
    fill(log, 40, ts0=7 * DAY, step_ms=DAY // 10)
    return mgr, log, clock


def deleted_files(log: Log) -> list[str]:
    return [n for n in os.listdir(log.directory) if n.endswith(".deleted")]


def test_deleted_segment_files_are_unlinked_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr, log, clock = retention_manager(tmp_path)
    gone = mgr.enforce_retention(clock.now_ms())
    doomed = deleted_files(log)
    assert gone > 0 and len(doomed) == 3 * gone  # .log, .index, .timeindex of each
    unlinks = record_threads(monkeypatch, "unlink")

    async def go() -> int:
        log_io.purge_in_background(mgr, clock.now_ms())
        await until(lambda: not deleted_files(log))
        return threading.get_ident()

    loop_thread = asyncio.run(go())
    mine = [(t, p) for t, p in unlinks if str(p).endswith(".deleted")]
    assert {os.path.basename(p) for _, p in mine} >= set(doomed)
    assert all(t != loop_thread for t, _ in mine)
    assert mgr.take_due_deletions(clock.now_ms(), force=True) == []  # none left pending
    mgr.shutdown()


def test_flush_ms_fsyncs_off_the_loop_and_moves_the_recovery_point_when_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(10 * DAY)
    mgr = LogManager([str(tmp_path)], LogConfig(flush_ms=1000), clock=clock)
    mgr.startup()
    log = mgr.get_or_create("t", 0)
    fill(log, 5, ts0=clock.now_ms(), step_ms=1)
    fsyncs = record_threads(monkeypatch, "fsync")
    now = log.last_flush_ms + 1000

    async def go() -> int:
        assert mgr.flush_due(now, log_io.flush_after_roll) == 1
        assert mgr.flush_due(now, log_io.flush_after_roll) == 0  # begun: not begun again
        await until(lambda: log.recovery_point == log.log_end_offset)
        return threading.get_ident()

    loop_thread = asyncio.run(go())
    assert fsyncs and all(t != loop_thread for t, _ in fsyncs)
    mgr.shutdown()


def test_the_checkpoints_after_retention_are_written_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr, log, clock = retention_manager(tmp_path)
    replaces = record_threads(monkeypatch, "replace")
    checkpoint = tmp_path / "log-start-offset-checkpoint"

    async def go() -> int:
        assert await log_io.retention_in_background(mgr, clock.now_ms()) > 0
        await until(
            lambda: checkpoint.exists() and f"t 0 {log.log_start_offset}" in checkpoint.read_text()
        )
        return threading.get_ident()

    loop_thread = asyncio.run(go())
    written = [(t, p) for t, p in replaces if str(p).endswith("checkpoint.tmp")]
    assert len(written) == 3 and all(t != loop_thread for t, _ in written)
    mgr.shutdown()


def test_the_leader_epoch_checkpoint_after_retention_is_written_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(10 * DAY)
    config = LogConfig(segment_bytes=5000, retention_ms=DAY, file_delete_delay_ms=0)
    mgr = LogManager([str(tmp_path)], config, clock=clock)
    mgr.write_later = log_io.DeferredWrites()  # as the broker sets it
    mgr.startup()
    log = mgr.get_or_create("t", 0)
    log.leader_epochs.assign(5, 0)
    fill(log, 40, ts0=7 * DAY, step_ms=DAY // 10)
    replaces = record_threads(monkeypatch, "replace")
    path = Path(log.leader_epochs.path)

    async def go() -> int:
        assert await log_io.retention_in_background(mgr, clock.now_ms()) > 0
        await until(lambda: f"5 {log.log_start_offset}" in path.read_text())
        return threading.get_ident()

    loop_thread = asyncio.run(go())
    written = [(t, p) for t, p in replaces if str(p).endswith("leader-epoch-checkpoint.tmp")]
    assert written and all(t != loop_thread for t, _ in written)
    mgr.shutdown()


def test_the_checkpoint_sweep_gives_the_loop_turns_and_every_awaits_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slicing, "BUDGET_S", 0.0)  # a turn after every log
    mgr = LogManager([str(tmp_path)], LogConfig())
    mgr.startup()
    for p in range(20):
        mgr.get_or_create("t", p)
    trace: list[str] = []
    sweep = mgr.checkpoint_snapshot_steps

    def traced() -> Generator[None, None, Any]:
        steps = sweep()
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
            trace.append("log")
            yield

    monkeypatch.setattr(mgr, "checkpoint_snapshot_steps", traced)
    checkpoint = tmp_path / "recovery-point-offset-checkpoint"

    async def other() -> None:
        while True:
            trace.append("turn")
            await asyncio.sleep(0)

    async def go() -> None:
        spinner = asyncio.ensure_future(other())
        timer = asyncio.ensure_future(every(0.01, lambda: log_io.checkpoint_in_background(mgr)))
        await until(lambda: checkpoint.exists() and "t 19 0" in checkpoint.read_text())
        timer.cancel()
        spinner.cancel()

    asyncio.run(go())
    first, last = trace.index("log"), len(trace) - 1 - trace[::-1].index("log")
    during = trace[first : last + 1]
    assert during.count("log") >= 20
    assert "log,log" not in ",".join(during)  # the loop ran between any two logs
    mgr.shutdown()


def test_a_deleted_partitions_files_are_removed_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = LogManager([str(tmp_path)], LogConfig())
    mgr.dir_remover = log_io.remove_dir_in_background  # as the broker sets it
    mgr.startup()
    fill(mgr.get_or_create("t", 0), 5, ts0=0, step_ms=1)
    removals = record_threads(monkeypatch, "unlink")

    async def go() -> int:
        mgr.delete("t", 0)
        await until(lambda: not os.listdir(tmp_path))
        return threading.get_ident()

    loop_thread = asyncio.run(go())
    logs = [(t, p) for t, p in removals if str(p).endswith(".log")]
    assert logs and all(t != loop_thread for t, _ in logs)
    mgr.shutdown()
