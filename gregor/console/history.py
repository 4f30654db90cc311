"""Rates and lag over time, from samples of log end offsets and committed offsets (sans-I/O:
`add` takes the sample's `now_ms`).

A sample is reduced at once to sums, so memory follows topics and groups, not partitions:
per topic the sum of its partitions' log end offsets, per group the sum of its committed
offsets and its lag (sum over its partitions of end - committed). Messages in per second is
the growth of a topic's sum between two samples over the time between them; consumed per
second the growth of the groups' committed sums. Per partition, a group's lag is kept for its
first PARTITION_SERIES partitions (by topic and number), for its chart. A sum that shrinks (a topic deleted and made
again, offsets reset back) counts as 0, not as a negative rate.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

PARTITION_SERIES = 64


@dataclass(frozen=True)
class Sample:
    now_ms: int
    topic_ends: dict[str, int]
    group_committed: dict[str, int]
    group_lag: dict[str, int]
    partition_lag: dict[str, dict[tuple[str, int], int]]


def reduce(
    now_ms: int,
    ends: dict[tuple[str, int], int],
    committed: dict[str, dict[tuple[str, int], int]],
) -> Sample:
    topic_ends: dict[str, int] = {}
    for (topic, _), end in ends.items():
        topic_ends[topic] = topic_ends.get(topic, 0) + max(0, end)
    sums, lags, per_partition = {}, {}, {}
    for group, offsets in committed.items():
        lag = {tp: max(0, ends.get(tp, o) - o) for tp, o in offsets.items()}
        sums[group] = sum(offsets.values())
        lags[group] = sum(lag.values())
        per_partition[group] = {tp: lag[tp] for tp in sorted(lag)[:PARTITION_SERIES]}
    return Sample(now_ms, topic_ends, sums, lags, per_partition)


def _growth(new: dict[str, int], old: dict[str, int]) -> dict[str, int]:
    return {k: max(0, v - old[k]) for k, v in new.items() if k in old}


class History:
    def __init__(self, max_samples: int) -> None:
        assert max_samples >= 2
        self.samples: deque[Sample] = deque(maxlen=max_samples)

    def add(self, sample: Sample) -> None:
        if self.samples and sample.now_ms <= self.samples[-1].now_ms:
            return  # a clock that stood still gives no rate
        self.samples.append(sample)

    def _pairs(self) -> list[tuple[Sample, Sample]]:
        s = list(self.samples)
        return list(zip(s, s[1:], strict=False))

    def topic_rates(self) -> dict[str, float]:
        """Messages in per second of each topic over the last interval."""
        if len(self.samples) < 2:
            return {}
        old, new = self.samples[-2], self.samples[-1]
        dt = (new.now_ms - old.now_ms) / 1000
        return {t: n / dt for t, n in _growth(new.topic_ends, old.topic_ends).items()}

    def throughput(self) -> list[tuple[int, float, float]]:
        """(time, produced per second, consumed per second) of each interval."""
        out = []
        for old, new in self._pairs():
            dt = (new.now_ms - old.now_ms) / 1000
            produced = sum(_growth(new.topic_ends, old.topic_ends).values())
            consumed = sum(_growth(new.group_committed, old.group_committed).values())
            out.append((new.now_ms, produced / dt, consumed / dt))
        return out

    def topic_throughput(self, topic: str) -> list[tuple[int, float]]:
        """Messages in per second of `topic` in each interval that saw it at both ends."""
        out = []
        for old, new in self._pairs():
            if topic in old.topic_ends and topic in new.topic_ends:
                grown = max(0, new.topic_ends[topic] - old.topic_ends[topic])
                out.append((new.now_ms, grown / ((new.now_ms - old.now_ms) / 1000)))
        return out

    def lag(self, group: str) -> list[tuple[int, float]]:
        """The group's total lag at each sample that saw it."""
        return [(s.now_ms, float(s.group_lag[group])) for s in self.samples if group in s.group_lag]

    def partition_lag(self, group: str, top: int) -> dict[tuple[str, int], list[tuple[int, float]]]:
        """The lag over time of the group's `top` partitions with the most lag now."""
        if not self.samples or group not in self.samples[-1].partition_lag:
            return {}
        now = self.samples[-1].partition_lag[group]
        chosen = sorted(now, key=lambda tp: (-now[tp], tp))[:top]
        return {
            tp: [(s.now_ms, float(s.partition_lag[group][tp])) for s in self.samples
                 if tp in s.partition_lag.get(group, {})]
            for tp in chosen
        }  # fmt: skip

    def latest_lag(self) -> dict[str, int]:
        return dict(self.samples[-1].group_lag) if self.samples else {}
