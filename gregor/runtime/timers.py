"""Timers: the loops that call a core at its deadlines, or a function every few seconds.

    tasks = [every(1.0, flush), drive(coordinator, clock, "group")]

`drive` is the one loop for a sans-I/O core with `poll(now_ms) -> next deadline (or None)` and a
`wakeup` hook it calls when an operation brings its deadline forward; `every` is a fixed period.
Both log (never raise) what the function raises, so one failure does not end the timer.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any, Protocol

from gregor.clock import Clock

log = logging.getLogger("gregor.runtime")

MAX_IDLE_MS = 1000  # a core is polled at least this often, so dynamic configs are picked up


class Pollable(Protocol):
    wakeup: Callable[[], None] | None

    def poll(self, now_ms: int) -> int | None: ...


async def every(seconds: float, fn: Callable[[], Any]) -> None:
    """`fn()` every `seconds`; a coroutine it returns is awaited before the next wait."""
    while True:
        await asyncio.sleep(max(seconds, 0.01))
        try:
            result = fn()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("background task %s failed", getattr(fn, "__name__", fn))


async def drive(core: Pollable, clock: Clock, what: str) -> None:
    """Poll `core` at its next deadline, or sooner when it calls `wakeup`; at least every
    MAX_IDLE_MS. Runs until cancelled.

    The polls are loop callbacks (`call_later`, `call_soon`), not steps of this task: this task
    only waits to be cancelled. A poll of an idle core then costs one timer callback, where a
    task waiting on an event with a timeout (`wait_for`) took five callbacks and a task of its
    own for each wait; four cores polled this way on each node made most of an idle node's
    loop turns."""
    timer = CoreTimer(core, clock, what)
    timer.start()
    try:
        await asyncio.get_running_loop().create_future()  # until cancelled
    finally:
        timer.stop()


class CoreTimer:
    """The polls of `drive`. A `wakeup` during a poll is dropped (the poll under way sees the
    change); any other polls the core on the next turn of the loop, once however often."""

    def __init__(self, core: Pollable, clock: Clock, what: str) -> None:
        self.core = core
        self.clock = clock
        self.what = what
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._scheduled = False
        self._polling = False
        self._stopped = False

    def start(self) -> None:
        self.core.wakeup = self.wakeup
        self._poll()

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def wakeup(self) -> None:
        if self._scheduled or self._polling or self._stopped:
            return
        self._scheduled = True
        self._loop.call_soon(self._poll)

    def _poll(self) -> None:
        self._scheduled = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._stopped:
            return
        self._polling = True
        try:
            deadline = self.core.poll(self.clock.now_ms())
        except Exception:
            log.exception("%s poll failed", self.what)
            deadline = None
        finally:
            self._polling = False
        if self._stopped:
            return
        now = self.clock.now_ms()
        delay_ms = MAX_IDLE_MS if deadline is None else min(MAX_IDLE_MS, max(0, deadline - now))
        if delay_ms == 0:
            self._scheduled = True
            self._loop.call_soon(self._poll)
        else:
            self._timer = self._loop.call_later(delay_ms / 1000.0, self._poll)
