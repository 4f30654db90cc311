"""The timers of runtime/timers.py on a real event loop: `drive` polls a core at its deadline,
when it calls `wakeup` (once however often), at least every MAX_IDLE_MS when it names no
deadline, goes on after a poll that raised, and polls no more once cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from gregor.clock import SystemClock
from gregor.runtime import timers
from gregor.runtime.timers import drive

WAIT_S = 5.0  # how long a test waits for what must happen (never a measured figure)


class Core:
    def __init__(self, deadlines: Callable[[int], int | None]) -> None:
        self.deadlines = deadlines
        self.polls: list[int] = []
        self.wakeup: Callable[[], None] | None = None
        self.fail = False

    def poll(self, now_ms: int) -> int | None:
        self.polls.append(now_ms)
        if self.fail:
            self.fail = False
            raise RuntimeError("poll failed")
        return self.deadlines(now_ms)


async def until(cond: Callable[[], bool]) -> None:
    async def wait() -> None:
        while not cond():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(wait(), WAIT_S)


def test_polls_at_each_deadline() -> None:
    async def go() -> None:
        core = Core(lambda now: now + 10)
        task = asyncio.ensure_future(drive(core, SystemClock(), "test"))
        await until(lambda: len(core.polls) >= 5)
        task.cancel()

    asyncio.run(go())


def test_wakeup_polls_on_the_next_turn_once() -> None:
    async def go() -> None:
        core = Core(lambda now: None)
        task = asyncio.ensure_future(drive(core, SystemClock(), "test"))
        await asyncio.sleep(0)
        assert len(core.polls) == 1  # the first poll, at start
        assert core.wakeup is not None
        core.wakeup()
        core.wakeup()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(core.polls) == 2
        task.cancel()

    asyncio.run(go())


def test_an_idle_core_is_polled_every_max_idle_ms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timers, "MAX_IDLE_MS", 10)

    async def go() -> None:
        core = Core(lambda now: None)
        task = asyncio.ensure_future(drive(core, SystemClock(), "test"))
        await until(lambda: len(core.polls) >= 3)
        task.cancel()

    asyncio.run(go())


def test_a_failed_poll_does_not_end_the_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timers, "MAX_IDLE_MS", 10)

    async def go() -> None:
        core = Core(lambda now: now + 10)
        core.fail = True
        task = asyncio.ensure_future(drive(core, SystemClock(), "test"))
        await until(lambda: len(core.polls) >= 3)
        task.cancel()

    asyncio.run(go())


def test_no_poll_after_cancel() -> None:
    async def go() -> None:
        core = Core(lambda now: now)  # due at once, every time
        task = asyncio.ensure_future(drive(core, SystemClock(), "test"))
        await until(lambda: len(core.polls) >= 3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        seen = len(core.polls)
        assert core.wakeup is not None
        core.wakeup()
        await asyncio.sleep(0.05)
        assert len(core.polls) == seen

    asyncio.run(go())
