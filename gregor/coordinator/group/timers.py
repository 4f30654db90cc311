"""Keyed deadlines for a sans-I/O state machine: `schedule(key, deadline_ms, fn)` replaces any
timer under that key (as Kafka's coordinator timer does), `cancel(key)` drops it, and `due(now)`
hands back the callbacks whose deadline has passed, earliest first. Nothing here reads a clock.

A min-heap of (deadline, sequence, key) with lazy deletion: rescheduling a key pushes a new
entry and the old one is skipped when it surfaces. A member heartbeating every 3 s with a 45 s
session leaves ~15 stale entries behind at most, so the heap stays within a small multiple of
the live timers; it is rebuilt if stale entries ever outnumber live ones by far.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable
from typing import Any

TimerFn = Callable[[int], Any]


class Timers:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._live: dict[Hashable, tuple[int, int, TimerFn]] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._live

    def deadline_of(self, key: Hashable) -> int | None:
        entry = self._live.get(key)
        return entry[0] if entry else None

    def schedule(self, key: Hashable, deadline_ms: int, fn: TimerFn) -> None:
        seq = next(self._seq)
        self._live[key] = (deadline_ms, seq, fn)
        heapq.heappush(self._heap, (deadline_ms, seq, key))
        if len(self._heap) > 4 * len(self._live) + 1024:
            self._heap = [(d, s, k) for k, (d, s, _) in self._live.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            entry = self._live.get(key)
            if entry is not None and entry[1] == seq:
                return
            heapq.heappop(heap)

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> tuple[Hashable, TimerFn] | None:
        """The earliest timer due at `now_ms`, removed; None if none is."""
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        _, _, fn = self._live.pop(key)
        return key, fn
