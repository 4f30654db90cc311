"""A 3-node cluster whose every node-to-node connection is SASL_SSL: Raft between the
controllers, brokers to the active controller, replica fetchers and inter-broker links, each
authenticated with PLAIN over mutual TLS. Records produced with acks=all to an RF-3 topic are
replicated and read back; the controller listener refuses a client that is not TLS."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from security_certs import Pki
from security_clients import Target, confluent_conf

from gregor.testing.cluster import LocalCluster

pytestmark = pytest.mark.cluster

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="node" password="node-secret" user_node="node-secret" user_alice="alice-secret";'
)


@pytest.fixture(scope="module")
def cluster(pki: Pki) -> Iterator[LocalCluster]:
    config = {
        "listener.security.protocol.map": "CONTROLLER:SASL_SSL,SASL_SSL:SASL_SSL",
        "security.inter.broker.protocol": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "listener.name.controller.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "required",  # nodes present their certificates to each other too
    }
    with LocalCluster(3, config=config, client_listener="SASL_SSL") as c:
        c.start()
        yield c


def test_acks_all_over_sasl_ssl_between_every_node(cluster: LocalCluster, pki: Pki) -> None:
    conf = confluent_conf(
        Target(
            cluster.bootstrap,
            "SASL_SSL",
            ca=pki.ca,
            cert=pki.client_cert,
            key=pki.client_key,
            user="alice",
            password="alice-secret",
        )
    )
    admin = AdminClient(conf)
    deadline = time.monotonic() + 60
    while len(admin.list_topics(timeout=10).brokers) < 3:  # every broker registered
        assert time.monotonic() < deadline, "3 brokers did not register over SASL_SSL"
        time.sleep(0.2)
    futures = admin.create_topics([NewTopic("secure", 3, 3, config={"min.insync.replicas": "3"})])
    futures["secure"].result(30)
    producer = ck.Producer({**conf, "acks": "all"})
    failed: list[object] = []
    for i in range(300):
        producer.produce(
            "secure", f"v{i}".encode(), on_delivery=lambda e, m: failed.append(e) if e else None
        )
    assert producer.flush(60) == 0 and not failed, failed  # min.insync.replicas=3: all three
    consumer = ck.Consumer({**conf, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition("secure", p, ck.OFFSET_BEGINNING) for p in range(3)])
    got: set[bytes] = set()
    deadline = time.monotonic() + 60
    while len(got) < 300 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.add(msg.value())
    consumer.close()
    assert got == {f"v{i}".encode() for i in range(300)}
    topic = admin.list_topics("secure", timeout=10).topics["secure"]
    assert all(sorted(p.isrs) == [1, 2, 3] for p in topic.partitions.values())
    for node in cluster.nodes.values():
        assert "Failed authentication" not in node.read_log()


def test_the_controller_listener_refuses_plain_text(cluster: LocalCluster) -> None:
    port = cluster.controller_ports[1]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">ihhih", 10, 18, 0, 1, 0))  # ApiVersions v0, in clear
        try:
            assert s.recv(100) == b""
        except ConnectionResetError:
            pass
    assert "TLS handshake failed" in cluster.nodes[1].read_log()
