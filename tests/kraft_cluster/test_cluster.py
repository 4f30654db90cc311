"""Three `gregor serve` processes on loopback forming one KRaft quorum (gregor.testing.cluster):
metadata made through one node is seen by all, the quorum survives the loss of its active
controller (SIGKILL while topics are being created: none acknowledged is lost), a restarted
node catches up, two lost nodes of three stop metadata writes (no split brain) until one
returns, and clients produce and consume through any node (replication: test_replication.py)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gregor.protocol import api_keys
from gregor.protocol.errors import BY_NAME
from gregor.protocol.messages import ApiVersionsRequest
from gregor.testing.cluster import LocalCluster
from tests.kraft_broker.helpers import Raw
from tests.kraft_cluster.helpers import (
    FAST,
    active_controller,
    admin,
    all_brokers_seen,
    controller_of,
    create,
    create_acknowledged,
    make_cluster,
    metadata_of,
    raw_create,
    topics_on,
    wait_for,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import NewTopic  # noqa: E402

NOT_CONTROLLER = BY_NAME["NOT_CONTROLLER"].code


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    with make_cluster(tmp_path, FAST) as c:
        yield c


def controller_of_metadata(cluster: LocalCluster, node_id: int) -> int:
    return int(metadata_of(cluster, node_id).controller_id)


def test_a_topic_made_through_one_node_is_seen_by_all_and_served_by_its_leader(
    cluster: LocalCluster,
) -> None:
    active_controller(cluster)
    all_brokers_seen(cluster)
    create(admin(cluster.bootstrap_of(1)), "orders", partitions=3)
    for node in cluster.ids:
        wait_for(f"orders on node {node}", lambda n=node: "orders" in topics_on(cluster, n))
    md = metadata_of(cluster, 2)
    orders = next(t for t in md.topics if t.name == "orders")
    assert sorted(p.leader_id for p in orders.partitions) == [1, 2, 3]
    assert md.controller_id in cluster.ids
    assert sorted((b.node_id, b.port) for b in md.brokers) == sorted(cluster.broker_ports.items())

    # produce and consume through a node that does not lead the partition
    client = admin(cluster.bootstrap_of(1))
    futures = client.create_topics(
        [NewTopic("on-three", 1, replica_assignment=[[3]])], operation_timeout=5
    )
    futures["on-three"].result(10)
    wait_for("on-three on node 1", lambda: "on-three" in topics_on(cluster, 1))
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap_of(1), "acks": "all"}
    )
    for i in range(20):
        producer.produce("on-three", key=str(i).encode(), value=f"v{i}".encode())
    assert producer.flush(15) == 0
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.bootstrap_of(2), "group.id": "g", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition("on-three", 0, 0)])
    values = []
    deadline = time.monotonic() + 20
    while len(values) < 20 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value().decode())
    consumer.close()
    assert values == [f"v{i}" for i in range(20)]

    # a node that is not the controller forwards admin writes to it (an Envelope, KIP-590)
    ctrl = active_controller(cluster)
    other = next(i for i in cluster.ids if i != ctrl)
    assert raw_create(cluster, other, "forwarded") == 0
    wait_for(
        "the forwarded topic on every node",
        lambda: all("forwarded" in topics_on(cluster, n) for n in cluster.ids),
    )
    # Metadata names the active controller (a combined node, so a live broker) from every node:
    # clients send admin writes straight to it, with no forwarding hop
    assert all(controller_of_metadata(cluster, n) == ctrl for n in cluster.ids)

    # One-partition topics are led all over the cluster, not all by the lowest broker id: each
    # placement starts at a random broker (all three lead some of 30 but for odds of 3 * (2/3)**30)
    names = [f"solo-{i}" for i in range(30)]
    client = admin(cluster.bootstrap_of(other))  # kept: a collected AdminClient fails futures
    futures = client.create_topics(
        [NewTopic(n, 1, 1) for n in names], operation_timeout=10, request_timeout=10
    )
    for name in names:
        futures[name].result(15)
    wait_for("the solo topics on node 1", lambda: set(names) <= topics_on(cluster, 1))
    leaders = {t.partitions[0].leader_id for t in metadata_of(cluster, 1).topics if t.name in names}
    assert leaders == {1, 2, 3}


def test_killing_the_active_controller_loses_no_acknowledged_topic_and_it_catches_up(
    cluster: LocalCluster,
) -> None:
    first = active_controller(cluster)
    acknowledged: list[str] = []
    successes: list[float] = []
    stop = threading.Event()

    def create_loop() -> None:
        client = admin(cluster.bootstrap)
        n = 0
        while not stop.is_set():
            name = f"t-{n}-{uuid.uuid4().hex[:6]}"
            while not stop.is_set():
                if create_acknowledged(client, name, timeout_s=2.0):
                    acknowledged.append(name)
                    successes.append(time.monotonic())
                    break
                client = admin(cluster.bootstrap)  # fresh metadata: where is the controller now
                time.sleep(0.05)
            n += 1

    worker = threading.Thread(target=create_loop, daemon=True)
    worker.start()
    wait_for("some topics created", lambda: len(acknowledged) >= 5)
    killed_at = time.monotonic()
    cluster.kill(first)
    wait_for(
        "a creation acknowledged after the kill", lambda: any(t > killed_at for t in successes), 30
    )
    failover_s = min(t for t in successes if t > killed_at) - killed_at
    time.sleep(1.0)
    stop.set()
    worker.join(30)
    assert failover_s < 10.0, failover_s
    second = active_controller(cluster)
    assert second != first
    for node in cluster.running():  # each node learns of the last commits within moments
        wait_for(
            f"every acknowledged topic listed by node {node}",
            lambda n=node: set(acknowledged) <= topics_on(cluster, n),
        )

    cluster.start_node(first)
    wait_for(
        f"node {first} catching up",
        lambda: set(acknowledged) <= topics_on(cluster, first),
        30,
    )
    print(f"failover (kill -> first acknowledged CreateTopics): {failover_s:.2f}s")


def test_two_of_three_down_stops_metadata_writes_until_one_returns(cluster: LocalCluster) -> None:
    ctrl = active_controller(cluster)
    create(admin(cluster.bootstrap), "before")
    survivor = next(i for i in cluster.ids if i != ctrl)
    down = [i for i in cluster.ids if i != survivor]
    for node in down:
        cluster.kill(node)
    client = admin(cluster.bootstrap_of(survivor))
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        with pytest.raises(confluent_kafka.KafkaException):
            create(client, f"during-{uuid.uuid4().hex[:6]}", timeout_s=2.0)
    assert not any(t.startswith("during-") for t in topics_on(cluster, survivor))
    # the survivor never takes over alone (it may still name the dead leader it followed)
    assert controller_of(cluster, survivor) != survivor
    # no controller to forward to: after the request's timeout the node answers NOT_CONTROLLER
    assert raw_create(cluster, survivor, "refused", timeout_ms=1500) == NOT_CONTROLLER

    cluster.start_node(down[0])
    wait_for(
        "an active controller again",
        lambda: controller_of(cluster, survivor) in (survivor, down[0]),
        30,
    )
    wait_for(
        "a write after quorum is back",
        lambda: create_acknowledged(admin(cluster.bootstrap_of(survivor)), "after"),
        30,
    )
    # acknowledged once the controller committed it; the survivor's own metadata (it may have
    # forwarded the write) follows at its next fetch from the leader
    wait_for(
        "the survivor to see both topics",
        lambda: {"before", "after"} <= topics_on(cluster, survivor),
        10,
    )


def test_a_consumer_group_finds_its_coordinator_on_whichever_node_leads_its_partition(
    cluster: LocalCluster,
) -> None:
    active_controller(cluster)
    all_brokers_seen(cluster)
    create(admin(cluster.bootstrap), "events", partitions=3)
    # idempotent: every node has producer ids from the active controller (AllocateProducerIds)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True}
    )
    for i in range(30):
        producer.produce("events", key=str(i).encode(), value=f"e{i}".encode())
    assert producer.flush(15) == 0
    seen: set[str] = set()
    for group in ("g-a", "g-b", "g-c"):  # groups land on different __consumer_offsets partitions
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_of(1),
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,  # the commit below is the one checked
            }
        )
        consumer.subscribe(["events"])
        values: list[str] = []
        deadline = time.monotonic() + 40
        while len(values) < 30 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value().decode())
        consumer.commit(asynchronous=False)
        committed = consumer.committed(
            [confluent_kafka.TopicPartition("events", p) for p in range(3)], timeout=10
        )
        consumer.close()
        assert sorted(values) == sorted(f"e{i}" for i in range(30)), group
        assert sum(tp.offset for tp in committed) == 30
        seen.add(group)
    md = metadata_of(cluster, 2)
    offsets = next(t for t in md.topics if t.name == "__consumer_offsets")
    assert {len(p.replica_nodes) for p in offsets.partitions} == {3}  # replicated on every broker
    assert {p.leader_id for p in offsets.partitions} == {1, 2, 3}


def test_every_node_hands_out_producer_ids_from_its_own_block(cluster: LocalCluster) -> None:
    from gregor.protocol.messages import InitProducerIdRequest

    active_controller(cluster)
    request = InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
    )

    def ids_of(node: int) -> list[int] | None:
        with Raw(cluster.bootstrap_of(node)) as raw:
            answers = [raw.call(api_keys.INIT_PRODUCER_ID, 4, request) for _ in range(3)]
        return None if any(a.error_code for a in answers) else [a.producer_id for a in answers]

    ids = [wait_for(f"producer ids from node {n}", lambda n=n: ids_of(n)) for n in cluster.ids]
    flat = [i for block in ids for i in block]
    assert len(set(flat)) == len(flat)
    assert len({i // 1000 for i in flat}) == 3  # one block per node


def test_a_cleanly_stopped_node_is_fenced_at_once_and_comes_back_at_once(
    cluster: LocalCluster,
) -> None:
    ctrl = active_controller(cluster)
    wait_for("three unfenced brokers", lambda: len(metadata_of(cluster, ctrl).brokers) == 3)
    other = next(i for i in cluster.ids if i != ctrl)
    cluster.stop_node(other)  # SIGTERM
    brokers = {b.node_id for b in metadata_of(cluster, ctrl).brokers}
    assert other not in brokers
    cluster.start_node(other)
    took = time.monotonic()
    wait_for(
        "the node registered again",
        lambda: other in {b.node_id for b in metadata_of(cluster, ctrl).brokers},
        5,
    )
    assert time.monotonic() - took < 5  # well within the 6 s session of its old incarnation


def test_a_restarted_node_answers_its_first_request_with_the_metadata_it_caught_up_to(
    cluster: LocalCluster,
) -> None:
    # Kafka's broker reads no request before its initial catch-up; an answer from the replayed
    # snapshot alone would name no broker and no topic (librdkafka: "Partial response").
    ctrl = active_controller(cluster)
    wait_for("three unfenced brokers", lambda: len(metadata_of(cluster, ctrl).brokers) == 3)
    create(admin(cluster.bootstrap), "kept")
    wait_for(
        "the topic everywhere", lambda: all("kept" in topics_on(cluster, i) for i in cluster.ids)
    )
    other = next(i for i in cluster.ids if i != ctrl)
    for _ in range(3):
        cluster.stop_node(other)
        cluster.start_node(other)
        first = metadata_of(cluster, other)  # the first request on the restarted node
        # its own unfencing comes after (Kafka's order): the other two are named at least
        assert {b.node_id for b in first.brokers} >= set(cluster.ids) - {other}
        assert "kept" in {t.name for t in first.topics}


def test_a_node_stopped_before_its_catch_up_closes_the_connections_it_held(
    cluster: LocalCluster,
) -> None:
    # Requests wait for the initial catch-up; a node stopped before it came has nothing to
    # answer them with, so it closes their connections at once (no 5 s grace for them).
    active_controller(cluster)
    all_brokers_seen(cluster)
    for node in cluster.ids:
        cluster.stop_node(node)
    cluster.start_node(1)  # alone of three voters: no quorum, so no catch-up
    raw = Raw(cluster.bootstrap_of(1))
    raw.send(
        api_keys.API_VERSIONS,
        3,
        ApiVersionsRequest(client_software_name="t", client_software_version="1"),
    )
    assert cluster.nodes[1].stop() == 0  # SIGTERM: a clean stop
    with pytest.raises((ConnectionError, EOFError, OSError)):
        raw.recv()  # closed without an answer
    log_text = cluster.nodes[1].read_log()
    assert "closing every client connection: not caught up with the metadata yet" in log_text
    assert "shut down cleanly" in log_text.rsplit("closing every client connection", 1)[1]
