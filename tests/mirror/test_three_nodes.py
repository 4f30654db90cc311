"""`gregor mirror` between two 3-node gregor clusters (`gregor.testing.LocalCluster`), with
replication factor 3. A->B: every record arrives once, in order, with its key, headers and
timestamp; the remote topic and the offset-syncs topic have three replicas; partitions added on
A follow to B and their records too. A<->B: the same both ways, never looping, with topic
configs and partition increases following, and heartbeats and checkpoints in MirrorMaker 2's
record formats."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from gregor.mirror import translate_offsets
from gregor.mirror.formats import Checkpoint, Heartbeat
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


@pytest.fixture(scope="module")
def clusters(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    base = tmp_path_factory.mktemp("clusters")
    with make_cluster(base / "a", CONFIG) as a, make_cluster(base / "b", CONFIG) as b:
        a.wait_for_brokers()
        b.wait_for_brokers()
        yield a, b


def produce(bootstrap: str, first: int, partitions: range, n: int, topic: str = "orders") -> None:
    """Records `first`..`first + n - 1`, each with its own key, header and timestamp."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failed: list[Any] = []
    # the producer's own metadata must show every partition written to (a partition just added
    # reaches the nodes one after the other): else librdkafka fails its records as unknown
    wait_for(
        f"{topic}'s partitions in the producer's metadata",
        lambda: len(p.list_topics(topic, timeout=10).topics[topic].partitions) > partitions[-1],
    )
    for i in range(first, first + n):
        p.produce(
            topic,
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


MM2_BOTH_WAYS = """\
clusters = A, B
A.bootstrap.servers = {a}
B.bootstrap.servers = {b}
A->B.enabled = true
A->B.topics = trades
B->A.enabled = true
B->A.topics = refunds
replication.factor = 3
refresh.topics.interval.seconds = 1
offset.flush.interval.ms = 200
emit.heartbeats.interval.seconds = 1
emit.checkpoints.interval.seconds = 1
"""


def create(bootstrap: str, topic: str, partitions: int, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2", **config})
    for f in admin.create_topics([new]).values():
        f.result(timeout=30)


def decoded(bootstrap: str, topic: str, kind: Any) -> list[Any]:
    """The records of `topic` (one partition) in order, as MirrorMaker 2's record type `kind`
    (Heartbeat, Checkpoint)."""
    ordered = sorted(read_all(bootstrap, topic), key=lambda m: m.offset())
    return [kind.from_record(m.key(), m.value()) for m in ordered]


def test_three_node_clusters_both_ways_with_configs_heartbeats_and_checkpoints(
    clusters: tuple[LocalCluster, LocalCluster], tmp_path: Path
) -> None:
    a, b = clusters
    create(a.bootstrap, "trades", 2, **{"retention.ms": "3600000"})
    create(b.bootstrap, "refunds", 2)
    produce(a.bootstrap, 0, range(2), 300, "trades")
    produce(b.bootstrap, 0, range(2), 200, "refunds")
    commit(a.bootstrap, "billing", "trades", {0: 100, 1: 50})
    config = tmp_path / "mm2.properties"
    config.write_text(MM2_BOTH_WAYS.format(a=a.bootstrap, b=b.bootstrap))
    m = Mirror(config, tmp_path / "mirror.log").start()
    try:
        wait_for("A.trades on B", lambda: copied(b.bootstrap, "A.trades") >= 300, 60)
        wait_for("B.refunds on A", lambda: copied(a.bootstrap, "B.refunds") >= 200, 60)
        assert replicas(b.bootstrap, "A.trades") == [3, 3]
        assert topic_config(b.bootstrap, "A.trades", "retention.ms") == "3600000"
        # a partition more on B: A's copy grows, and the new partition's records follow
        grow = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in grow.create_partitions([NewPartitions("refunds", 3)]).values():
            f.result(timeout=30)
        wait_for(
            "refunds grown on every node of B",
            lambda: all(topics(b.bootstrap_of(i)).get("refunds") == 3 for i in b.broker_ids),
        )
        produce(b.bootstrap, 200, range(3), 30, "refunds")
        wait_for("B.refunds grown on A", lambda: topics(a.bootstrap).get("B.refunds") == 3, 60)
        wait_for("the new records on A", lambda: copied(a.bootstrap, "B.refunds") >= 230, 60)
        # billing's checkpoints on B, translated through the offset syncs
        wait_for(
            "billing's checkpoints",
            lambda: len(translate_offsets(b.bootstrap, "A", "billing")) == 2,
        )
        wait_for("A.heartbeats on B", lambda: copied(b.bootstrap, "A.heartbeats") >= 1, 60)
        wait_for("B.heartbeats on A", lambda: copied(a.bootstrap, "B.heartbeats") >= 1, 60)
        assert m.stop() == 0
    finally:
        if m.process is not None and m.process.poll() is None:
            m.kill()
    assert records(b.bootstrap, "A.trades") == records(a.bootstrap, "trades")
    assert records(a.bootstrap, "B.refunds") == records(b.bootstrap, "refunds")
    names = set(topics(a.bootstrap)) | set(topics(b.bootstrap))
    assert not [n for n in names if n.startswith(("A.B.", "B.A.", "A.A.", "B.B."))]
    # MirrorMaker 2's record formats: each side's heartbeats, and the other side's mirrored
    assert {(h.source_cluster_alias, h.target_cluster_alias) for h in decoded(
        b.bootstrap, "heartbeats", Heartbeat)} == {("A", "B")}  # fmt: skip
    assert {(h.source_cluster_alias, h.target_cluster_alias) for h in decoded(
        b.bootstrap, "A.heartbeats", Heartbeat)} == {("B", "A")}  # fmt: skip
    checkpoints = decoded(b.bootstrap, "A.checkpoints.internal", Checkpoint)
    latest = {(c.topic, c.partition): c for c in checkpoints}  # the last of each partition
    assert {tp: c.upstream_offset for tp, c in latest.items()} == {
        ("A.trades", 0): 100,
        ("A.trades", 1): 50,
    }
    translated = translate_offsets(b.bootstrap, "A", "billing")
    for c in latest.values():
        # translation never skips a record (how close it gets is tests/mirror/test_offsets.py's
        # and the single-node failover test's subject)
        assert c.group == "billing" and 0 < c.downstream_offset <= c.upstream_offset
        assert translated[TopicPartition(c.topic, c.partition)] == c.downstream_offset
    assert "Traceback" not in m.output()


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    c.close()


def topic_config(bootstrap: str, topic: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    return str(future.result(timeout=30)[name].value)
