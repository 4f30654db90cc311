"""Sweeps in slices (runtime/slicing.py): the loop gets a turn whenever a slice has used its
budget, never inside a step; the sweep's result comes back; with no loop it runs at once."""

from __future__ import annotations

import asyncio
from collections.abc import Generator

from gregor.runtime.slicing import run_in_slices
from gregor.storage.log_manager import run_at_once


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def sweep(clock: FakeClock, trace: list[str], n: int) -> Generator[None, None, int]:
    for i in range(n):
        trace.append(f"step {i}")
        clock.now += 0.0002  # each step costs 0.2 ms
        yield
    return n * 10


def test_the_loop_gets_a_turn_after_each_budget_of_steps() -> None:
    clock, trace = FakeClock(), []

    async def other() -> None:
        while True:
            trace.append("loop")
            await asyncio.sleep(0)

    async def go() -> int:
        task = asyncio.ensure_future(other())
        await asyncio.sleep(0)
        result = await run_in_slices(sweep(clock, trace, 10), budget_s=0.0005, clock=clock)
        task.cancel()
        return result

    assert asyncio.run(go()) == 100
    slices = "|".join(trace).split("loop")
    sizes = [part.count("step") for part in slices if "step" in part]
    assert sum(sizes) == 10
    assert max(sizes) == 3  # 0.6 ms is the first over 0.5 ms: then the loop runs
    assert len(sizes) >= 4


def test_without_a_loop_it_runs_to_the_end() -> None:
    trace: list[str] = []
    assert run_at_once(sweep(FakeClock(), trace, 5)) == 50
    assert len(trace) == 5
