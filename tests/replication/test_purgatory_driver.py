"""The purgatory's timer (runtime/purgatory_driver.py) over a real event loop, and `future_of`,
which turns a Pending into the future a connection waits on."""

from __future__ import annotations

import asyncio
import time

from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperation, DelayedOperationPurgatory
from gregor.runtime.purgatory_driver import PurgatoryDriver, future_of


def clock_ms() -> int:
    return int(time.monotonic() * 1000)


class Expires(DelayedOperation):
    """Never completes by an event: only its deadline ends it."""

    def __init__(self, deadline_ms: int, log: list[str], name: str) -> None:
        super().__init__(deadline_ms)
        self.log, self.name = log, name

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        self.log.append(self.name)


def test_the_driver_expires_at_each_deadline_and_reschedules_for_an_earlier_one() -> None:
    async def run() -> list[str]:
        purgatory = DelayedOperationPurgatory("t")
        driver = PurgatoryDriver(purgatory, clock_ms)
        driver.start()
        log: list[str] = []
        start = clock_ms()
        purgatory.watch(Expires(start + 5_000, log, "late"), [])
        purgatory.watch(Expires(start + 50, log, "early"), [])  # must bring the timer forward
        await asyncio.sleep(0.03)
        assert log == []
        await asyncio.sleep(0.2)
        assert log == ["early"] and purgatory.next_deadline_ms() == start + 5_000
        driver.stop()
        return log

    assert asyncio.run(run()) == ["early"]


def test_future_of_sends_the_converted_value_or_discards_it_once_cancelled() -> None:
    async def run() -> tuple[str, list[str]]:
        sent, dropped = Pending("a"), Pending("b")
        discarded: list[str] = []
        fut = future_of(sent, lambda v: f"<{v}>", discarded.append)
        gone = future_of(dropped, lambda v: f"<{v}>", discarded.append)
        gone.cancel()  # the connection closed while it waited
        sent.complete("x")
        dropped.complete("y")
        return await fut, discarded

    assert asyncio.run(run()) == ("<x>", ["<y>"])
