"""Preferred leaders come back after a broker restart: by ElectLeaders (confluent-kafka's
AdminClient, through whichever broker it picks: forwarded to the active controller) and by the
active controller's own periodic check (`auto.leader.rebalance.enable`).

Three nodes; topic `ledger`, RF 3, partitions 0, 1, 2 with preferred leaders 1, 2, 3. Broker 2
is stopped cleanly (SIGTERM: its leadership of partition 1 moves at once) and started again; once
it is back in the ISR of partition 1, that partition is still led by another broker until an
election gives it back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gregor.testing.cluster import LocalCluster
from tests.kraft_cluster.helpers import (
    FAST_REPLICATION,
    active_controller,
    all_brokers_seen,
    make_cluster,
    metadata_of,
    wait_for,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import ElectionType, KafkaError, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TOPIC = "ledger"
PREFERRED = {0: 1, 1: 2, 2: 3}


@pytest.fixture
def manual(tmp_path: Any) -> Iterator[LocalCluster]:
    config = {**FAST_REPLICATION, "auto.leader.rebalance.enable": "false"}
    with make_cluster(tmp_path, config) as c:
        yield c


@pytest.fixture
def automatic(tmp_path: Any) -> Iterator[LocalCluster]:
    config = {
        **FAST_REPLICATION,
        "leader.imbalance.check.interval.seconds": "1",
        "leader.imbalance.per.broker.percentage": "0",
    }
    with make_cluster(tmp_path, config) as c:
        yield c


def partitions_on(cluster: LocalCluster, node: int) -> dict[int, Any]:
    t = next((t for t in metadata_of(cluster, node).topics if t.name == TOPIC), None)
    return {} if t is None else {p.partition_index: p for p in t.partitions}


def leaders_everywhere(cluster: LocalCluster) -> dict[int, int] | None:
    """The leader of each partition when every running node agrees on them, else None."""
    seen = [
        {i: p.leader_id for i, p in partitions_on(cluster, n).items()} for n in cluster.running()
    ]
    return seen[0] if seen[0] and all(s == seen[0] for s in seen) else None


def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": cluster.bootstrap,
            "socket.timeout.ms": 5000,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )


def bounce_broker_2(cluster: LocalCluster) -> None:
    """Create the topic on three in-sync replicas, stop broker 2 cleanly, start it again and wait
    until it is back in every ISR, partition 1 being led by another broker."""
    active_controller(cluster)
    all_brokers_seen(cluster)
    spec = NewTopic(
        TOPIC,
        3,
        replica_assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]],
        config={"min.insync.replicas": "2"},
    )
    client = admin(cluster)  # kept: a collected AdminClient fails its futures
    client.create_topics([spec], operation_timeout=10, request_timeout=15)[TOPIC].result(20)

    def in_sync() -> bool:
        parts = partitions_on(cluster, 1)
        return len(parts) == 3 and all(sorted(p.isr_nodes) == [1, 2, 3] for p in parts.values())

    wait_for(
        "ledger in sync, led by its preferred leaders",
        lambda: in_sync() and leaders_everywhere(cluster) == PREFERRED,
    )
    cluster.stop_node(2)
    wait_for(
        "partition 1 led by another broker",
        lambda: partitions_on(cluster, 1)[1].leader_id in (1, 3),
    )
    cluster.start_node(2)
    wait_for("broker 2 back in every ISR", in_sync, 30)
    all_brokers_seen(cluster)


def code_of(result: Any) -> int:
    if result is None:
        return KafkaError.NO_ERROR
    err = result.args[0] if isinstance(result, Exception) else result
    return int(err.code())


def test_elect_leaders_gives_partition_1_back_to_broker_2(manual: LocalCluster) -> None:
    bounce_broker_2(manual)
    assert leaders_everywhere(manual) is not None and leaders_everywhere(manual)[1] != 2  # type: ignore[index]
    asked = [TopicPartition(TOPIC, i) for i in range(3)]
    client = admin(manual)
    results = client.elect_leaders(ElectionType.PREFERRED, asked).result(
        40
    )  # no kwargs: 2.16 rejects them
    codes = {tp.partition: code_of(err) for tp, err in results.items()}
    assert codes == {
        0: KafkaError.ELECTION_NOT_NEEDED,
        1: KafkaError.NO_ERROR,
        2: KafkaError.ELECTION_NOT_NEEDED,
    }
    wait_for(
        "every node sees broker 2 lead partition 1", lambda: leaders_everywhere(manual) == PREFERRED
    )


def test_the_controller_rebalances_leaders_by_itself(automatic: LocalCluster) -> None:
    bounce_broker_2(automatic)
    wait_for(
        "every node sees broker 2 lead partition 1 again",
        lambda: leaders_everywhere(automatic) == PREFERRED,
    )
