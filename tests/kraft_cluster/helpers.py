"""Helpers of the multi-node tests: start a `LocalCluster` (`make_cluster`), wait for a condition,
ask one node itself (Metadata, CreateTopics, the controller it knows), and create topics with
confluent-kafka's AdminClient.

Configs: `FAST` (brokers fenced 6 s after their last heartbeat) for metadata tests;
`FAST_REPLICATION` (fenced after 3 s, out of the ISR after 2 s) for replication and failover.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.protocol import api_keys
from gregor.protocol.messages import CreateTopicsRequest, MetadataRequest
from gregor.testing.cluster import LocalCluster
from tests.kraft_broker.helpers import Raw

FAST = {"broker.session.timeout.ms": "6000"}
FAST_REPLICATION = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.backoff.ms": "200",
}


@contextmanager
def make_cluster(
    base_dir: str | Path, config: dict[str, str], nodes: int = 3, **options: Any
) -> Iterator[LocalCluster]:
    """A started cluster of `nodes` combined nodes (or brokers, with `controllers=N`) in
    `base_dir`, closed on leaving, also when it failed to start."""
    c = LocalCluster(nodes, base_dir=str(base_dir), config=config, **options)
    try:
        c.start()
        yield c
    finally:
        c.close()


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - a node may be down or electing
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def metadata_of(cluster: LocalCluster, node_id: int) -> Any:
    """The Metadata answer of one node itself (all topics)."""
    with Raw(cluster.bootstrap_of(node_id)) as raw:
        return raw.call(
            api_keys.METADATA, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False)
        )


def topics_on(cluster: LocalCluster, node_id: int) -> set[str]:
    return {t.name for t in metadata_of(cluster, node_id).topics}


def controller_of(cluster: LocalCluster, node_id: int) -> int:
    """The Raft leader as one node itself knows it (Metadata's `controller_id` is a live broker:
    the active controller only when that is a combined node)."""
    return cluster.leader_known_to(node_id)


def active_controller(cluster: LocalCluster) -> int:
    def agreed() -> int | None:
        seen = {controller_of(cluster, i) for i in cluster.running()}
        return seen.pop() if len(seen) == 1 and -1 not in seen else None

    return int(wait_for("an active controller all nodes agree on", agreed))


def all_brokers_seen(cluster: LocalCluster) -> None:
    """Every node lists the three brokers: a client's metadata refresh answered by a node that
    does not list a broker yet makes librdkafka drop that broker's connection, failing what is
    in flight on it (_DESTROY_BROKER)."""
    wait_for(
        "three unfenced brokers seen by every node",
        lambda: all(len(metadata_of(cluster, n).brokers) == 3 for n in cluster.ids),
        30,
    )


def partition_state(cluster: LocalCluster, node: int, topic: str) -> Any:
    """Partition 0 of `topic` as `node`'s Metadata answers it (None if unknown)."""
    t = next((t for t in metadata_of(cluster, node).topics if t.name == topic), None)
    return None if t is None or not t.partitions else t.partitions[0]


def raw_create(cluster: LocalCluster, node_id: int, name: str, timeout_ms: int = 5000) -> int:
    """CreateTopics sent to one node itself; its error code."""
    with Raw(cluster.bootstrap_of(node_id)) as raw:
        request = CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name=name, num_partitions=1, replication_factor=1
                )
            ],
            timeout_ms=timeout_ms,
        )
        return int(raw.call(api_keys.CREATE_TOPICS, 7, request).topics[0].error_code)


def admin(bootstrap: str) -> Any:
    # librdkafka's admin client sends to the controller_id of its last Metadata and, holding no
    # topics, does not refresh metadata when that node dies: a short refresh interval (or a new
    # client, as a creation loop makes after an error) finds the new controller.
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": 3000,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )


def create(client: Any, name: str, partitions: int = 1, timeout_s: float = 5.0, **kw: Any) -> None:
    futures = client.create_topics(
        [NewTopic(name, partitions, 1, **kw)],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    futures[name].result(timeout_s + 1)


def create_acknowledged(client: Any, name: str, timeout_s: float = 5.0) -> bool:
    """True if the creation was acknowledged (or the topic was already there from an earlier,
    unanswered attempt)."""
    try:
        create(client, name, timeout_s=timeout_s)
        return True
    except confluent_kafka.KafkaException as exc:
        return exc.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS


def create_replicated(
    cluster: LocalCluster, topic: str, assignment: list[int] | None = None
) -> None:
    """One partition on three replicas, min.insync.replicas=2; returns once all three are in
    the ISR as every running node sees it."""
    client = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 3000})
    config = {"min.insync.replicas": "2"}
    spec = (
        NewTopic(topic, 1, 3, config=config)
        if assignment is None
        else NewTopic(topic, 1, replica_assignment=[assignment], config=config)
    )
    for attempt in range(3):
        # librdkafka drops a broker handle (and fails its requests) when a Metadata answer
        # leaves that broker out, as a node still replaying an unfencing may: try again.
        try:
            client.create_topics([spec], operation_timeout=10, request_timeout=10)[topic].result(15)
            break
        except confluent_kafka.KafkaException as exc:
            if exc.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if attempt == 2:
                raise
            time.sleep(0.5)

    def in_sync() -> bool:
        states = [partition_state(cluster, n, topic) for n in cluster.running()]
        return all(
            s is not None and s.leader_id > 0 and sorted(s.isr_nodes) == [1, 2, 3] for s in states
        )

    wait_for(f"{topic} on three in-sync replicas", in_sync, 20)
