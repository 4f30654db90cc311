"""The figures of a perf run: a latency histogram and the summary `gregor perf` prints.

`LatencyHistogram` counts latencies in microseconds in buckets laid out as HdrHistogram's: values
below 256 us each have a bucket of their own; above, every power of two [2^k, 2^(k+1)) is cut into
128 equal buckets, so a bucket is never wider than 1/128 of the values it holds. A percentile is
the upper end of the bucket holding that rank, capped at the largest value recorded, so it is
never below the true value and at most 0.8% above it. Memory is fixed (SLOTS counters, about
7,500 for values up to 2^64 us) whatever the number of records; count, sum and max are exact.

Percentiles are nearest-rank: p of n values is the ceil(p/100 * n)-th smallest (p50 of 1..100
is 50, p99.9 of 1..1000 is 999).
"""

from __future__ import annotations

import math
from typing import Any

SUB_BITS = 7
SUB_COUNT = 1 << SUB_BITS  # buckets per power of two above 2 * SUB_COUNT
MAX_SHIFT = 64 - SUB_BITS - 1
SLOTS = (MAX_SHIFT + 2) * SUB_COUNT
MB = 1024 * 1024  # Kafka's perf tools count MB as 2^20 bytes


def bucket_of(value_us: int) -> int:
    """The bucket index of a value: the value itself below 256; above, its shift times 128 plus
    its top 8 bits (128..255), which continues the exact range without a gap."""
    shift = max(0, value_us.bit_length() - SUB_BITS - 1)
    return shift * SUB_COUNT + (value_us >> shift)


def bucket_high(index: int) -> int:
    """The largest value that falls in bucket `index`."""
    shift = max(0, index // SUB_COUNT - 1)
    top = index - shift * SUB_COUNT
    return ((top + 1) << shift) - 1


class LatencyHistogram:
    """Latencies in microseconds (negative ones count as 0: a consumer whose clock is behind the
    producer's)."""

    def __init__(self) -> None:
        self.counts = [0] * SLOTS
        self.count = 0
        self.total_us = 0
        self.max_us = 0

    def record_us(self, value_us: int) -> None:
        value_us = min(max(0, value_us), (1 << 64) - 1)
        self.counts[bucket_of(value_us)] += 1
        self.count += 1
        self.total_us += value_us
        if value_us > self.max_us:
            self.max_us = value_us

    def mean_us(self) -> float:
        return self.total_us / self.count if self.count else 0.0

    def percentiles_us(self, ps: list[float]) -> list[int]:
        """Nearest-rank percentiles for `ps` (each 0 < p <= 100), in one walk of the buckets;
        all 0 for an empty histogram."""
        if self.count == 0:
            return [0] * len(ps)
        # p * count first: 99.9 / 100 * 1000 is 999.0000000000001, whose ceiling is 1000
        ranks = [max(1, math.ceil(p * self.count / 100)) for p in ps]
        order = sorted(range(len(ps)), key=lambda i: ranks[i])
        out = [0] * len(ps)
        seen = 0
        j = 0
        for index, n in enumerate(self.counts):
            if not n:
                continue
            seen += n
            while j < len(order) and ranks[order[j]] <= seen:
                out[order[j]] = min(bucket_high(index), self.max_us)
                j += 1
            if j == len(order):
                break
        return out


PERCENTILES = {"p50": 50.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def summary(records: int, size_bytes: int, elapsed_ms: float, hist: LatencyHistogram) -> dict:
    """The final figures, with the field names `--output json` documents."""
    seconds = elapsed_ms / 1000 if elapsed_ms > 0 else 0.0
    latency: dict[str, Any] = {"avg": round(hist.mean_us() / 1000, 3)}
    for name, value in zip(
        PERCENTILES, hist.percentiles_us(list(PERCENTILES.values())), strict=True
    ):
        latency[name] = value / 1000
    latency["max"] = hist.max_us / 1000
    return {
        "records": records,
        "bytes": size_bytes,
        "elapsed_ms": round(elapsed_ms, 3),
        "records_per_sec": round(records / seconds, 3) if seconds else 0.0,
        "mb_per_sec": round(size_bytes / MB / seconds, 4) if seconds else 0.0,
        "latency_ms": latency,
    }
