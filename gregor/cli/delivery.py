"""What `gregor produce` knows of the lines it sends: which fit the topic's `max.message.bytes`,
which were delivered, which failed, by line number.

A line too large for the topic is reported and not sent: sent, it would fail, and with it the
good lines librdkafka had put in the same batch (the broker refuses a whole batch). Its size is
that of the one-record batch it would make, as the broker measures (batch header included):
a line of 1,000 bytes with no key or header is a 1,070-byte batch. With compression the client's batch is
smaller than that, so only the broker can judge: `fits` says yes and a refusal comes back as a
failed delivery of that line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gregor.protocol.records.records import build_batch

# A one-record batch is the record's bytes plus at most this much (header 61, record framing,
# varints), and per header at most HEADER_OVERHEAD_BOUND: a record whose bytes stay this far below
# the limit fits without building its batch (1,000 bytes of value: a 1,070-byte batch).
BATCH_OVERHEAD_BOUND = 128
HEADER_OVERHEAD_BOUND = 10
SHOWN_FAILURES = 5  # failed deliveries reported line by line; the rest are counted


def batch_size(key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]) -> int:
    """The size of the uncompressed one-record batch, as the broker counts it."""
    return len(build_batch([(key, value, headers)]))


@dataclass
class Deliveries:
    """Counts of what was read, refused before sending, delivered and failed; the lines of the
    first failures, to report."""

    topic: str
    limit: int | None  # the topic's max.message.bytes; None: unknown, or compressed batches
    read: int = 0
    delivered: int = 0
    too_large: int = 0
    failures: list[str] = field(default_factory=list)

    def fits(self, number: int, key: bytes | None, value: bytes, headers: Any) -> bool:
        """False (and the line reported) if line `number` cannot fit max.message.bytes."""
        if self.limit is None:
            return True
        raw = len(value) + len(key or b"") + sum(len(k) + len(v) for k, v in headers)
        if raw + BATCH_OVERHEAD_BOUND + HEADER_OVERHEAD_BOUND * len(headers) <= self.limit:
            return True
        size = batch_size(key, value, headers)
        if size <= self.limit:
            return True
        self.too_large += 1
        self.failures.append(
            f"line {number} ({size} bytes as a record batch) is larger than max.message.bytes "
            f"of {self.topic} ({self.limit} bytes): not sent"
        )
        return False

    def on_delivery(self, number: int, size: int) -> Any:
        """The delivery callback of line `number` (`size` bytes)."""

        def report(err: Any, _msg: Any) -> None:
            if err is None:
                self.delivered += 1
            else:
                self.failed(number, size, err.str() if hasattr(err, "str") else str(err))

        return report

    def failed(self, number: int, size: int, why: str) -> None:
        self.failures.append(f"line {number} ({size} bytes) was not delivered: {why}")

    @property
    def not_delivered(self) -> int:
        return self.read - self.delivered

    def report_lines(self) -> list[str]:
        """What to tell the user at the end, on stderr: one line per failure (the first few)."""
        shown = self.failures[:SHOWN_FAILURES]
        more = len(self.failures) - len(shown)
        if more > 0:
            shown.append(f"and {more} more line(s) not sent or not delivered")
        return shown
