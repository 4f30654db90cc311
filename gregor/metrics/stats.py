"""The counters the broker's hot paths increment (plain integer additions, nothing else) and
the small windows read at scrape time. Sans-I/O: times are given by the caller.

`BrokerTopicStats` holds one `TopicCounters` per topic (Kafka's BrokerTopicMetrics); the
all-topics series is their sum at scrape time plus what deleted topics had counted, so it never
goes back. `RequestStats` counts requests per (API key, version) and keeps histograms of their
times in milliseconds. `Window` keeps the last values of a measure (commit latency, event-loop
lag) for their average and maximum.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from typing import Any

# Upper bounds (ms) of the request time histograms, Prometheus' `le` labels; +Inf is implied.
TIME_BUCKETS_MS = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
)  # fmt: skip  (floats: bisect compares a float with floats, faster than with ints)


class TopicCounters:
    """One topic's BrokerTopicMetrics meters, as counts since the broker started."""

    __slots__ = (
        "messages_in", "bytes_in", "bytes_out", "failed_produce", "failed_fetch",
        "total_produce", "total_fetch",
    )  # fmt: skip

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.failed_produce = 0
        self.failed_fetch = 0
        self.total_produce = 0
        self.total_fetch = 0

    def add(self, other: TopicCounters) -> None:
        for name in TopicCounters.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class BrokerTopicStats:
    """`stats.topic(name).messages_in += n` on the produce path; `remove(name)` when the topic
    is deleted (its counts stay in the all-topics sum)."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounters] = {}
        self.removed = TopicCounters()

    def topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    def remove(self, name: str) -> None:
        counters = self.topics.pop(name, None)
        if counters is not None:
            self.removed.add(counters)

    def all_topics(self) -> TopicCounters:
        total = TopicCounters()
        total.add(self.removed)
        for counters in self.topics.values():
            total.add(counters)
        return total


class Histogram:
    """Counts per bucket (not cumulative; Prometheus' cumulative form is made at scrape time),
    the sum and the count of observations."""

    __slots__ = ("buckets", "sum", "count")

    def __init__(self) -> None:
        self.buckets = [0] * (len(TIME_BUCKETS_MS) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.buckets[bisect_left(TIME_BUCKETS_MS, value)] += 1
        self.sum += value
        self.count += 1

    def observe_many(self, values: list[float]) -> None:
        """Observe every value (sorts `values`): a sort and a bisection per bucket, cheaper
        than a bisection per value."""
        values.sort()
        below = 0
        for i, bound in enumerate(TIME_BUCKETS_MS):
            upto = bisect_right(values, bound, below)
            self.buckets[i] += upto - below
            below = upto
        self.buckets[-1] += len(values) - below
        self.sum += sum(values)
        self.count += len(values)

    def merged(self, other: Histogram) -> Histogram:
        out = Histogram()
        out.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        out.sum, out.count = self.sum + other.sum, self.count + other.count
        return out

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count of observations <= le) for every bound and +Inf."""
        out, running = [], 0
        for bound, n in zip((*TIME_BUCKETS_MS, float("inf")), self.buckets, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else str(float(bound)), running))
        return out


FOLD_AT = 1024  # sampled requests kept before their times go into the histograms


# Request times are measured for one request in SAMPLE_EVERY of each API and version (the
# first, then every SAMPLE_EVERY-th): six histograms per request cost more than the produce
# path can spare (bench/results/metrics-2026-12-06.md).
SAMPLE_EVERY = 8


class RequestCounters:
    """One (API, version)'s requests: `requests` counts every one; a sampled request whose
    response has left (or that needed none) is appended to `done` as its instants
    (runtime/response_timing.py `Timing`), folded into Kafka's six time histograms (ms) every
    FOLD_AT sampled requests and at scrape time (`times`)."""

    __slots__ = ("requests", "done", "histograms")

    PARTS = ("total", "requestqueue", "local", "remote", "responsequeue", "responsesend")

    def __init__(self) -> None:
        self.requests = 0
        self.done: list[list[Any]] = []
        self.histograms = {part: Histogram() for part in self.PARTS}

    def fold(self) -> None:
        done, self.done = self.done, []
        if not done:
            return
        h = self.histograms
        # [counters, received, called, returned, ready, its turn, sent]
        h["total"].observe_many([(t[6] - t[1]) * 1000.0 for t in done])
        h["requestqueue"].observe_many([(t[2] - t[1]) * 1000.0 for t in done])
        h["local"].observe_many([(t[3] - t[2]) * 1000.0 for t in done])
        h["remote"].observe_many([(t[4] - t[3]) * 1000.0 for t in done])
        h["responsequeue"].observe_many([(t[5] - t[4]) * 1000.0 for t in done])
        h["responsesend"].observe_many([(t[6] - t[5]) * 1000.0 for t in done])

    @property
    def count(self) -> int:
        return self.requests

    def times(self) -> dict[str, Histogram]:
        """Kafka's RequestMetrics histograms of this API and version, by part."""
        self.fold()
        return self.histograms


class RequestStats:
    def __init__(self) -> None:
        self.by_api: dict[tuple[int, int], RequestCounters] = {}

    def of(self, api_key: int, version: int) -> RequestCounters:
        key = (api_key, version)
        counters = self.by_api.get(key)
        if counters is None:
            counters = self.by_api[key] = RequestCounters()
        return counters

    def new(self, key: tuple[int, int]) -> RequestCounters:
        counters = self.by_api[key] = RequestCounters()
        return counters


class Window:
    """The last `size` values of a measure: their average and maximum (None: none yet)."""

    def __init__(self, size: int = 64) -> None:
        self.values: deque[float] = deque(maxlen=size)
        self.count = 0
        self.sum = 0.0

    def record(self, value: float) -> None:
        self.values.append(value)
        self.count += 1
        self.sum += value

    @property
    def avg(self) -> float | None:
        return sum(self.values) / len(self.values) if self.values else None

    @property
    def max(self) -> float | None:
        return max(self.values) if self.values else None

    @property
    def last(self) -> float | None:
        return self.values[-1] if self.values else None
