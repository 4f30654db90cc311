"""What the group and the transaction shard do alike (`CoordinatorShard`): the partition and
config they serve, their timers, and the records their operations and timers write, handed to
the runtime with each answer (`_done`) or after the timers due (`poll`).

Invariant: `_records` holds only what the current operation or poll wrote; both hand it over
and start it afresh.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from gregor.coordinator.group.timers import Timers

MAX_TIMERS_PER_POLL = 100_000  # a limit on one poll's work

R = TypeVar("R")
C = TypeVar("C")


class ShardBase(Generic[R, C]):
    def __init__(self, partition: int, config: C) -> None:
        self.partition = partition
        self.config = config
        self.timers = Timers()
        self.loaded = False
        self._records: list[R] = []

    def next_deadline_ms(self) -> int | None:
        return self.timers.next_deadline()

    def _done(self, answer: Any) -> tuple[list[R], Any]:
        """The records written so far, with the answer to send once they are replicated."""
        records, self._records = self._records, []
        return records, answer

    def poll(self, now_ms: int) -> list[R]:
        """Run every timer due at `now_ms`; the records they produce, to be appended."""
        for _ in range(MAX_TIMERS_PER_POLL):
            due = self.timers.pop_due(now_ms)
            if due is None:
                break
            due[1](now_ms)
        records, self._records = self._records, []
        return records
