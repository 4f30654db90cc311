"""The purgatory's timer, and waiting on a sans-I/O Pending from the event loop (`future_of`),
or handing its answer to a connection the moment it completes (`later_of`).

    driver = PurgatoryDriver(purgatory, clock_ms)
    driver.start()            # in the running loop: expire(now_ms) at each next_deadline_ms()
    driver.stop()

One timer handle at a time, set for the purgatory's earliest deadline; the purgatory's `wakeup`
moves it earlier when an operation with an earlier deadline is parked. Events complete
operations without this driver (replication/purgatory.py); it only expires them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperationPurgatory
from gregor.runtime.connection import Later, Output

log = logging.getLogger("gregor.purgatory")
T = TypeVar("T")


class PurgatoryDriver:
    def __init__(self, purgatory: DelayedOperationPurgatory, clock_ms: Callable[[], int]) -> None:
        self.purgatory = purgatory
        self.clock_ms = clock_ms
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.purgatory.wakeup = self._reschedule
        self._reschedule()

    def stop(self) -> None:
        self.purgatory.wakeup = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop = None

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.purgatory.next_deadline_ms()
        if deadline is None or self._loop is None:
            return
        delay_s = max(0, deadline - self.clock_ms()) / 1000.0
        self._timer = self._loop.call_later(delay_s, self._fire)

    def _fire(self) -> None:
        self._timer = None
        try:
            self.purgatory.expire(self.clock_ms())
        except Exception:
            log.exception("expiring delayed operations failed")
        self._reschedule()


def future_of(
    pending: Pending,
    convert: Callable[[Any], T] = lambda value: value,
    discard: Callable[[T], None] | None = None,
) -> asyncio.Future[T]:
    """A future of `convert(value)` once `pending` completes. Cancelled first (its connection
    closed), the converted value goes to `discard` instead (a fetch's file slices to close)."""
    fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def done(value: Any) -> None:
        try:
            out = convert(value)
        except Exception as exc:  # noqa: BLE001 - the awaiting side reports it
            if not fut.done():
                fut.set_exception(exc)
            return
        if not fut.done():
            fut.set_result(out)
        elif discard is not None:
            discard(out)

    pending.add_done_callback(done)
    return fut


def later_of(pending: Pending, convert: Callable[[Any], Output]) -> Later:
    """A connection's Later of `convert(value)`, set inside `pending`'s completion (no turn of
    the event loop in between: runtime/connection.py). An exception from `convert` fails it."""
    later = Later()

    def done(value: Any) -> None:
        try:
            out = convert(value)
        except Exception as exc:  # noqa: BLE001 - the connection reports it
            later.set_exception(exc)
            return
        later.set_result(out)

    pending.add_done_callback(done)
    return later
