"""Replication throttles, sans I/O: the throttled-replicas lists as Kafka parses and validates
them, the leader's and follower's decision (never an in-sync replica, only a throttled partition,
only while the rate is above the bound), Kafka's SimpleRate, and the follower fetcher leaving a
throttled, lagging partition out of its Fetch against a real leader partition in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from gregor.metadata import config_defs
from gregor.metadata.config_defs import ConfigError
from gregor.replication.follower import FetcherConfig, FollowerFetcher
from gregor.security.replication_quotas import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    UNLIMITED,
    ReplicationQuota,
    SimpleRate,
    replicas_problem,
    throttled_partitions,
)

from .helpers import NOW, Cluster, host, manager, produce, registration, serve_fetch

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("*", True),
        ("", True),
        ("0:1", True),
        (" 0:1 , 1:2,12:3", True),
        ("0:1,", True),  # an empty item is allowed, as Kafka's pattern ([0-9]+:[0-9]+)? says
        ("0", False),
        ("0:x", False),
        ("*,0:1", False),
        ("all", False),
    ],
)
def test_throttled_replicas_are_validated_as_kafka_does(value: str, valid: bool) -> None:
    assert (replicas_problem(value.split(",")) is None) is valid
    d = config_defs.TOPIC_CONFIGS[LEADER_REPLICAS]
    if valid:
        d.parse(value)
    else:
        with pytest.raises(ConfigError, match="literal '\\*'"):
            d.parse(value)


def test_throttled_partitions_are_those_naming_this_broker() -> None:
    assert throttled_partitions("*", 1) is None
    assert throttled_partitions("0:1, 1:2 ,2:1", 1) == frozenset({0, 2})
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions("", 3) == frozenset()


def test_the_rates_are_dynamic_broker_configs_and_the_windows_static() -> None:
    for key in ("leader.replication.throttled.rate", "follower.replication.throttled.rate"):
        d = config_defs.BROKER_CONFIGS[key]
        assert not d.read_only and d.parse(d.default) == UNLIMITED and d.parse("500000") == 500000
        with pytest.raises(ConfigError):
            d.parse("-1")
    for key in ("replication.quota.window.num", "replication.quota.window.size.seconds"):
        assert config_defs.BROKER_CONFIGS[key].read_only


def test_simple_rate_counts_the_time_since_the_oldest_sample_at_least_one() -> None:
    r = SimpleRate(num=11, window_ms=1000)
    r.record(1000, 0)
    assert r.window_size_ms(0) == 1000 and r.measure(0) == 1000.0  # not 1000 / 10 s
    r.record(1000, 1500)
    assert r.window_size_ms(4000) == 4000 and r.measure(4000) == 500.0


class Quota:
    """A quota whose bound and topic configs a test sets."""

    def __init__(
        self, key: str = LEADER_REPLICAS, replicas: str = "*", bound: int = 100, broker: int = 1
    ) -> None:
        self.bound = bound
        self.configs = {"t": {key: replicas}}
        self.q = ReplicationQuota(
            broker, key, lambda: self.bound, self.configs.get, num=11, window_ms=1000
        )


@pytest.mark.parametrize(
    ("in_sync", "replicas", "recorded", "bound", "throttled"),
    [
        (False, "*", 200, 100, True),  # out of sync, throttled, over: waits
        (True, "*", 200, 100, False),  # in sync: never
        (False, "", 200, 100, False),  # not a throttled partition
        (False, "0:2", 200, 100, False),  # throttled on another broker only
        (False, "0:1", 200, 100, True),
        (False, "1:1", 200, 100, False),  # another partition of the topic
        (False, "*", 100, 100, False),  # at the bound is within it
        (False, "*", 200, UNLIMITED, False),  # no rate set
        (False, "*", 0, 100, False),  # nothing recorded yet
    ],
)
def test_should_throttle(
    in_sync: bool, replicas: str, recorded: int, bound: int, throttled: bool
) -> None:
    quota = Quota(replicas=replicas, bound=bound)
    if recorded:
        quota.q.record(recorded, NOW)
    assert quota.q.should_throttle(in_sync, "t", 0, NOW + 500) is throttled
    assert not quota.q.should_throttle(False, "unknown-topic", 0, NOW + 500)


def test_the_bound_is_read_when_used_so_a_new_rate_applies_at_once() -> None:
    quota = Quota(bound=100)
    quota.q.record(1000, NOW)
    assert quota.q.exceeded(NOW)
    quota.bound = 2000
    assert not quota.q.exceeded(NOW)
    quota.bound = 100
    assert quota.q.exceeded(NOW + 9_000)  # 1000 B over 9 s
    assert not quota.q.exceeded(NOW + 11_000)  # over 11 s: the 1000 bytes are forgotten


def test_a_lagging_throttled_follower_leaves_the_partition_out_of_its_fetch(
    tmp_path: Path,
) -> None:
    cluster = Cluster()
    leader_rm, follower_rm = manager(tmp_path, 1, cluster), manager(tmp_path, 2, cluster)
    reg = registration(1, 0, isr=(1,), replicas=(1, 2))
    leader = host(leader_rm, reg)
    follower = host(follower_rm, reg)
    for _ in range(4):
        produce(leader, 3, acks=1)
    assert leader.high_watermark == 12
    quota = Quota(FOLLOWER_REPLICAS, replicas="*", bound=50, broker=2)
    fetcher = FollowerFetcher(1, FetcherConfig(replica_id=2, partition_max_bytes=1), quota.q)
    fetcher.add(follower, 0)
    now = NOW

    def pump() -> bool:
        built = fetcher.build_request(now, cluster.epochs[2])
        if built is None:
            return False
        request, sent = built
        fetcher.handle_response(sent, serve_fetch(leader, request, now), now)
        return True

    assert pump()  # nothing recorded yet: one batch (a partition max of 1 byte: one batch)
    assert follower.log.log_end_offset == 3
    assert quota.q.measure(now) > 50  # its bytes were recorded
    assert not pump()  # lagging (the leader's HW is 12), throttled, over the rate: left out
    quota.configs["t"] = {FOLLOWER_REPLICAS: "0:3"}  # throttled on broker 3 only
    assert pump() and follower.log.log_end_offset == 6
    quota.configs["t"] = {FOLLOWER_REPLICAS: "0:2"}
    assert not pump()
    now += 60_000  # the rate's window has passed: under the bound again
    assert pump() and follower.log.log_end_offset == 9
    assert not pump()
    quota.bound = UNLIMITED
    assert pump() and pump() and follower.log.log_end_offset == 12
    quota.bound = 50
    # Caught up (lag 0 as of the last answer with records): in sync, never left out.
    assert quota.q.exceeded(now) and pump() and pump()
