"""Followers replicate through incremental fetch sessions (KIP-227) on three `gregor serve`
processes: the leader holds one session per follower (its FetchSessionCache gauges), an
acks=all stream loses nothing when a follower is SIGKILLed mid-stream, and the restarted
follower, whose session died with it, starts a new one with a full Fetch, catches up byte for
byte and rejoins the ISR; idle followers stay in the ISR. The killed follower's old session stays in the leader's cache, a
cache entry by id as in Kafka, until it is evicted."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from gregor.testing.cluster import LocalCluster, free_ports
from tests.kraft_cluster.helpers import (
    FAST_REPLICATION,
    active_controller,
    all_brokers_seen,
    create_replicated,
    partition_state,
    wait_for,
)
from tests.kraft_cluster.test_replication import (
    consume_all,
    log_bytes,
    stream_through,
    wait_rejoined,
)

pytestmark = pytest.mark.cluster

SESSIONS = "kafka_server_fetchsessioncache_numincrementalfetchsessions"
CACHED = "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    c = LocalCluster(3, base_dir=str(tmp_path), config=FAST_REPLICATION)
    # each node's metrics on a port of its own that a restart keeps
    for node, port in zip(c.nodes.values(), free_ports(3), strict=True):
        node.config["metrics.listener"] = f"http://127.0.0.1:{port}"
    with c:
        c.wait_for_brokers()
        yield c


def metric(cluster: LocalCluster, node: int, name: str) -> float:
    url = cluster.nodes[node].metrics_url
    assert url is not None
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not served by node {node}")


def test_followers_replicate_through_sessions_and_a_restarted_one_starts_anew(
    cluster: LocalCluster,
) -> None:
    active_controller(cluster)
    all_brokers_seen(cluster)
    create_replicated(cluster, "sessions")
    leader = partition_state(cluster, 1, "sessions").leader_id
    followers = [n for n in cluster.ids if n != leader]
    # both followers fetch from the leader in a session of their own
    wait_for("two follower sessions", lambda: metric(cluster, leader, SESSIONS) == 2)
    assert metric(cluster, leader, CACHED) >= 2
    victim = followers[0]
    stream_through(cluster, "sessions", lambda: cluster.kill(victim))
    values = [int(v) for v in consume_all(cluster.bootstrap_of(leader), "sessions")]
    assert values == list(range(3000)), "every acknowledged record, once, in order"
    cluster.start_node(victim)  # its session is gone with it: a full Fetch, a new session
    wait_for("the restarted follower's new session", lambda: metric(cluster, leader, SESSIONS) == 3)
    wait_rejoined(cluster, victim, leader, "sessions")
    assert log_bytes(cluster, followers[1], "sessions") == log_bytes(cluster, leader, "sessions")
    # idle, the followers' incremental Fetches name nothing and are answered nothing, yet they
    # keep them caught up: still in the ISR after twice replica.lag.time.max.ms
    time.sleep(2 * int(FAST_REPLICATION["replica.lag.time.max.ms"]) / 1000 + 0.5)
    assert sorted(partition_state(cluster, leader, "sessions").isr_nodes) == sorted(cluster.ids)
