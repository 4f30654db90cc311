"""Pacing for `gregor perf produce --throughput N`, as Kafka's ThroughputThrottler: no I/O and no
clock of its own; the caller passes `now_ms` and waits what it is told.

Record i (counting from 0) is due at start + i * 1000 / N ms, so after any wait the records sent
never exceed N per second on average since the start. A sender that fell behind (a full
producer queue, a slow poll) catches up at full speed until it is back on schedule, as Kafka's
does; it never runs ahead by more than the one record it is about to send.
"""

from __future__ import annotations


class ThroughputThrottler:
    def __init__(self, records_per_sec: float, start_ms: float) -> None:
        # records_per_sec < 0 (Kafka's -1) means no cap; 0 would never send, so it is refused.
        if records_per_sec == 0:
            raise ValueError("--throughput must be positive, or -1 for no limit")
        self.records_per_sec = records_per_sec
        self.start_ms = start_ms

    @property
    def unlimited(self) -> bool:
        return self.records_per_sec < 0

    def due_ms(self, sent: int) -> float:
        """When the record after `sent` records may go."""
        return self.start_ms + sent * 1000.0 / self.records_per_sec

    def wait_ms(self, sent: int, now_ms: float) -> float:
        """How long to wait before sending the next record, having sent `sent` (0 if it may go
        now)."""
        if self.unlimited:
            return 0.0
        return max(0.0, self.due_ms(sent) - now_ms)
