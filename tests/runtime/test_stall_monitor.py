"""The loop-stall monitor (runtime/stall_monitor.py): a callback that holds the loop is logged
with its delay and its name, sampled while it held the loop (blocked in a syscall, or running
Python code); short callbacks are not logged; a slow garbage collection is; stopping removes
every hook it installed; off (0) installs nothing."""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import uvloop

from gregor.runtime.stall_monitor import LoopStallMonitor, stack_summary, stall_monitor
from gregor.testing.broker import Broker

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def run_with_monitor(make_loop: Callable[[], asyncio.AbstractEventLoop], threshold_ms: float,
                     callback: Callable[[], None]) -> LoopStallMonitor:  # fmt: skip
    async def go() -> LoopStallMonitor:
        monitor = LoopStallMonitor(threshold_ms)
        monitor.start(asyncio.get_running_loop())
        try:
            await asyncio.sleep(0.02)  # the watchdog's first probes come and go
            asyncio.get_running_loop().call_soon(callback)
            await asyncio.sleep(0.05)  # the probe that waited runs and logs
        finally:
            monitor.stop()
        return monitor

    loop = make_loop()
    try:
        return loop.run_until_complete(go())
    finally:
        loop.close()


def _sleep_on_the_loop() -> None:
    time.sleep(0.06)  # as a blocking write or fsync does: the GIL is released


def _spin_on_the_loop() -> None:
    end = time.perf_counter() + 0.06
    while time.perf_counter() < end:  # Python code holding the GIL
        pass


@pytest.mark.parametrize("kind", sorted(LOOPS))
@pytest.mark.parametrize("callback", [_sleep_on_the_loop, _spin_on_the_loop])
def test_a_held_loop_is_logged_with_what_held_it(
    kind: str, callback: Callable[[], None], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gregor.stall")
    monitor = run_with_monitor(LOOPS[kind], 10, callback)
    held = [r.getMessage() for r in caplog.records if "event loop held" in r.getMessage()]
    named = [m for m in held if callback.__name__ in m]
    assert named, held
    assert float(named[0].split("held ")[1].split(" ms")[0]) >= 20  # of 60 (a lower bound)
    assert monitor.stalls >= 1 and monitor.worst_ms >= 20
    if callback is _sleep_on_the_loop and sys.platform == "linux":  # time.sleep: off the cpu
        asleep = float(named[0].split(" ms asleep")[0].rpartition(", ")[2])
        assert asleep >= 20, named[0]


def test_a_long_call_holding_the_gil_is_measured_from_when_the_probe_was_due(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A C call that never lets the GIL go (here a sort; in the broker a collection or a page
    fault in an mmap write) keeps the watchdog from posting its probe: the delay still counts
    from when the probe was due, not from when the watchdog could post it."""
    values = [random.random() for _ in range(400_000)]
    took: list[float] = []

    def sort_on_the_loop() -> None:
        t0 = time.perf_counter()
        sorted(values)
        took.append(time.perf_counter() - t0)

    caplog.set_level(logging.WARNING, logger="gregor.stall")
    monitor = run_with_monitor(asyncio.new_event_loop, 10, sort_on_the_loop)
    assert took[0] > 0.03, "the sort was too quick to tell"
    assert monitor.worst_ms >= took[0] * 1000 * 0.7, (monitor.worst_ms, took[0])


def test_short_callbacks_are_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gregor.stall")
    monitor = run_with_monitor(asyncio.new_event_loop, 500, lambda: time.sleep(0.001))
    assert monitor.stalls == 0
    assert not [r for r in caplog.records if "event loop held" in r.getMessage()]


def test_a_slow_garbage_collection_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gregor.stall")
    monitor = LoopStallMonitor(0.001)  # any collection is longer than 1 µs
    loop = asyncio.new_event_loop()
    try:
        monitor.start(loop)
        gc.collect()
    finally:
        monitor.stop()
        loop.close()
    assert any("gc of generation 2 took" in r.getMessage() for r in caplog.records)


def test_stop_removes_every_hook() -> None:
    before = (list(gc.callbacks), sys.getswitchinterval(), threading.active_count())
    monitor = LoopStallMonitor(1)
    loop = asyncio.new_event_loop()
    try:
        monitor.start(loop)
        assert sys.getswitchinterval() <= 0.0005
        assert len(gc.callbacks) == len(before[0]) + 1
    finally:
        monitor.stop()
        loop.close()
    assert (list(gc.callbacks), sys.getswitchinterval(), threading.active_count()) == before


def test_off_installs_nothing() -> None:
    callbacks = list(gc.callbacks)
    assert stall_monitor(0) is None
    assert gc.callbacks == callbacks
    monitor = stall_monitor(2.5)
    assert monitor is not None and monitor.threshold_s == 0.0025


def test_the_stack_summary_names_the_callback_and_the_innermost_frames() -> None:
    def callback() -> str:
        return a()

    def a() -> str:
        return b()

    def b() -> str:
        return stack_summary(sys._getframe(), depth=3)

    loop = asyncio.new_event_loop()
    try:
        fut = loop.create_future()
        loop.call_soon(lambda: fut.set_result(callback()))
        summary = loop.run_until_complete(fut)
    finally:
        loop.close()
    names = [part.split(" ")[-1] for part in summary.split(" > ")]
    assert names == ["<lambda>", "...", "a", "b"], summary


def test_a_broker_runs_the_monitor_when_configured(tmp_path: Path) -> None:
    broker = Broker({"gregor.loop.stall.log.ms": "0.5"}, data_dir=str(tmp_path), log_level="INFO")
    broker.start()
    try:
        assert "logging event-loop stalls and gc pauses over 0.5 ms" in broker.read_log()
        assert "objects made at start-up (gc_settings.py)" in broker.read_log()  # frozen
    finally:
        assert broker.stop() == 0
    assert "shut down cleanly" in broker.read_log()
