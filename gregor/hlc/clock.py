"""A hybrid logical clock (Kulkarni, Demirbas et al., "Logical Physical Clocks", 2014).

State: `l`, the greatest physical time (ms) seen, and `c`, a counter of events within `l`.
With `pt` the node's wall clock:

    now():          l' = max(l, pt);  c = c + 1 if l' == l else 0;  l = l'
    update(m):      l' = max(l, m.l, pt)
                    c  = max(c, m.c) + 1  if l' == l == m.l
                         c + 1            if l' == l
                         m.c + 1          if l' == m.l
                         0                otherwise
                    l  = l'

Every timestamp the clock gives is greater than every one it gave or received before (causality
is kept), and `l` stays within `max.clock.skew.ms` of the wall clock: a received timestamp
further ahead than that is refused (ClockSkewError) rather than adopted, so one node with a
runaway clock cannot drag every other node's timestamps (and last-write-wins) into the future.

The wall clock is injected (a callable returning ms): tests move it by hand, backwards too.
If the counter would pass 2^32-1 (4 billion events in one millisecond), `l` moves one
millisecond ahead instead, which keeps every rule above and the 16-byte header.
Thread-safe: a producer thread and a consumer thread may share one clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gregor.clock import SYSTEM_CLOCK
from gregor.hlc.timestamp import MAX_LOGICAL, MAX_NODE_ID, Timestamp

MAX_CLOCK_SKEW_MS_CONFIG = "max.clock.skew.ms"
DEFAULT_MAX_CLOCK_SKEW_MS = 60_000


class ClockSkewError(ValueError):
    """A received timestamp is further ahead of this node's wall clock than max.clock.skew.ms."""

    def __init__(self, received: Timestamp, wall_ms: int, max_clock_skew_ms: int) -> None:
        self.received = received
        self.skew_ms = received.physical_ms - wall_ms
        self.max_clock_skew_ms = max_clock_skew_ms
        super().__init__(
            f"timestamp {received} from node {received.node_id} is {self.skew_ms} ms ahead of "
            f"this node's clock, more than {MAX_CLOCK_SKEW_MS_CONFIG}={max_clock_skew_ms}: "
            f"refused (check that node's clock)"
        )


class HybridClock:
    """One node's hybrid logical clock: `now()` for a local event or a send, `update(ts)` for a
    receive."""

    def __init__(
        self,
        node_id: int,
        wall_ms: Callable[[], int] = SYSTEM_CLOCK.now_ms,
        max_clock_skew_ms: int = DEFAULT_MAX_CLOCK_SKEW_MS,
    ) -> None:
        if not 0 <= node_id <= MAX_NODE_ID:
            raise ValueError(f"node_id must be 0 to 2^32-1, got {node_id}")
        if max_clock_skew_ms < 0:
            raise ValueError(f"{MAX_CLOCK_SKEW_MS_CONFIG} must be 0 or more: {max_clock_skew_ms}")
        self.node_id = node_id
        self.max_clock_skew_ms = max_clock_skew_ms
        self._wall_ms = wall_ms
        self._l = 0
        self._c = 0
        self._lock = threading.Lock()

    @property
    def last(self) -> Timestamp:
        """The last timestamp given or adopted (0.0 at first)."""
        return Timestamp(self._l, self._c, self.node_id)

    def now(self) -> Timestamp:
        """A timestamp for a local event (a write): greater than any before it."""
        with self._lock:
            pt = self._wall_ms()
            if pt > self._l:
                self._l, self._c = pt, 0
            else:
                self._tick(self._c + 1)
            return Timestamp(self._l, self._c, self.node_id)

    def update(self, received: Timestamp) -> Timestamp:
        """Adopt a received timestamp (a record read): the clock moves past it. Raises
        ClockSkewError, changing nothing, when it is more than max.clock.skew.ms ahead."""
        with self._lock:
            pt = self._wall_ms()
            if received.physical_ms - pt > self.max_clock_skew_ms:
                raise ClockSkewError(received, pt, self.max_clock_skew_ms)
            l_old, lm = self._l, received.physical_ms
            l_new = max(l_old, lm, pt)
            if l_new == l_old and l_new == lm:
                c = max(self._c, received.logical) + 1
            elif l_new == l_old:
                c = self._c + 1
            elif l_new == lm:
                c = received.logical + 1
            else:
                c = 0
            self._l = l_new
            self._tick(c)
            return Timestamp(self._l, self._c, self.node_id)

    def _tick(self, c: int) -> None:
        """Set the counter to `c`; past its 32 bits, move to the next millisecond instead."""
        if c > MAX_LOGICAL:
            self._l, self._c = self._l + 1, 0
        else:
            self._c = c
