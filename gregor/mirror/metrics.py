"""What a mirror process measures, per topic-partition, as MirrorMaker 2's MirrorSourceMetrics
and MirrorCheckpointMetrics do (sans-I/O: every call takes `now_ms`).

Per remote topic-partition (MM2 tags it with the topic's name on the target): records and
value bytes copied (a count since start and a rate), replication latency (the time the target
acknowledged a copy minus the source record's timestamp) and record age (the time the mirror
read it minus that timestamp), each as the last value and the min, max and average over a
window; and the lag in records (the source's end offset minus the next offset to copy). Per
group and partition: checkpoint latency (checkpoint written minus checkpoint made).

Windows are Kafka's `SampledStat`: 2 samples of 30 s; a value counts while its sample is one of
the two newest. Rates are a count over the window's span.

The source task calls `PartitionTracker.polled` once per consumed batch and
`PartitionTracker.acknowledged` once per round; nothing is done per record but the value sizes
summed in C. A batch is split into runs of one partition by probing a few records (the
consumer hands out a partition's records in chunks); a run whose offsets are not contiguous is
scanned record by record instead.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import methodcaller
from typing import Any

SAMPLE_MS = 30_000
SAMPLES = 2

TP = tuple[str, int]


@dataclass
class Sample:
    start_ms: int
    count: int = 0
    total: float = 0.0
    low: float = float("inf")
    high: float = float("-inf")


@dataclass
class WindowedStat:
    """last, min, max, avg and a rate over the newest SAMPLES samples of SAMPLE_MS."""

    samples: deque[Sample] = field(default_factory=lambda: deque(maxlen=SAMPLES))
    last: float | None = None
    first_ms: int | None = None

    def _current(self, now_ms: int) -> Sample:
        if not self.samples or now_ms - self.samples[-1].start_ms >= SAMPLE_MS:
            self.samples.append(Sample(now_ms))
        return self.samples[-1]

    def record(self, value: float, now_ms: int, count: int = 1) -> None:
        """`count` observations at once, all of `value` (a latency) or totalling it (a rate)."""
        if self.first_ms is None:
            self.first_ms = now_ms
        s = self._current(now_ms)
        s.count += count
        s.total += value
        s.low = min(s.low, value)
        s.high = max(s.high, value)
        self.last = value

    def _live(self, now_ms: int) -> list[Sample]:
        return [s for s in self.samples if now_ms - s.start_ms < SAMPLE_MS * SAMPLES]

    def min(self, now_ms: int) -> float | None:
        live = self._live(now_ms)
        return min(s.low for s in live) if live else None

    def max(self, now_ms: int) -> float | None:
        live = self._live(now_ms)
        return max(s.high for s in live) if live else None

    def avg(self, now_ms: int) -> float | None:
        live = self._live(now_ms)
        n = sum(s.count for s in live)
        return sum(s.total for s in live) / n if n else None

    def rate(self, now_ms: int) -> float:
        """Sum of the values per second over the window (Kafka's Rate: over the elapsed span,
        at least one sample long)."""
        live = self._live(now_ms)
        if not live:
            return 0.0
        start = live[0].start_ms
        if self.first_ms is not None:
            start = max(start, self.first_ms)
        span = max(now_ms - start, SAMPLE_MS * (SAMPLES - 1) if len(live) > 1 else 0, 1000)
        return sum(s.total for s in live) * 1000.0 / span


@dataclass
class PartitionMetrics:
    """One remote topic-partition of one flow."""

    records: int = 0
    bytes: int = 0
    record_rate: WindowedStat = field(default_factory=WindowedStat)
    byte_rate: WindowedStat = field(default_factory=WindowedStat)
    latency: WindowedStat = field(default_factory=WindowedStat)
    age: WindowedStat = field(default_factory=WindowedStat)


@dataclass(frozen=True)
class Run:
    """Consecutive records of one source partition in a consumed batch."""

    tp: TP
    last_offset: int
    count: int
    value_bytes: int
    first_timestamp: int
    last_timestamp: int


class MirrorMetrics:
    """Every measurement of one mirror process; tasks write from their threads, the exporter
    reads a snapshot from its own (one lock, taken once per call)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # (source, target, remote topic, partition) -> metrics
        self.partitions: dict[tuple[str, str, str, int], PartitionMetrics] = {}
        # (source, target, group, topic, partition) -> checkpoint latency
        self.checkpoints: dict[tuple[str, str, str, str, int], WindowedStat] = {}
        # (source, target, source topic, partition) -> lag in records
        self.lags: dict[tuple[str, str, str, int], int] = {}

    def _partition(self, key: tuple[str, str, str, int]) -> PartitionMetrics:
        m = self.partitions.get(key)
        if m is None:
            m = self.partitions[key] = PartitionMetrics()
        return m

    def polled(self, source: str, target: str, runs: Sequence[tuple[str, Run]], now_ms: int):
        """Records read: their age (remote topic, run) pairs."""
        with self.lock:
            for remote, run in runs:
                m = self._partition((source, target, remote, run.tp[1]))
                m.age.record(now_ms - run.first_timestamp, now_ms)
                if run.count > 1:
                    m.age.record(now_ms - run.last_timestamp, now_ms)

    def copied(self, source: str, target: str, runs: Sequence[tuple[str, Run]], now_ms: int):
        """Runs the target acknowledged at `now_ms`."""
        with self.lock:
            for remote, run in runs:
                m = self._partition((source, target, remote, run.tp[1]))
                m.records += run.count
                m.bytes += run.value_bytes
                m.record_rate.record(run.count, now_ms, count=run.count)
                m.byte_rate.record(run.value_bytes, now_ms, count=run.count)
                m.latency.record(now_ms - run.first_timestamp, now_ms)
                if run.count > 1:
                    m.latency.record(now_ms - run.last_timestamp, now_ms)

    def set_lags(self, source: str, target: str, lags: dict[TP, int]) -> None:
        with self.lock:
            for (topic, partition), lag in lags.items():
                self.lags[(source, target, topic, partition)] = lag

    def checkpoint_written(
        self, source: str, target: str, group: str, tp: TP, latency_ms: int, now_ms: int
    ) -> None:
        with self.lock:
            key = (source, target, group, tp[0], tp[1])
            stat = self.checkpoints.get(key)
            if stat is None:
                stat = self.checkpoints[key] = WindowedStat()
            stat.record(latency_ms, now_ms)


_VALUE = methodcaller("value")


def _value_bytes(batch: Sequence[Any], start: int, end: int) -> int:
    try:
        return sum(map(len, map(_VALUE, batch[start:end])))
    except TypeError:  # a tombstone among them
        return sum(len(m.value() or b"") for m in batch[start:end])


def _run_end(batch: Sequence[Any], start: int, tp: TP) -> int:
    """The end (exclusive) of the run of `tp` beginning at `start`: gallop, then bisect, on
    the probed records' topic-partitions."""
    n = len(batch)
    step = 1
    low = start  # batch[low] is known to be of tp
    while True:
        probe = min(n - 1, low + step)
        m = batch[probe]
        if probe == low or m.partition() != tp[1] or m.topic() != tp[0]:
            high = probe if probe != low else n
            break
        low = probe
        if probe == n - 1:
            return n
        step *= 2
    while high - low > 1:
        mid = (low + high) // 2
        m = batch[mid]
        if m.partition() == tp[1] and m.topic() == tp[0]:
            low = mid
        else:
            high = mid
    return low + 1


def runs(batch: Sequence[Any]) -> list[Run]:
    """The batch (records of the client: topic(), partition(), offset(), timestamp(), value())
    as runs of one partition, in order; errors must be filtered out before."""
    out: list[Run] = []
    start = 0
    n = len(batch)
    while start < n:
        first = batch[start]
        tp = (first.topic(), first.partition())
        end = _run_end(batch, start, tp)
        last = batch[end - 1]
        if last.offset() - first.offset() != end - 1 - start:
            end = _scan_end(batch, start, tp)  # gaps or another partition inside: be exact
            last = batch[end - 1]
        out.append(
            Run(
                tp,
                last.offset(),
                end - start,
                _value_bytes(batch, start, end),
                first.timestamp()[1],
                last.timestamp()[1],
            )
        )
        start = end
    return out


def _scan_end(batch: Sequence[Any], start: int, tp: TP) -> int:
    for i in range(start + 1, len(batch)):
        m = batch[i]
        if m.partition() != tp[1] or m.topic() != tp[0]:
            return i
    return len(batch)


class PartitionTracker:
    """One source task's runs between being read and being acknowledged by the target."""

    def __init__(
        self,
        metrics: MirrorMetrics,
        source: str,
        target: str,
        remote_topic: Callable[[str], str],
    ):
        self.metrics = metrics
        self.source = source
        self.target = target
        self.remote_topic = remote_topic
        self.remote_names: dict[str, str] = {}
        self.pending: dict[TP, deque[Run]] = {}

    def _remote(self, topic: str) -> str:
        name = self.remote_names.get(topic)
        if name is None:
            name = self.remote_names[topic] = self.remote_topic(topic)
        return name

    def polled(self, batch: Sequence[Any], now_ms: int) -> None:
        """A batch was read (and handed to the producer)."""
        found = runs(batch)
        for run in found:
            queue = self.pending.get(run.tp)
            if queue is None:
                queue = self.pending[run.tp] = deque()
            queue.append(run)
        self.metrics.polled(
            self.source, self.target, [(self._remote(r.tp[0]), r) for r in found], now_ms
        )

    def acknowledged(self, acked: Callable[[TP], int], now_ms: int) -> None:
        """Credit the runs whose last record the target acknowledged; `acked(tp)` is the last
        acknowledged source offset of a partition (-1 when none)."""
        done: list[tuple[str, Run]] = []
        for tp, queue in self.pending.items():
            if not queue:
                continue
            offset = acked(tp)
            while queue and queue[0].last_offset <= offset:
                done.append((self._remote(tp[0]), queue.popleft()))
        if done:
            self.metrics.copied(self.source, self.target, done, now_ms)

    def forget(self, tps: Iterable[TP]) -> None:
        """Partitions taken away: what was not acknowledged is copied again by their next
        owner, and counted there."""
        for tp in tps:
            self.pending.pop(tp, None)
