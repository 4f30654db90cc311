"""Replication throttles in a three-node cluster, set as Kafka's tools set them (rates on each
broker and as the cluster default, replica lists `*` on the topic): a follower that was down
catches up at about the throttled rate with the leader's side throttled alone
(`leader.replication.throttled.*`), then with the follower's alone
(`follower.replication.throttled.*`), and at full speed once the lists are removed. Its progress
is its replica's size on disk (DescribeLogDirs, asked of the follower itself); the rates are
printed and asserted loosely (under 3x the rate, and not caught up yet)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from gregor.protocol import api_keys
from gregor.protocol.messages import DescribeConfigsRequest, DescribeLogDirsRequest
from gregor.testing.cluster import LocalCluster
from gregor.testing.raw_client import RawClient
from tests.kraft_cluster.helpers import (
    FAST_REPLICATION,
    active_controller,
    all_brokers_seen,
    create_replicated,
    make_cluster,
    partition_state,
    wait_for,
)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cli"))
from cli_helpers import gregor  # noqa: E402

pytestmark = pytest.mark.cluster

TOPIC = "throttled"
TOPIC_RESOURCE = 2
RATE = 300_000  # bytes per second
RECORD = 10_000
RECORDS = 700  # 7 MB
# Small fetches, so a leader's answer is well under a second of the throttled rate.
CONFIG = {**FAST_REPLICATION, "replica.fetch.max.bytes": "65536"}


def replica_size(cluster: LocalCluster, node: int) -> int:
    """The size of the topic's partition on `node`, as the node itself reports it."""
    with RawClient(cluster.bootstrap_of(node), timeout_s=5) as raw:
        answer = raw.call(api_keys.DESCRIBE_LOG_DIRS, 1, DescribeLogDirsRequest(topics=None))
    return sum(
        p.partition_size
        for d in answer.results
        for t in d.topics
        if t.name == TOPIC
        for p in t.partitions
    )


def configs(cluster: LocalCluster, *args: str) -> None:
    run = gregor("configs", "alter", *args, "-b", cluster.bootstrap_of(1))
    assert run.returncode == 0, run.stderr


RATES = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LISTS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"


def set_rates(cluster: LocalCluster, live: list[int], remove: bool = False) -> None:
    """The rates on each live broker (by id, as `kafka-configs.sh --entity-name N`) and as the
    cluster default (for the one that is down)."""
    change = (
        ["--delete-config", ",".join(RATES)]
        if remove
        else ["--add-config", ",".join(f"{k}={RATE}" for k in RATES)]
    )
    for node in live:
        configs(cluster, "--entity-type", "brokers", "--entity-name", str(node), *change)
    configs(cluster, "--entity-type", "broker-defaults", *change)


def topic_config(cluster: LocalCluster, node: int, key: str) -> str | None:
    """The topic's config `key` as `node` itself knows it."""
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=TOPIC_RESOURCE, resource_name=TOPIC, configuration_keys=[key]
            )
        ]
    )
    with RawClient(cluster.bootstrap_of(node), timeout_s=5) as raw:
        [result] = raw.call(api_keys.DESCRIBE_CONFIGS, 4, request).results
    return next((c.value for c in result.configs if c.name == key), None)


def throttle_side(cluster: LocalCluster, side: int | None, follower: int) -> None:
    """Throttle every replica of the topic on the leader's side (0) or the follower's (1) only,
    or on neither (None). A new list is set, and known to the follower, before the other goes:
    the follower may learn of a change after the leader does."""
    topic = ["--entity-type", "topics", "--entity-name", TOPIC]
    if side is not None:
        configs(cluster, *topic, "--add-config", f"{LISTS[side]}=*")
        wait_for(
            f"broker {follower} knowing of the {LISTS[side]}",
            lambda: topic_config(cluster, follower, LISTS[side]) == "*",
        )
    others = [k for i, k in enumerate(LISTS) if i != side]
    configs(cluster, *topic, "--delete-config", ",".join(others))


def catch_up_rate(cluster: LocalCluster, node: int, full: int, seconds: float) -> tuple[float, int]:
    """(bytes per second, bytes now) of `node`'s replica over `seconds` from the first answer."""
    t0, s0 = wait_for(
        f"broker {node} answering", lambda: (time.monotonic(), replica_size(cluster, node))
    )
    t1, s1 = t0, s0
    while t1 < t0 + seconds and s1 < full:
        time.sleep(0.5)
        t1, s1 = time.monotonic(), replica_size(cluster, node)
    return (s1 - s0) / (t1 - t0), s1


def produce(cluster: LocalCluster) -> None:
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 65536}
    )
    value = os.urandom(RECORD)
    for _ in range(RECORDS):
        while True:
            try:
                producer.produce(TOPIC, value)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(30) == 0


def test_a_follower_catches_up_at_the_throttled_rate(tmp_path: Any) -> None:
    with make_cluster(tmp_path, CONFIG) as cluster:
        all_brokers_seen(cluster)
        create_replicated(cluster, TOPIC, assignment=[1, 2, 3])
        leader = partition_state(cluster, 1, TOPIC).leader_id
        controller = active_controller(cluster)
        down = next(n for n in (3, 2, 1) if n not in (leader, controller))
        live = [n for n in cluster.ids if n != down]
        cluster.kill(down)
        produce(cluster)
        wait_for(
            f"broker {down} out of the ISR",
            lambda: down not in partition_state(cluster, leader, TOPIC).isr_nodes,
        )
        full = replica_size(cluster, leader)
        assert full >= RECORDS * RECORD
        set_rates(cluster, live)
        rates = []
        for side, name in ((0, "leader"), (1, "follower")):
            if side == 0:
                throttle_side(cluster, side, leader)
                cluster.start_node(down)
            else:
                throttle_side(cluster, side, down)
            rate, size = catch_up_rate(cluster, down, full, 6)
            rates.append(rate)
            print(f"\n{name} throttle at {RATE} B/s: broker {down} caught up at {rate:.0f} B/s "
                  f"({rate / RATE:.2f}x the rate); {full - size} bytes left")  # fmt: skip
            assert size < full  # 7 MB take well over 12 s at 300 KB/s, with the changes between
        assert all(0 < r < 3 * RATE for r in rates), rates

        started = time.monotonic()
        throttle_side(cluster, None, down)
        wait_for(f"broker {down} caught up", lambda: replica_size(cluster, down) >= full, 60)
        print(f"unthrottled: the rest of {full} bytes in {time.monotonic() - started:.1f} s "
              "(with the config changes)")  # fmt: skip
        wait_for(
            f"broker {down} back in the ISR",
            lambda: down in partition_state(cluster, leader, TOPIC).isr_nodes,
        )
