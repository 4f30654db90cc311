"""Metrics and health of a 3-node cluster through a real Prometheus, before and after a node
is SIGKILLed, and after it comes back."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.testing.cluster import LocalCluster, free_ports
from tests.metrics.helpers import (
    HAVE_PROMETHEUS,
    Prometheus,
    get,
    host_port,
    prometheus,
    wait_for,
)

pytestmark = pytest.mark.cluster

CONFIG = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.backoff.ms": "200",
}
URP = "sum(kafka_server_replicamanager_underreplicatedpartitions)"


def _ready(url: str) -> bool:
    try:
        return get(url + "/health/ready")[0] == 200
    except OSError:
        return False


@pytest.mark.skipif(not HAVE_PROMETHEUS, reason="no prometheus binary")
def test_under_replicated_partitions_after_a_sigkill_and_back(tmp_path: Path) -> None:
    cluster = LocalCluster(3, base_dir=str(tmp_path / "cluster"), config=CONFIG)
    # each node's metrics on a port of its own that a restart keeps (port 0 would pick anew)
    for node, port in zip(cluster.nodes.values(), free_ports(3), strict=True):
        node.config["metrics.listener"] = f"http://127.0.0.1:{port}"
    with cluster:
        urls = {i: cluster.nodes[i].metrics_url for i in cluster.ids}
        assert all(urls.values())
        for i, url in urls.items():
            assert url is not None
            wait_for(f"node {i} ready", lambda url=url: _ready(url))
            assert get(url + "/health/live")[0] == 200
        cluster.wait_for_brokers()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for f in admin.create_topics([NewTopic("replicated", 3, 3)]).values():
            f.result(timeout=30)
        targets = [host_port(u) for u in urls.values() if u is not None]
        with prometheus(tmp_path, targets) as prom:
            prom.wait_value("sum(kafka_server_replicamanager_partitioncount)", 9)
            prom.wait_value("sum(kafka_server_replicamanager_leadercount)", 3)
            prom.wait_value(URP, 0)
            prom.wait_value("sum(kafka_controller_kafkacontroller_activecontrollercount)", 1)
            prom.wait_value("max(kafka_controller_kafkacontroller_globalpartitioncount)", 3)
            prom.wait_value('count(up{job="gregor"} == 1)', 3)

            victim = next(i for i in cluster.ids if i != cluster.active_controller())
            cluster.kill(victim)
            # its partitions are led by the others, with an ISR of two of three replicas
            prom.wait_value(URP, 3)
            prom.wait_value("max(kafka_controller_kafkacontroller_fencedbrokercount)", 1)
            prom.wait_value('count(up{job="gregor"} == 0)', 1)
            shrinks = prom.value("sum(kafka_server_replicamanager_isrshrinks_total)")
            for i, url in urls.items():
                if i != victim:
                    assert url is not None and _ready(url)
                    assert get(url + "/health/live")[0] == 200

            cluster.start_node(victim)
            back = cluster.nodes[victim].metrics_url
            assert back is not None and back == urls[victim]
            wait_for(f"node {victim} ready again", lambda: _ready(back))
            prom.wait_value(URP, 0)
            prom.wait_value("max(kafka_controller_kafkacontroller_fencedbrokercount)", 0)
            expands = prom.value("sum(kafka_server_replicamanager_isrexpands_total)")
            assert expands is not None and expands >= 1
            assert shrinks is not None
            _lag_of_every_partition_by_a_join(cluster, admin, prom)


def _lag_of_every_partition_by_a_join(
    cluster: LocalCluster, admin: AdminClient, prom: Prometheus
) -> None:
    """One replica per partition, spread over the nodes: the group's coordinator hosts at most
    some of them, and the README's PromQL join still gives every partition's lag."""
    admin.create_topics([NewTopic("spread", 3, 1)])["spread"].result(timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for p in range(3):
        for i in range(5):
            producer.produce("spread", b"%d" % i, partition=p)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "joined"})
    try:
        consumer.commit(
            offsets=[TopicPartition("spread", p, 2) for p in range(3)], asynchronous=False
        )
    finally:
        consumer.close()
    joined = (
        'max by (topic, partition) (kafka_log_log_logendoffset{topic="spread"}) - on (topic, '
        'partition) group_right kafka_consumergroup_group_offset{group="joined"}'
    )
    lags = wait_for(
        "the lag of every partition",
        lambda: (found := prom.query(joined)) and len(found) == 3 and found,
    )
    assert sorted((r["metric"]["partition"], r["value"][1]) for r in lags) == [
        ("0", "3"),
        ("1", "3"),
        ("2", "3"),
    ]


def test_a_controller_only_node_serves_the_controller_and_raft_metrics(tmp_path: Path) -> None:
    cluster = LocalCluster(
        1,
        controllers=1,
        base_dir=str(tmp_path / "cluster"),
        config={**CONFIG, "metrics.listener": "http://127.0.0.1:0"},
    )
    with cluster:
        controller, broker = cluster.controller_ids[0], cluster.broker_ids[0]
        url = cluster.nodes[controller].metrics_url
        assert url is not None
        wait_for("the controller ready", lambda: _ready(url))
        cluster.wait_for_brokers()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("counted", 4, 1)])["counted"].result(timeout=30)

        def scraped() -> dict[str, float]:
            status, text = get(url + "/metrics")
            assert status == 200
            wanted = {
                "kafka_controller_kafkacontroller_activecontrollercount",
                "kafka_controller_kafkacontroller_globaltopiccount",
                "kafka_controller_kafkacontroller_globalpartitioncount",
                "kafka_controller_kafkacontroller_activebrokercount",
                "kafka_server_raft_metrics_current_leader",
            }
            return {
                line.split(" ")[0]: float(line.split(" ")[1])
                for line in text.splitlines()
                if line.split(" ")[0] in wanted
            }

        found = wait_for(
            "the topic in the controller's metrics",
            lambda: (
                (m := scraped()).get("kafka_controller_kafkacontroller_globaltopiccount") == 1 and m
            ),
        )
        assert found["kafka_controller_kafkacontroller_activecontrollercount"] == 1
        assert found["kafka_controller_kafkacontroller_globalpartitioncount"] == 4
        assert found["kafka_controller_kafkacontroller_activebrokercount"] == 1
        assert found["kafka_server_raft_metrics_current_leader"] == controller
        # a controller has no partitions, groups or client listener: none of their families
        text = get(url + "/metrics")[1]
        assert "kafka_server_replicamanager_" not in text
        assert "kafka_server_socket_server_metrics_connection_count" in text
        for family in (
            "broker_connection_accept_rate",
            "connection_accept_rate{listener=",
            "connection_creation_rate{listener=",
        ):
            assert f"kafka_server_socket_server_metrics_{family}" in text, family
        assert cluster.nodes[broker].metrics_url is not None
