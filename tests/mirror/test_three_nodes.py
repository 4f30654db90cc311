"""`gregor mirror` between two 3-node gregor clusters (`gregor.testing.LocalCluster`), A->B with
replication factor 3: every record arrives once, in order, with its key, headers and timestamp;
the remote topic and the offset-syncs topic have three replicas; partitions added on A follow
to B and their records too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from gregor.testing.cluster import LocalCluster
from tests.kraft_cluster.helpers import FAST_REPLICATION, make_cluster
from tests.mirror.test_engine import Mirror, count, read_all, topics, wait_for

pytestmark = pytest.mark.cluster

CONFIG = {**FAST_REPLICATION, "group.initial.rebalance.delay.ms": "0"}
MM2 = """\
clusters = A, B
A.bootstrap.servers = {a}
B.bootstrap.servers = {b}
A->B.enabled = true
A->B.topics = orders
replication.factor = 3
refresh.topics.interval.seconds = 1
offset.flush.interval.ms = 200
emit.heartbeats.enabled = false
emit.checkpoints.enabled = false
"""


@pytest.fixture
def clusters(tmp_path: Path) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    with make_cluster(tmp_path / "a", CONFIG) as a, make_cluster(tmp_path / "b", CONFIG) as b:
        a.wait_for_brokers()
        b.wait_for_brokers()
        yield a, b


def produce(bootstrap: str, first: int, partitions: range, n: int) -> None:
    """Records `first`..`first + n - 1`, each with its own key, header and timestamp."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failed: list[Any] = []
    for i in range(first, first + n):
        p.produce(
            "orders",
            b"v%d" % i,
            b"k%d" % i,
            partition=partitions[i % len(partitions)],
            timestamp=1_700_000_000_000 + i,
            headers=[("i", b"%d" % i), ("empty", None)],
            on_delivery=lambda err, msg: err is None or failed.append(err),
        )
        p.poll(0)
    assert p.flush(30) == 0 and not failed, failed


def records(bootstrap: str, topic: str) -> dict[int, list[tuple[Any, ...]]]:
    """Per partition, in offset order: (key, value, headers, timestamp) of each record."""
    out: dict[int, list[tuple[Any, ...]]] = {}
    for m in sorted(read_all(bootstrap, topic), key=lambda m: (m.partition(), m.offset())):
        out.setdefault(m.partition(), []).append((m.key(), m.value(), m.headers(), m.timestamp()))
    return out


def copied(bootstrap: str, topic: str) -> int:
    """Records in `topic`, 0 while a partition's leader does not know it yet (a new topic or
    partition reaches the three nodes one after the other)."""
    try:
        return count(bootstrap, topic)
    except KafkaException:
        return 0


def replicas(bootstrap: str, topic: str) -> list[int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return [len(p.replicas) for p in md.topics[topic].partitions.values()]


def test_three_node_clusters_a_to_b_with_replication_factor_3(
    clusters: tuple[LocalCluster, LocalCluster], tmp_path: Path
) -> None:
    a, b = clusters
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    new = NewTopic("orders", 3, 3, config={"min.insync.replicas": "2"})
    for f in admin.create_topics([new]).values():
        f.result(timeout=30)
    produce(a.bootstrap, 0, range(3), 600)
    config = tmp_path / "mm2.properties"
    config.write_text(MM2.format(a=a.bootstrap, b=b.bootstrap))
    m = Mirror(config, tmp_path / "mirror.log").start()
    try:
        wait_for("A.orders on B", lambda: copied(b.bootstrap, "A.orders") >= 600, 60)
        assert replicas(b.bootstrap, "A.orders") == [3, 3, 3]
        assert replicas(a.bootstrap, "mm2-offset-syncs.B.internal") == [3]
        # two partitions more on A: B's copy grows, and their records follow
        for f in admin.create_partitions([NewPartitions("orders", 5)]).values():
            f.result(timeout=30)
        wait_for(
            "orders grown on every node of A",
            lambda: all(topics(a.bootstrap_of(i)).get("orders") == 5 for i in a.broker_ids),
        )
        produce(a.bootstrap, 600, range(5), 200)
        wait_for("A.orders grown on B", lambda: topics(b.bootstrap).get("A.orders") == 5, 60)
        wait_for("the new records on B", lambda: copied(b.bootstrap, "A.orders") >= 800, 60)
        assert replicas(b.bootstrap, "A.orders") == [3] * 5
        assert m.stop() == 0
    finally:
        if m.process is not None and m.process.poll() is None:
            m.kill()
    source = records(a.bootstrap, "orders")
    assert sum(map(len, source.values())) == 800 and len(source) == 5
    assert records(b.bootstrap, "A.orders") == source  # once each, in order, as written
    assert "Traceback" not in m.output()
