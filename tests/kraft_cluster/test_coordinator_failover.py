"""An acknowledged offset commit survives the SIGKILL of its group coordinator's broker: with
`__consumer_offsets` at replication factor 3, the coordinator answers OffsetCommit only once
the followers have the record, so the broker that takes the partition over returns it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gregor.coordinator.group.records import partition_for
from gregor.testing.cluster import LocalCluster
from tests.kraft_cluster.helpers import (
    FAST_REPLICATION,
    active_controller,
    all_brokers_seen,
    create_replicated,
    make_cluster,
    metadata_of,
    wait_for,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

OFFSETS_PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    config = {**FAST_REPLICATION, "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}
    with make_cluster(tmp_path, config) as c:
        yield c


def offsets_leader(cluster: LocalCluster, node: int, group: str) -> Any:
    """(leader, replicas) of the group's `__consumer_offsets` partition in `node`'s Metadata."""
    index = partition_for(group, OFFSETS_PARTITIONS)
    for t in metadata_of(cluster, node).topics:
        if t.name == "__consumer_offsets" and len(t.partitions) == OFFSETS_PARTITIONS:
            p = next(p for p in t.partitions if p.partition_index == index)
            return p.leader_id, list(p.replica_nodes), list(p.isr_nodes)
    return None


def test_committed_offsets_survive_a_killed_coordinator(cluster: LocalCluster) -> None:
    active_controller(cluster)
    all_brokers_seen(cluster)
    create_replicated(cluster, "events")
    group = "survivor"
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(offsets=[TopicPartition("events", 0, 1)], asynchronous=False)
        state = wait_for(
            "the group's __consumer_offsets partition with three in-sync replicas",
            lambda: (s := offsets_leader(cluster, 1, group)) and len(s[2]) == 3 and s,
            30,
        )
        coordinator = state[0]
        for offset in range(2, 30):
            consumer.commit(offsets=[TopicPartition("events", 0, offset)], asynchronous=False)
        cluster.kill(coordinator)  # right after the last commit was acknowledged
    finally:
        consumer.close()

    survivors = [n for n in cluster.ids if n != coordinator]
    new_coordinator = int(
        wait_for(
            "a new coordinator",
            lambda: (
                (s := offsets_leader(cluster, survivors[0], group)) and s[0] in survivors and s[0]
            ),
            30,
        )
    )
    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_of(new_coordinator),
            "group.id": group,
            "enable.auto.commit": False,
        }
    )
    try:
        committed = wait_for(
            "the committed offset from the new coordinator",
            lambda: (
                (c := reader.committed([TopicPartition("events", 0)], timeout=5))
                and c[0].offset >= 0
                and c
            ),
            30,
        )
        assert committed[0].offset == 29, "the last acknowledged commit"
    finally:
        reader.close()
