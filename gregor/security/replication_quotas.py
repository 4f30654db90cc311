"""Replication throttles as Kafka applies them: which replicas are throttled, the byte rate of
their traffic, and whether a fetch of one must wait. Pure: every time is a `now_ms` argument;
the broker's configs come through two lookups the owner gives (the metadata, in memory).

Configs (Kafka's names):
  leader.replication.throttled.rate / follower.replication.throttled.rate   dynamic broker
      configs, bytes per second of throttled replication traffic this broker sends as a leader
      / receives as a follower (unset: Long.MAX_VALUE, no throttle);
  leader.replication.throttled.replicas / follower.replication.throttled.replicas   topic
      configs, `*` (every replica) or `partition:broker,...`: which partitions are throttled on
      the broker named, leading (the leader's list names the leader) or following;
  replication.quota.window.num / replication.quota.window.size.seconds   the rate's window
      (11 samples of 1 s).

Decisions (Kafka's ReplicaManager.shouldLeaderThrottle and the replica fetcher's
shouldFollowerThrottle): a partition waits when its replica is not in sync, the partition is
throttled here, and the quota is exceeded (rate above the bound), in that order, so in-sync
replicas are never held back (no ISR thrashing) and the common case reads no config. What is
recorded: every byte of a throttled partition, in sync or not, so the total stays under the
rate. The leader records the record bytes it sends, the follower those it appends.

Rate (Kafka's SimpleRate): the sum of the samples over the time since the oldest one, at least
one sample's length, unlike a client quota's rate, which counts at least num - 1 samples.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gregor.security.quotas import Rate

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
UNLIMITED = (1 << 63) - 1  # Long.MAX_VALUE: the rates' default
ALL = "*"
_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")
PROBLEM = "must be the literal '*' or a list of replicas in the format [partitionId]:[brokerId],..."


def replicas_problem(items: list[str]) -> str | None:
    """Why a throttled-replicas value (split at commas) is invalid; None when it is valid
    (Kafka's ThrottledReplicaListValidator)."""
    proposed = [i.strip() for i in items]
    if "".join(proposed) == ALL or all(_REPLICA.fullmatch(i) for i in proposed):
        return None
    return PROBLEM


def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions a throttled-replicas value throttles on `broker_id`; None for `*` (all)."""
    value = value.strip()
    if value == ALL:
        return None
    out = set()
    for item in value.split(","):
        partition, _, broker = item.strip().partition(":")
        if broker and int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class SimpleRate(Rate):
    """Kafka's SimpleRate: the window is the time since the oldest sample, at least one sample."""

    def window_size_ms(self, now_ms: int) -> int:
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self.samples), default=now_ms)
        return max(now_ms - oldest, self.window_ms)


@dataclass
class ReplicationQuota:
    """One direction's throttle on one broker (Kafka's ReplicationQuotaManager).

    `bound_of()`: the rate's bound now (the dynamic config; UNLIMITED when unset).
    `configs_of(topic)`: the topic's configs (None for a topic not known)."""

    broker_id: int
    replicas_key: str  # LEADER_REPLICAS or FOLLOWER_REPLICAS
    bound_of: Callable[[], int]
    configs_of: Callable[[str], Mapping[str, str] | None]
    num: int = 11
    window_ms: int = 1000

    def __post_init__(self) -> None:
        self.rate = SimpleRate(self.num, self.window_ms)
        self._parsed: dict[str, frozenset[int] | None] = {}  # config value -> partitions

    def is_throttled(self, topic: str, index: int) -> bool:
        """Does the topic's throttled-replicas config name this partition on this broker?"""
        configs = self.configs_of(topic)
        value = configs.get(self.replicas_key) if configs is not None else None
        if not value:
            return False
        try:
            partitions = self._parsed[value]
        except KeyError:
            if len(self._parsed) >= 1024:
                self._parsed.clear()
            partitions = self._parsed[value] = throttled_partitions(value, self.broker_id)
        return partitions is None or index in partitions

    def active(self) -> bool:
        """Is a rate set? (Without one nothing is recorded: nothing would read it.)"""
        return self.bound_of() < UNLIMITED

    def exceeded(self, now_ms: int) -> bool:
        """Is the measured rate above the bound?"""
        bound = self.bound_of()
        if bound >= UNLIMITED or not self.rate.samples:
            return False
        return self.rate.measure(now_ms) > bound

    def record(self, size: int, now_ms: int) -> None:
        self.rate.record(size, now_ms)

    def should_throttle(self, in_sync: bool, topic: str, index: int, now_ms: int) -> bool:
        """Must this replica's fetch of the partition wait? Never when it is in sync."""
        return not in_sync and self.is_throttled(topic, index) and self.exceeded(now_ms)

    def measure(self, now_ms: int) -> float:
        """The rate now, in bytes per second (logs and tests)."""
        return self.rate.measure(now_ms) if self.rate.samples else 0.0


def unthrottled(replicas_key: str) -> ReplicationQuota:
    """A quota that never throttles (no configs): the default of a replica manager."""
    return ReplicationQuota(-1, replicas_key, lambda: UNLIMITED, lambda topic: None)
