"""The loop-stall monitor: opt-in (`gregor.loop.stall.log.ms`, 0 = off, nothing installed), it
logs one line each time the event loop could not start a new callback for longer than the
threshold, with the loop thread's stack sampled while it was held (what held it), and one line
for each garbage collection that took longer than the threshold.

    monitor = LoopStallMonitor(threshold_ms=1.0)
    monitor.start(asyncio.get_running_loop())
    ...
    monitor.stop()

How: a watchdog thread posts a probe to the loop every threshold/2 (`call_soon_threadsafe`);
the probe's wait is the delay a request arriving then would have seen. While a probe waits
longer than the threshold, the watchdog samples the loop thread's frames
(`sys._current_frames`) every period; when the probe runs it logs the delay and the samples,
counted by stack. asyncio's own `slow_callback_duration` needs debug mode (costly) and uvloop has
no `_run_once` to time, so a probe it is: it works under both.

A sample needs the GIL: a loop thread blocked in a syscall (write, fsync) has released it and
is sampled at once; one running Python code gives it up only every switch interval, so the
monitor lowers `sys.setswitchinterval` to its period while it runs (restored on stop). A page
fault inside an mmap write holds the GIL: its delay is measured right, but the stack sampled is
the one after it. Cost while on: a thread wake-up and a loop wake-up every period, 7-11% of a
core on an idle broker at 1 ms (measured here); off, nothing.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import os
import sys
import threading
import time
from types import FrameType
from typing import Any

log = logging.getLogger("gregor.stall")

MIN_PERIOD_S = 0.00025
MAX_SAMPLES = 200  # per stall: a 100 ms stall at a 0.5 ms period
STACK_DEPTH = 6  # frames of each sample named in the log line, innermost last
# the loop's own machinery, left out of a sample: it is under every callback
_LOOP_FILES = (
    os.sep + os.path.join("asyncio", "runners.py"),
    os.sep + os.path.join("asyncio", "base_events.py"),
    os.sep + os.path.join("asyncio", "events.py"),
)


class LoopStallMonitor:
    def __init__(self, threshold_ms: float) -> None:
        assert threshold_ms > 0
        self.threshold_s = threshold_ms / 1000.0
        self.period_s = max(MIN_PERIOD_S, self.threshold_s / 2)
        self.stalls = 0  # stalls logged, and the longest (ms)
        self.worst_ms = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._posted: float | None = None  # when the waiting probe was posted
        self._posted_sched = (0, 0)
        self._posted_late = 0.0
        self._wchan: int | None = None  # fd of the loop thread's /proc wchan
        self._schedstat: int | None = None  # fd of the loop thread's /proc schedstat
        self._samples: list[str] = []
        self._gc_started = 0.0
        self._switch_interval = sys.getswitchinterval()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch `loop`, which runs on the calling thread."""
        self._loop, self._loop_thread = loop, threading.get_ident()
        tid = threading.get_native_id()
        self._schedstat = _open_schedstat(tid)  # None off Linux: the lines go without the split
        try:
            self._wchan = os.open(f"/proc/self/task/{tid}/wchan", os.O_RDONLY)
        except OSError:
            self._wchan = None
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, self.period_s))
        gc.callbacks.append(self._on_gc)
        self._thread = threading.Thread(
            target=self._watch, name="gregor-stall-monitor", daemon=True
        )
        self._thread.start()
        log.info("logging event-loop stalls and gc pauses over %g ms", self.threshold_s * 1000)

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stopping.set()
        self._thread.join()
        self._thread = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        sys.setswitchinterval(self._switch_interval)
        for fd in (self._schedstat, self._wchan):
            if fd is not None:
                os.close(fd)
        self._schedstat = self._wchan = None

    # -- the watchdog thread --------------------------------------------------------------------

    def _watch(self) -> None:
        assert self._loop is not None
        own = _open_schedstat(threading.get_native_id())
        try:
            self._watch_loop(own)
        finally:
            if own is not None:
                os.close(own)

    def _watch_loop(self, own: int | None) -> None:
        assert self._loop is not None
        due = time.perf_counter() + self.period_s
        runnable = _sched(own)[1]
        while not self._stopping.wait(max(0.0, due - time.perf_counter())):
            now = time.perf_counter()
            # Woken late, and not for want of a cpu: the GIL was held all along (a collection,
            # a long C call such as a page fault in an mmap write) and the loop could not have
            # run a callback either; the probe counts from when it was due.
            waited, runnable = runnable, _sched(own)[1]
            posted_at = min(now, due + (runnable - waited) / 1e9)
            due = now + self.period_s
            posted = self._posted
            if posted is None:
                self._posted_sched = self._sched()
                self._posted_late = now - posted_at
                self._posted = posted_at
                try:
                    self._loop.call_soon_threadsafe(self._probe)
                except RuntimeError:  # the loop is closed
                    return
            elif now - posted > self.threshold_s and len(self._samples) < MAX_SAMPLES:
                frame = sys._current_frames().get(self._loop_thread)
                if frame is not None:
                    self._samples.append(stack_summary(frame) + self._in_kernel())

    def _in_kernel(self) -> str:
        """` [kernel: balance_dirty_pages]`: where the loop thread sleeps in the kernel now."""
        if self._wchan is None:
            return ""
        try:
            where = os.pread(self._wchan, 128, 0).decode(errors="replace").strip()
        except OSError:
            return ""
        return f" [kernel: {where}]" if where not in ("", "0") else ""

    # -- on the loop ----------------------------------------------------------------------------

    def _probe(self) -> None:
        posted = self._posted
        samples, self._samples = self._samples, []
        self._posted = None
        if posted is None:
            return
        delay_s = time.perf_counter() - posted
        before, late_s = self._posted_sched, self._posted_late
        if delay_s <= self.threshold_s:
            return
        self.stalls += 1
        self.worst_ms = max(self.worst_ms, delay_s * 1000)
        counted = collections.Counter(samples).most_common(4)
        held_by = "; ".join(f"{n}x {stack}" for stack, n in counted) or "(not sampled)"
        log.warning(
            "event loop held %.1f ms%s: %s",
            delay_s * 1000,
            self._where_the_time_went(delay_s - late_s, before, late_s),
            held_by,
        )

    def _sched(self) -> tuple[int, int]:
        return _sched(self._schedstat)

    def _where_the_time_went(self, delay_s: float, before: tuple[int, int], late_s: float) -> str:
        """` (GIL held 12.0 ms, then loop thread: 1.0 ms on a cpu, 8.5 ms runnable, 0.3 ms
        asleep)`: the first part passed before the probe could be posted; asleep is a blocking
        syscall, a page fault on disk, or the GIL held by another thread; runnable is the
        machine's other work. Without /proc, only the first part."""
        gil = f"GIL held {late_s * 1000:.1f} ms, then " if late_s > self.threshold_s / 2 else ""
        if self._schedstat is None:
            return f" ({gil.removesuffix(', then ')})" if gil else ""
        now = self._sched()
        on_cpu_ms = (now[0] - before[0]) / 1e6
        runnable_ms = (now[1] - before[1]) / 1e6
        asleep_ms = max(0.0, delay_s * 1000 - on_cpu_ms - runnable_ms)
        return (
            f" ({gil}loop thread: {on_cpu_ms:.1f} ms on a cpu, {runnable_ms:.1f} ms runnable, "
            f"{asleep_ms:.1f} ms asleep)"
        )

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        took_s = time.perf_counter() - self._gc_started
        if took_s > self.threshold_s:
            generation = info.get("generation", -1)
            log.warning(
                "gc of generation %d took %.1f ms (collected %d, uncollectable %d; %d objects "
                "frozen)",
                generation,
                took_s * 1000,
                info.get("collected", 0),
                info.get("uncollectable", 0),
                gc.get_freeze_count(),
            )


def _open_schedstat(tid: int) -> int | None:
    try:
        return os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
    except OSError:
        return None


def _sched(fd: int | None) -> tuple[int, int]:
    """A thread's (ns on a cpu, ns waiting in a run queue) so far, or (0, 0)."""
    if fd is None:
        return (0, 0)
    on_cpu, waiting, _ = os.pread(fd, 96, 0).split()
    return int(on_cpu), int(waiting)


def stack_summary(frame: FrameType | None, depth: int = STACK_DEPTH) -> str:
    """`outer.py:12 callback > ... > inner.py:34 f`: the outermost frame above the loop's own
    machinery (the callback the loop ran) and the innermost `depth - 1` frames."""
    frames: list[FrameType] = []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()  # outermost first: main, asyncio.run, the loop, the callback, ...
    i = next((k for k, f in enumerate(frames) if _in_loop(f)), 0)
    while i < len(frames) and _in_loop(frames[i]):
        i += 1
    names = [
        f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} {f.f_code.co_name}"
        for f in frames[i:]
    ]
    if len(names) > depth:
        names = [names[0], "...", *names[-(depth - 1) :]]
    return " > ".join(names) or "(in the loop's own code: polling, or I/O in C)"


def _in_loop(frame: FrameType) -> bool:
    return frame.f_code.co_filename.endswith(_LOOP_FILES)


def stall_monitor(threshold_ms: float) -> LoopStallMonitor | None:
    """The monitor for `gregor.loop.stall.log.ms`; None (nothing installed) when it is 0."""
    return LoopStallMonitor(threshold_ms) if threshold_ms > 0 else None
