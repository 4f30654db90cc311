"""The clock every layer reads time through: `SYSTEM_CLOCK` in a broker, a `ManualClock` in
tests and the deterministic simulation.

Below `runtime/` (and the CLI) nothing reads the `time` module's clocks itself; it takes a
`Clock` (or the `now_ms` it gives) from whoever owns it, so a test or the simulation moves time
by hand and a run replays exactly. `tests/test_clock_injected.py` fails on any other read.

It sits outside the import-linter layers (it imports nothing of gregor), so that storage at the
bottom and the CLI at the top can take the same object: a clock is a dependency of every layer,
not part of one.

Wall time (`now_ms`) stamps records, segments and snapshots and is what configs in ms are
measured against; monotonic time measures intervals (throttles, deadlines) and never goes back.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time: milliseconds since the epoch."""
        ...

    def monotonic_s(self) -> float:
        """Seconds on a clock that never goes back (an interval's ends); no fixed origin."""
        ...

    def monotonic_ms(self) -> int:
        """`monotonic_s` in whole milliseconds."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block this thread for `seconds` (a ManualClock advances instead)."""
        ...


class SystemClock:
    """The real clocks. One instance, `SYSTEM_CLOCK`; it pickles as a reference to it, so a
    task sent to a worker process reads the worker's real clock."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic_s(self) -> float:
        return time.monotonic()

    def monotonic_ms(self) -> int:
        return int(time.monotonic() * 1000)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def __reduce__(self) -> str:
        return "SYSTEM_CLOCK"

    def __repr__(self) -> str:
        return "SYSTEM_CLOCK"


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told: `advance` (and `sleep`, which advances) moves both
    times; `set_ms` moves the wall clock alone, either way (a clock jump), as a real wall clock
    may. Fractions of a millisecond add up (a throttle's short sleeps do end). A copy sent to
    another process moves on its own from then on."""

    def __init__(self, now_ms: int = 0, monotonic_ms: int = 0) -> None:
        self._now_ms: float = now_ms
        self._monotonic_ms: float = monotonic_ms

    def now_ms(self) -> int:
        return int(self._now_ms)

    def monotonic_s(self) -> float:
        return self._monotonic_ms / 1000.0

    def monotonic_ms(self) -> int:
        return int(self._monotonic_ms)

    def advance(self, ms: float) -> None:
        assert ms >= 0, f"time moves forward: {ms}"
        self._now_ms += ms
        self._monotonic_ms += ms

    def set_ms(self, now_ms: int) -> None:
        self._now_ms = now_ms

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds * 1000.0))

    def __repr__(self) -> str:
        return f"ManualClock(now_ms={self.now_ms()}, monotonic_ms={self.monotonic_ms()})"
