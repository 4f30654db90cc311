"""The event queue of a simulation (the Raft one, cluster.py, and the data-plane one,
replication.py): one heap of (time, sequence number, kind, payload) and the simulated clock.

    class Simulation(Scheduler):
        def step(self) -> None:
            at, kind, payload = self.pop()
            self.now = max(self.now, at)      # (or push the event back: a paused host)
            ...
    sim.push(sim.now + 5, "deliver", src, dst, message)
    sim.run_until(sim.now + 1000)             # every event up to then; the clock moves there

Events at one time come out in the order they were pushed, so a run depends on nothing but
its seed. Time never goes back: `now` is the latest event's time (or `run_until`'s).
"""

from __future__ import annotations

import heapq
from typing import Any

Event = tuple[int, int, str, tuple[Any, ...]]


class Scheduler:
    def __init__(self) -> None:
        self.now = 0
        self._seq = 0
        self._heap: list[Event] = []

    def push(self, at: int, kind: str, *payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, kind, payload))

    def pop(self) -> tuple[int, str, tuple[Any, ...]]:
        """The earliest event (its time, kind and payload)."""
        at, _seq, kind, payload = heapq.heappop(self._heap)
        return at, kind, payload

    def pending(self) -> bool:
        return bool(self._heap)

    def step(self) -> None:
        """Handle the next event (the simulation's)."""
        raise NotImplementedError

    def run_until(self, time_ms: int) -> None:
        """Every event up to `time_ms`, then the clock at `time_ms`."""
        while self._heap and self._heap[0][0] <= time_ms:
            self.step()
        self.now = max(self.now, time_ms)
