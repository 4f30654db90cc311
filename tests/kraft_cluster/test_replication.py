"""Partition data replication between three `gregor serve` processes (gregor.testing.cluster):
a replication-factor-3 topic with min.insync.replicas=2 loses no acknowledged acks=all record
when its leader is SIGKILLed mid-stream (an idempotent producer: exactly once, in order), the
killed broker comes back, truncates what only it had, catches up byte for byte and rejoins the
ISR; with two brokers of three stopped, acks=all is refused NOT_ENOUGH_REPLICAS while acks=1
is still acknowledged, and seen by consumers once a replica is back in the ISR."""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gregor.testing.cluster import LocalCluster
from tests.kraft_cluster.helpers import (
    FAST_REPLICATION,
    active_controller,
    all_brokers_seen,
    create_replicated,
    make_cluster,
    partition_state,
    wait_for,
)

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    with make_cluster(tmp_path, FAST_REPLICATION) as c:
        yield c


def log_bytes(cluster: LocalCluster, node: int, topic: str) -> bytes:
    """Every byte of the partition's segment files on `node`, in offset order: equal bytes mean
    equal batches (offsets, epochs, CRCs, records), whatever the segment boundaries."""
    files = sorted(glob.glob(os.path.join(cluster.data_dir(node), "logs", f"{topic}-0", "*.log")))
    out = b""
    for path in files:
        with open(path, "rb") as f:
            out += f.read()
    return out


def wait_rejoined(cluster: LocalCluster, node: int, leader: int, topic: str) -> None:
    """Wait until a restarted `node` is back in `topic`'s ISR with a log byte for byte the
    leader's."""
    wait_for(
        f"broker {node} back in the ISR",
        lambda: node in partition_state(cluster, leader, topic).isr_nodes,
        30,
    )
    wait_for(
        f"broker {node}'s log equal to the leader's",
        lambda: log_bytes(cluster, node, topic) == log_bytes(cluster, leader, topic),
        20,
    )


def consume_all(
    bootstrap: str, topic: str, idle_s: float = 3.0, timeout_s: float = 30.0
) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "checker",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - last < idle_s:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
            last = time.monotonic()
    consumer.close()
    return values


def stream_through(
    cluster: LocalCluster, topic: str, disrupt: Callable[[], None], total: int = 3000
) -> None:
    """Produce 0..total-1 to `topic` (acks=all, idempotent) as a stream, calling `disrupt` a
    third of the way in; every record must be acknowledged, once."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 30000,
            "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    acked: list[int] = []
    failed: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(int(msg.value()))
        else:
            failed.append(err)

    for i in range(total):
        while len(acked) + len(failed) < i - 300:  # a stream, not one burst: 300 in flight at most
            producer.poll(0.01)
        producer.produce(topic, value=str(i).encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
        if i == total // 3:
            disrupt()
    assert producer.flush(40) == 0
    assert failed == [] and sorted(acked) == list(range(total)), "idempotence: every record once"


def new_leader_among(cluster: LocalCluster, topic: str, candidates: list[int]) -> int:
    return int(
        wait_for(
            "a new leader",
            lambda: (
                (s := partition_state(cluster, candidates[0], topic))
                and s.leader_id in candidates
                and s.leader_id
            ),
        )
    )


def test_acknowledged_records_survive_a_killed_leader_which_then_catches_up(
    cluster: LocalCluster,
) -> None:
    active_controller(cluster)
    all_brokers_seen(cluster)
    create_replicated(cluster, "orders")
    leader = partition_state(cluster, 1, "orders").leader_id
    survivors = [n for n in cluster.ids if n != leader]
    # mid-stream: batches in flight, some appended by the leader but not replicated
    stream_through(cluster, "orders", lambda: cluster.kill(leader))
    new_leader = new_leader_among(cluster, "orders", survivors)
    values = [int(v) for v in consume_all(cluster.bootstrap_of(new_leader), "orders")]
    assert values == list(range(3000)), "every acknowledged record, once, in order"

    cluster.start_node(leader)  # it may hold batches no one else has: it truncates them
    wait_rejoined(cluster, leader, new_leader, "orders")
    assert log_bytes(cluster, survivors[0], "orders") == log_bytes(cluster, survivors[1], "orders")


def test_two_brokers_down_refuse_acks_all_and_acks_one_is_seen_once_one_returns(
    cluster: LocalCluster,
) -> None:
    ctrl = active_controller(cluster)
    all_brokers_seen(cluster)
    others = [n for n in cluster.ids if n != ctrl]
    # The partition's leader is the active controller: the two brokers stopped below are each
    # fenced (a clean stop asks for it) by a commit their own node still takes part in, so the
    # shrunk ISR reaches the leader although the metadata quorum is lost after the second stop.
    create_replicated(cluster, "payments", assignment=[ctrl, *others])
    assert partition_state(cluster, ctrl, "payments").leader_id == ctrl
    for node in others:
        cluster.stop_node(node)
    wait_for(
        "an ISR of the leader alone",
        lambda: partition_state(cluster, ctrl, "payments").isr_nodes == [ctrl],
    )

    results: list[Any] = []

    def send(acks: str, value: bytes) -> Any:
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": cluster.bootstrap_of(ctrl),
                "acks": acks,
                "retries": 0,
                "linger.ms": 0,
                "message.timeout.ms": 10000,
            }
        )
        producer.produce(
            "payments", value=value, partition=0, on_delivery=lambda e, m: results.append(e)
        )
        producer.flush(15)
        return results[-1]

    err = send("all", b"all")
    assert err is not None and err.code() == confluent_kafka.KafkaError.NOT_ENOUGH_REPLICAS, err
    assert send("1", b"one") is None, "acks=1 is acknowledged by the leader alone"
    # Below min.insync.replicas the HW stays (Kafka 3.7+): consumers see the write once a
    # replica is back in the ISR.
    assert consume_all(cluster.bootstrap_of(ctrl), "payments", idle_s=1.0) == []
    cluster.start_node(others[0])
    wait_for(
        f"broker {others[0]} back in the ISR",
        lambda: others[0] in partition_state(cluster, ctrl, "payments").isr_nodes,
        30,
    )
    assert consume_all(cluster.bootstrap_of(ctrl), "payments", idle_s=1.0) == [b"one"]


def test_a_leader_stopped_cleanly_hands_its_partitions_over(cluster: LocalCluster) -> None:
    """SIGTERM: a controlled shutdown moves the leadership to another ISR member at once (no
    session timeout to wait for); the stream goes on with nothing lost or doubled."""
    active_controller(cluster)
    all_brokers_seen(cluster)
    create_replicated(cluster, "invoices")
    leader = partition_state(cluster, 1, "invoices").leader_id
    others = [n for n in cluster.ids if n != leader]
    stream_through(cluster, "invoices", lambda: cluster.stop_node(leader), total=2000)
    new_leader = new_leader_among(cluster, "invoices", others)
    assert sorted(partition_state(cluster, new_leader, "invoices").isr_nodes) == others
    values = [int(v) for v in consume_all(cluster.bootstrap_of(new_leader), "invoices")]
    assert values == list(range(2000))
