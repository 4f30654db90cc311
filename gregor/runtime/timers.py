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
    MAX_IDLE_MS."""
    wake = asyncio.Event()
    core.wakeup = wake.set
    while True:
        try:
            deadline = core.poll(clock.now_ms())
        except Exception:
            log.exception("%s poll failed", what)
            deadline = None
        now = clock.now_ms()
        delay_ms = MAX_IDLE_MS if deadline is None else min(MAX_IDLE_MS, max(0, deadline - now))
        wake.clear()
        if delay_ms == 0:
            await asyncio.sleep(0)
            continue
        try:
            await asyncio.wait_for(wake.wait(), delay_ms / 1000.0)
        except TimeoutError:
            pass
