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

Byte counts are exact for runs of up to 32 records and estimated from every 8th record's size
in longer ones (exact when values have one size).

The source task calls `PartitionTracker.polled` once per consumed batch,
`PartitionTracker.acknowledged` once per round and `PartitionTracker.publish` once a second
(the only call that takes the process-wide lock); nothing is done per record but summing the
value sizes in C. A batch is split into runs of one partition by probing a few records (the
consumer hands out a partition's records in chunks); a run whose offsets are not contiguous is
scanned record by record instead.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


class Summary:
    """Count, total, min, max and last of observations (a task's, between two publishes)."""

    __slots__ = ("count", "total", "low", "high", "last")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.low = float("inf")
        self.high = float("-inf")
        self.last: float | None = None

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        if value < self.low:
            self.low = value
        if value > self.high:
            self.high = value
        self.last = value


class Gathered:
    """What a task measured of one partition since it last published."""

    __slots__ = ("records", "bytes", "latency", "age")

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.latency = Summary()
        self.age = Summary()


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

    def merge(self, summary: Summary, now_ms: int) -> None:
        """Observations gathered elsewhere since the last merge, as if recorded now."""
        if summary.count == 0:
            return
        if self.first_ms is None:
            self.first_ms = now_ms
        s = self._current(now_ms)
        s.count += summary.count
        s.total += summary.total
        s.low = min(s.low, summary.low)
        s.high = max(s.high, summary.high)
        self.last = summary.last

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


@dataclass(slots=True)
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
        # (source, target, group, topic, partition) -> when its last checkpoint was written
        self.checkpoint_written_ms: dict[tuple[str, str, str, str, int], int] = {}

    def _partition(self, key: tuple[str, str, str, int]) -> PartitionMetrics:
        m = self.partitions.get(key)
        if m is None:
            m = self.partitions[key] = PartitionMetrics()
        return m

    def publish(
        self, source: str, target: str, gathered: Mapping[TP, Gathered], now_ms: int
    ) -> None:
        """A task's measurements per remote topic-partition since its last publish."""
        with self.lock:
            for (remote, partition), g in gathered.items():
                m = self._partition((source, target, remote, partition))
                m.records += g.records
                m.bytes += g.bytes
                m.record_rate.record(g.records, now_ms, count=g.records)
                m.byte_rate.record(g.bytes, now_ms, count=g.records)
                m.latency.merge(g.latency, now_ms)
                m.age.merge(g.age, now_ms)

    def set_lags(self, source: str, target: str, lags: dict[TP, int]) -> None:
        with self.lock:
            for (topic, partition), lag in lags.items():
                self.lags[(source, target, topic, partition)] = lag

    def drop_lags(self, source: str, target: str, tps: Iterable[TP]) -> None:
        """Partitions this process no longer copies: their lag is its new owner's to say."""
        with self.lock:
            for topic, partition in tps:
                self.lags.pop((source, target, topic, partition), None)

    def checkpoint_written(
        self, source: str, target: str, group: str, tp: TP, latency_ms: int, now_ms: int
    ) -> None:
        with self.lock:
            key = (source, target, group, tp[0], tp[1])
            stat = self.checkpoints.get(key)
            if stat is None:
                stat = self.checkpoints[key] = WindowedStat()
            stat.record(latency_ms, now_ms)
            self.checkpoint_written_ms[key] = now_ms


EXACT_BYTES_UP_TO = 32
BYTES_STRIDE = 8


def _value_bytes(batch: Sequence[Any], start: int, end: int) -> int:
    """The records' value sizes (the client's records measure their value with len(), 0 for a
    tombstone, in C): exact for up to 32 records, else estimated from every 8th record's size,
    which is exact when the sizes are equal (measuring them all would cost the copy about 1%)."""
    count = end - start
    if count <= EXACT_BYTES_UP_TO:
        return sum(map(len, batch[start:end]))
    sampled = batch[start:end:BYTES_STRIDE]
    return sum(map(len, sampled)) * count // len(sampled)


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
    """The batch (records of the client: topic(), partition(), offset(), timestamp(), and len() the
    value's size)
    as runs of one partition, in order; errors must be filtered out before."""
    out: list[Run] = []
    start = 0
    n = len(batch)
    while start < n:
        first = batch[start]
        tp = (first.topic(), first.partition())
        last = batch[n - 1]
        end = n
        if last.offset() - first.offset() != n - 1 - start or not (
            last.partition() == tp[1] and last.topic() == tp[0]
        ):  # not the usual batch, one partition's records with no gap: find the run's end
            end = _run_end(batch, start, tp)
            last = batch[end - 1]
            if last.offset() - first.offset() != end - 1 - start:
                end = _scan_end(batch, start, tp)  # gaps or another partition inside
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


def _discount(found: list[Run], skipped: Mapping[TP, Sequence[int]]) -> None:
    """Take records that were not copied out of the runs of their partition, latest first."""
    for tp, (records, value_bytes) in skipped.items():
        for run in reversed(found):
            if run.tp != tp or not records:
                continue
            take = min(records, run.count)
            share = value_bytes * take // records
            run.count -= take
            run.value_bytes = max(0, run.value_bytes - share)
            records -= take
            value_bytes -= share


class PartitionTracker:
    """One source task's runs between being read and being acknowledged by the target, and
    what it measured since it last published to the process's `MirrorMetrics`."""

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
        self.pending: dict[TP, deque[Run]] = {}  # only partitions with runs in flight
        self.gathered: dict[TP, Gathered] = {}

    def _gathered(self, tp: TP) -> Gathered:
        g = self.gathered.get(tp)
        if g is None:
            g = self.gathered[tp] = Gathered()
        return g

    def polled(
        self,
        batch: Sequence[Any],
        now_ms: int,
        skipped: Mapping[TP, Sequence[int]] | None = None,
    ) -> None:
        """A batch was read (and handed to the producer): its records' age. `skipped`: per
        partition, [records, value bytes] of the batch that were not copied (a cycle's)."""
        found = runs(batch)
        if skipped:
            _discount(found, skipped)
        for run in found:
            queue = self.pending.get(run.tp)
            if queue is None:
                queue = self.pending[run.tp] = deque()
            queue.append(run)
            if not run.count:
                continue
            age = self._gathered(run.tp).age
            age.add(now_ms - run.first_timestamp)
            if run.count > 1:
                age.add(now_ms - run.last_timestamp)

    def acknowledged(self, acked: Callable[[TP], int], now_ms: int) -> None:
        """Count the runs whose last record the target acknowledged; `acked(tp)` is the last
        acknowledged source offset of a partition (-1 when none)."""
        if not self.pending:
            return
        emptied = []
        for tp, queue in self.pending.items():
            offset = acked(tp)
            if queue[0].last_offset > offset:
                continue
            g = self._gathered(tp)
            while queue and queue[0].last_offset <= offset:
                run = queue.popleft()
                if not run.count:
                    continue
                g.records += run.count
                g.bytes += run.value_bytes
                g.latency.add(now_ms - run.first_timestamp)
                if run.count > 1:
                    g.latency.add(now_ms - run.last_timestamp)
            if not queue:
                emptied.append(tp)
        for tp in emptied:
            del self.pending[tp]

    def publish(self, now_ms: int) -> None:
        """Hand what was measured to the process's metrics (about once a second)."""
        if not self.gathered:
            return
        by_remote = {}
        for (topic, partition), g in self.gathered.items():
            remote = self.remote_names.get(topic)
            if remote is None:
                remote = self.remote_names[topic] = self.remote_topic(topic)
            by_remote[(remote, partition)] = g
        self.gathered = {}
        self.metrics.publish(self.source, self.target, by_remote, now_ms)

    def forget(self, tps: Iterable[TP]) -> None:
        """Partitions taken away: what was not acknowledged is copied again by their next
        owner, and counted there."""
        for tp in tps:
            self.pending.pop(tp, None)
