"""Transactions across the nodes of a three-node cluster (replication factor 1), with
confluent-kafka: a transaction over partitions led by all three brokers commits (its markers
reach the other brokers as WriteTxnMarkers) and read_committed sees every record; an aborted one
stays invisible to read_committed and visible to read_uncommitted; offsets sent to a transaction
whose coordinator is another node than the group's are committed with it; and a transaction
whose partition leader was killed while it was open commits once that broker is back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gregor.coordinator.group.records import partition_for
from gregor.protocol import api_keys
from gregor.protocol.messages import FindCoordinatorRequest
from gregor.testing.cluster import LocalCluster
from tests.kraft_broker.helpers import Raw
from tests.kraft_cluster.helpers import (
    FAST,
    active_controller,
    admin,
    create,
    make_cluster,
    metadata_of,
    wait_for,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

INTERNAL = 3  # partitions of __transaction_state and __consumer_offsets: one led by each node
CONFIG = {
    **FAST,
    "transaction.state.log.num.partitions": str(INTERNAL),
    "offsets.topic.num.partitions": str(INTERNAL),
}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: Any) -> Iterator[LocalCluster]:
    """One cluster for the tests that leave it whole."""
    with make_cluster(tmp_path_factory.mktemp("txn-cluster"), CONFIG) as c:
        ready(c)
        yield c


@pytest.fixture
def own(tmp_path: Any) -> Iterator[LocalCluster]:
    with make_cluster(tmp_path, CONFIG) as c:
        ready(c)
        yield c


def leaders(cluster: LocalCluster, topic: str, node: int | None = None) -> dict[int, int]:
    """Partition -> leader, as a node's Metadata says (the active controller's by default)."""
    md = metadata_of(cluster, node or active_controller(cluster))
    t = next((t for t in md.topics if t.name == topic), None)
    return {} if t is None else {p.partition_index: p.leader_id for p in t.partitions}


def ready(cluster: LocalCluster) -> None:
    """Three unfenced brokers, and both internal topics made (FindCoordinator creates them; asked
    of the active controller) with one partition led by each node."""
    ctrl = active_controller(cluster)
    wait_for("three unfenced brokers", lambda: len(metadata_of(cluster, ctrl).brokers) == 3)
    with Raw(cluster.bootstrap_of(ctrl)) as raw:
        for key_type in (0, 1):
            raw.call(
                api_keys.FIND_COORDINATOR,
                4,
                FindCoordinatorRequest(key_type=key_type, coordinator_keys=["x"]),
            )
    for topic in ("__consumer_offsets", "__transaction_state"):
        wait_for(
            f"{topic} led by every node",
            lambda t=topic: sorted(leaders(cluster, t).values()) == [1, 2, 3],
        )


def key_on(cluster: LocalCluster, topic: str, node: int, prefix: str) -> str:
    """A transactional id (topic __transaction_state) or group id (__consumer_offsets) whose
    coordinator is `node`."""
    by_partition = leaders(cluster, topic)
    for i in range(1000):
        key = f"{prefix}-{i}"
        if by_partition[partition_for(key, INTERNAL)] == node:
            return key
    raise AssertionError(f"no key of {topic} on node {node}")


def spread_topic(cluster: LocalCluster, name: str) -> dict[int, int]:
    """A topic of three partitions, one led by each broker; partition -> leader."""
    create(admin(cluster.bootstrap), name, partitions=3)
    placed = wait_for(
        f"{name} placed",
        lambda: leaders(cluster, name) if len(leaders(cluster, name)) == 3 else None,
    )
    assert sorted(placed.values()) == [1, 2, 3]
    return placed


def transactional_producer(bootstrap: str, transactional_id: str) -> Any:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    producer.init_transactions(30)
    return producer


def read(
    bootstrap: str,
    topic: str,
    isolation: str,
    enough: Callable[[list[str]], bool],
    timeout_s: float = 30.0,
) -> list[str]:
    """Values of the three partitions from the start, until `enough` says so (or the timeout)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(3)])
    values: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while not enough(values) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value().decode())
    finally:
        consumer.close()
    return values


def produce_to_every_partition(
    producer: Any, topic: str, prefix: str, per_partition: int
) -> list[str]:
    values = []
    for p in range(3):
        for i in range(per_partition):
            value = f"{prefix}-{p}-{i}"
            producer.produce(topic, value=value.encode(), partition=p)
            values.append(value)
    assert producer.flush(20) == 0
    return values


def test_commit_and_abort_over_partitions_led_by_three_brokers(shared: LocalCluster) -> None:
    placed = spread_topic(shared, "payments")
    coordinator = placed[0]
    tid = key_on(shared, "__transaction_state", coordinator, "payer")
    bootstrap = shared.bootstrap_of(placed[1])  # not the coordinator: FindCoordinator points there
    producer = transactional_producer(bootstrap, tid)

    producer.begin_transaction()
    committed = produce_to_every_partition(producer, "payments", "committed", 10)
    producer.commit_transaction(30)
    seen = read(bootstrap, "payments", "read_committed", lambda v: len(v) >= len(committed))
    assert sorted(seen) == sorted(committed)

    producer.begin_transaction()
    aborted = produce_to_every_partition(producer, "payments", "aborted", 5)
    producer.abort_transaction(30)
    producer.begin_transaction()
    after = produce_to_every_partition(producer, "payments", "after", 2)
    producer.commit_transaction(30)

    # every partition's last stable offset passed the aborted transaction: its ABORT markers
    # reached all three brokers
    seen = read(bootstrap, "payments", "read_committed", lambda v: set(after) <= set(v))
    assert sorted(seen) == sorted(committed + after)
    everything = read(
        bootstrap,
        "payments",
        "read_uncommitted",
        lambda v: len(v) >= len(committed + aborted + after),
    )
    assert sorted(everything) == sorted(committed + aborted + after)


def test_offsets_sent_to_a_transaction_coordinated_elsewhere_are_committed(
    shared: LocalCluster,
) -> None:
    placed = spread_topic(shared, "orders")
    spread_topic(shared, "orders-copy")
    group_node = placed[2]
    group = key_on(shared, "__consumer_offsets", group_node, "pipeline")
    txn_node = next(n for n in shared.ids if n != group_node)
    tid = key_on(shared, "__transaction_state", txn_node, "relay")
    plain = Producer({"bootstrap.servers": shared.bootstrap})
    for p in range(3):
        for i in range(4):
            plain.produce("orders", value=f"o-{p}-{i}".encode(), partition=p)
    assert plain.flush(20) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": shared.bootstrap_of(txn_node),
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign(
        [TopicPartition("orders", p, confluent_kafka.OFFSET_BEGINNING) for p in range(3)]
    )
    producer = transactional_producer(shared.bootstrap_of(txn_node), tid)
    producer.begin_transaction()
    got = 0
    deadline = time.monotonic() + 30
    while got < 12 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            producer.produce("orders-copy", value=msg.value())
            got += 1
    assert got == 12
    offsets = [TopicPartition("orders", p, 4) for p in range(3)]
    producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)

    # OffsetFetch (require_stable): answered once the COMMIT marker reached the group's
    # __consumer_offsets partition on the other node and settled the pending offsets there
    committed = consumer.committed([TopicPartition("orders", p) for p in range(3)], timeout=30)
    consumer.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 4), (1, 4), (2, 4)]
    fresh = Consumer({"bootstrap.servers": shared.bootstrap_of(group_node), "group.id": group})
    again = fresh.committed([TopicPartition("orders", p) for p in range(3)], timeout=30)
    fresh.close()
    assert [tp.offset for tp in again] == [4, 4, 4]


def test_a_commit_completes_once_a_killed_partition_leader_is_back(own: LocalCluster) -> None:
    placed = spread_topic(own, "ledger")
    coordinator = placed[0]
    tid = key_on(own, "__transaction_state", coordinator, "clerk")
    victim = placed[1]  # leads partition 1, coordinates nothing of this transaction
    producer = transactional_producer(own.bootstrap_of(coordinator), tid)
    producer.begin_transaction()
    written = produce_to_every_partition(producer, "ledger", "entry", 10)

    own.kill(victim)  # SIGKILL with the transaction open
    # EndTxn: the coordinator writes PrepareCommit and answers; the marker for partition 1
    # cannot be written while its leader is down, and is retried
    producer.commit_transaction(30)
    own.start_node(victim)

    seen = read(
        own.bootstrap_of(coordinator),
        "ledger",
        "read_committed",
        lambda v: len(v) >= len(written),
        45,
    )
    assert sorted(seen) == sorted(written)
    # the transaction is complete: the next one starts and commits
    producer.begin_transaction()
    more = produce_to_every_partition(producer, "ledger", "more", 1)
    producer.commit_transaction(30)
    seen = read(
        own.bootstrap_of(coordinator), "ledger", "read_committed", lambda v: set(more) <= set(v)
    )
    assert sorted(seen) == sorted(written + more)
