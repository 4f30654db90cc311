"""A 3-node cluster whose brokers serve an INTERNAL listener (PLAINTEXT, the inter-broker one)
and an EXTERNAL one (SASL_PLAINTEXT): replica fetchers use INTERNAL (over EXTERNAL they would
be refused, having no credentials), so a follower stopped while records were written catches up;
clients of EXTERNAL are told only EXTERNAL ports, in Metadata, DescribeCluster and
FindCoordinator, and a consumer group works there; clients of INTERNAL see INTERNAL ports."""

from __future__ import annotations

import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.testing.cluster import LocalCluster

pytestmark = pytest.mark.cluster

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    config = {
        "listener.security.protocol.map": (
            "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
        ),
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.external.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.external.plain.sasl.jaas.config": JAAS,
    }
    with LocalCluster(3, config=config, client_listener="INTERNAL", extra_listener="EXTERNAL") as c:
        c.start()
        c.wait_for_brokers()
        yield c


def external(cluster: LocalCluster) -> dict[str, object]:
    return {
        "bootstrap.servers": cluster.extra_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "alice-secret",
    }


def leader_of(admin: AdminClient, topic: str) -> int:
    """Partition 0's leader, once the answering broker's metadata has the topic."""
    deadline = time.monotonic() + 30
    while True:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        if 0 in partitions and partitions[0].leader >= 0:
            return int(partitions[0].leader)
        assert time.monotonic() < deadline, f"{topic} has no leader"
        time.sleep(0.1)


def isr_of(admin: AdminClient, topic: str) -> list[int]:
    return sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs)


def test_each_listener_names_its_own_ports(cluster: LocalCluster) -> None:
    outside = AdminClient(external(cluster))
    brokers = outside.list_topics(timeout=20).brokers
    assert {b.id: b.port for b in brokers.values()} == cluster.extra_ports
    assert {n.id: n.port for n in outside.describe_cluster().result(20).nodes} == (
        cluster.extra_ports
    )
    inside = AdminClient({"bootstrap.servers": cluster.bootstrap})
    brokers = inside.list_topics(timeout=20).brokers
    assert {b.id: b.port for b in brokers.values()} == cluster.broker_ports


def test_a_follower_catches_up_over_the_internal_listener(cluster: LocalCluster) -> None:
    admin = AdminClient(external(cluster))
    config = {"min.insync.replicas": "2"}
    admin.create_topics([NewTopic("replicated", 1, 3, config=config)])["replicated"].result(30)
    leader = leader_of(admin, "replicated")
    follower = next(i for i in cluster.broker_ids if i != leader)
    cluster.stop_node(follower)
    producer = ck.Producer({**external(cluster), "acks": "all"})
    for i in range(200):
        producer.produce("replicated", f"r{i}".encode(), partition=0)
    assert producer.flush(60) == 0
    cluster.start_node(follower)
    deadline = time.monotonic() + 60
    while isr_of(admin, "replicated") != [1, 2, 3]:  # back in the ISR: caught up
        assert time.monotonic() < deadline, f"broker {follower} did not catch up"
        time.sleep(0.2)
    for node in cluster.nodes.values():
        assert "Failed authentication" not in node.read_log()


def test_a_consumer_group_on_the_external_listener(cluster: LocalCluster) -> None:
    conf = external(cluster)
    admin = AdminClient(conf)
    admin.create_topics([NewTopic("outside", 3, 3)])["outside"].result(30)
    producer = ck.Producer({**conf, "acks": "all"})
    for i in range(60):
        producer.produce("outside", f"o{i}".encode())
    assert producer.flush(60) == 0
    consumer = ck.Consumer({**conf, "group.id": "outsiders", "auto.offset.reset": "earliest"})
    consumer.subscribe(["outside"])
    got: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(got) < 60 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.add(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == {f"o{i}".encode() for i in range(60)}
    group = admin.describe_consumer_groups(["outsiders"])["outsiders"].result(20)
    assert group.coordinator.port == cluster.extra_ports[group.coordinator.id]
    committed = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions("outsiders")])[
        "outsiders"
    ].result(20)
    assert sum(tp.offset for tp in committed.topic_partitions) == 60
