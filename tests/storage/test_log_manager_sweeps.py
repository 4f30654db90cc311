"""The log manager's sweeps over every log as steps (`*_steps`): one step per log (the flush
sweep: per flush, and per `SWEEP_STEP` logs looked at), the same
result as the sweep at once, and a log deleted while a sweep is under way is left alone (the
broker runs them in slices on its loop, runtime/slicing.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gregor.protocol.records.records import build_batch
from gregor.storage import log_manager
from gregor.storage.config import LogConfig
from gregor.storage.log_manager import LogManager, run_at_once


def manager(tmp_path: Path, partitions: int = 6, **config: int) -> LogManager:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    mgr = LogManager(dirs, LogConfig(**config))
    mgr.startup()
    for p in range(partitions):
        log = mgr.get_or_create("t", p)
        for _ in range(p + 1):
            log.append(build_batch([(b"k", b"v" * 50)], base_timestamp=1000))
        log.update_high_watermark(log.log_end_offset - 1)
    return mgr


def test_each_sweep_takes_one_step_per_log_and_ends_as_the_sweep_at_once(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    steps = mgr.checkpoint_snapshot_steps()
    taken = 0
    try:
        while True:
            next(steps)
            taken += 1
    except StopIteration as done:
        sliced = done.value
    assert taken == 6
    at_once = mgr.checkpoint_snapshot()
    assert sliced[1] == at_once[1] and sliced[0] < at_once[0]  # same files, an older snapshot
    hws = {tp: o for path, offsets in sliced[1] if path.endswith("replication-offset-checkpoint")
           for tp, o in offsets.items()}  # fmt: skip
    assert hws == {("t", p): p for p in range(6)}
    for sweep in (mgr.enforce_retention_steps(0), mgr.remove_expired_producers_steps(0, 1)):
        assert sum(1 for _ in sweep) == 6
    mgr.shutdown()


def test_the_flush_sweep_steps_per_flush_and_per_batch_of_idle_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It runs every second: with `flush.ms` unset nothing is ever due, and a turn of the loop
    per log would be the whole cost of an idle node of thousands of partitions."""
    monkeypatch.setattr(log_manager, "SWEEP_STEP", 4)
    idle = manager(tmp_path / "idle")
    assert sum(1 for _ in idle.flush_due_steps(10**15)) == 1  # 6 logs looked at, none due
    assert all(log.recovery_point == 0 for _tp, log in idle.partitions())
    idle.shutdown()
    due = manager(tmp_path / "due", flush_ms=0)
    steps = due.flush_due_steps(10**15)
    assert sum(1 for _ in steps) == 6 + 1  # a step after each flush, one per 4 looked at
    assert all(log.recovery_point == log.log_end_offset for _tp, log in due.partitions())
    due.shutdown()


def test_a_log_deleted_during_a_sweep_is_left_out(tmp_path: Path) -> None:
    mgr = manager(tmp_path, flush_ms=0)
    steps = mgr.checkpoint_snapshot_steps()
    next(steps)
    mgr.delete("t", 5)
    _seq, files = run_at_once(steps)
    assert all(("t", 5) not in offsets for _path, offsets in files)
    assert all(
        ("t", 4) in offsets for path, offsets in files if path.startswith(mgr.dir_of("t", 4) or "?")
    )
    flushing = mgr.flush_due_steps(10**15)
    next(flushing)
    mgr.delete("t", 4)
    assert run_at_once(flushing) == 4  # t-0..3 flushed; t-4 is gone, t-5 went before
    mgr.shutdown()
