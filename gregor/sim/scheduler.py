"""The event queue of a simulation (the Raft one, cluster.py, and the data-plane one,
replication.py): one heap of (time, sequence number, kind, payload), the simulated clock, and
what the run leaves behind (its trace digest, its last events, its counts).

    class Simulation(Scheduler):
        def step(self) -> None:
            at, kind, payload = self.pop()
            self.advance(at, max_events)      # (or push the event back: a paused host)
            self.record("what", "happened")
            ...
    sim.push(sim.now + 5, "deliver", src, dst, message)
    sim.run_until(sim.now + 1000)             # every event up to then; the clock moves there

Events at one time come out in the order they were pushed, so a run depends on nothing but
its seed. Time never goes back: `now` is the latest event's time (or `run_until`'s).
"""

from __future__ import annotations

import hashlib
import heapq
from collections import deque
from typing import Any

from gregor.sim.invariants import InvariantViolation

Event = tuple[int, int, str, tuple[Any, ...]]


class Scheduler:
    def __init__(self, recent: int) -> None:
        self.now = 0
        self.events = 0
        self.faults: dict[str, int] = {}  # what the run counts: faults injected, and more
        self._seq = 0
        self._heap: list[Event] = []
        self._trace = hashlib.sha256()
        self._unhashed: list[str] = []  # trace entries not yet in `_trace` (hashed in bulk)
        self._recent: deque[tuple[Any, ...]] = deque(maxlen=recent)

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

    def advance(self, at: int, max_events: int) -> None:
        """One more event, at `at`: the clock moves there (never back). More than `max_events`
        is a finding: something loops."""
        self.now = max(self.now, at)
        self.events += 1
        if self.events > max_events:
            raise InvariantViolation("bounded run", f"more than {max_events} events")

    def record(self, *event: Any) -> None:
        """An entry of the trace: two runs with the same digest did the same, event for event."""
        entry = (self.now, *event)
        self._recent.append(entry)
        unhashed = self._unhashed
        unhashed.append(repr(entry))
        if len(unhashed) >= 512:
            self._hash_unhashed()

    def _hash_unhashed(self) -> None:
        """Hash the entries kept back: the digest is the same as of each entry on its own."""
        self._trace.update("".join(self._unhashed).encode())
        self._unhashed.clear()

    def count(self, name: str, n: int = 1) -> None:
        self.faults[name] = self.faults.get(name, 0) + n

    def outcome(self, invariant: str | None, detail: str | None) -> dict[str, Any]:
        """The fields of a `RunResult` every simulation fills alike."""
        self._hash_unhashed()
        return {
            "ok": invariant is None,
            "events": self.events,
            "time_ms": self.now,
            "faults": dict(self.faults),
            "trace_digest": self._trace.hexdigest(),
            "invariant": invariant,
            "detail": detail,
            "last_events": [" ".join(str(x) for x in e) for e in self._recent],
        }
