"""One node serving two client listeners at once, PLAINTEXT and SASL_SSL, each on a port the
OS picked: a client on each is told that listener's port in Metadata and DescribeCluster and
produces and consumes through it; the SASL_SSL one wants credentials, the PLAINTEXT one none."""

from __future__ import annotations

import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient
from security_certs import Pki
from security_clients import N, Target, confluent_conf, roundtrip_confluent, values

from gregor.testing.broker import Broker

pytestmark = pytest.mark.client

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


@pytest.fixture(scope="module")
def node(pki: Pki) -> Iterator[Broker]:
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.location": str(pki.server),
    }
    with Broker(config) as broker:
        yield broker


def plaintext(node: Broker) -> Target:
    return Target(f"127.0.0.1:{node.listener_ports['PLAINTEXT']}", "PLAINTEXT")


def sasl_ssl(node: Broker, pki: Pki, password: str = "alice-secret") -> Target:
    port = node.listener_ports["SASL_SSL"]
    return Target(f"127.0.0.1:{port}", "SASL_SSL", ca=pki.ca, user="alice", password=password)


def test_each_listener_has_its_own_port(node: Broker) -> None:
    ports = node.listener_ports
    assert set(ports) == {"PLAINTEXT", "SASL_SSL"}
    assert ports["PLAINTEXT"] == node.port  # the first line of the ready file, as before
    assert ports["SASL_SSL"] not in (0, node.port)


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SASL_SSL"])
def test_a_client_is_told_the_port_of_its_own_listener(
    node: Broker, pki: Pki, listener: str
) -> None:
    target = plaintext(node) if listener == "PLAINTEXT" else sasl_ssl(node, pki)
    admin = AdminClient(confluent_conf(target))
    brokers = admin.list_topics(timeout=20).brokers
    assert [(b.id, b.host, b.port) for b in brokers.values()] == [
        (1, "127.0.0.1", node.listener_ports[listener])
    ]
    described = admin.describe_cluster().result(20)
    assert [n.port for n in described.nodes] == [node.listener_ports[listener]]
    topic = f"through-{listener.lower()}"
    assert roundtrip_confluent(target, topic) == values(topic)


def test_a_consumer_group_on_each_listener_finds_its_coordinator_there(
    node: Broker, pki: Pki
) -> None:
    for target, group in ((plaintext(node), "plain-group"), (sasl_ssl(node, pki), "sasl-group")):
        topic = f"grouped-{group}"
        producer = ck.Producer(confluent_conf(target))
        for value in values(topic):
            producer.produce(topic, value)
        assert producer.flush(30) == 0
        conf = {**confluent_conf(target), "group.id": group, "auto.offset.reset": "earliest"}
        consumer = ck.Consumer(conf)
        consumer.subscribe([topic])
        got = []
        for _ in range(120):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == N:
                break
        consumer.commit(asynchronous=False)
        consumer.close()
        assert sorted(got) == sorted(values(topic))
        admin = AdminClient(confluent_conf(target))
        coordinator = admin.describe_consumer_groups([group])[group].result(20).coordinator
        assert coordinator.port == int(target.bootstrap.rpartition(":")[2])


def test_the_sasl_ssl_listener_wants_credentials_the_plaintext_one_none(
    node: Broker, pki: Pki
) -> None:
    assert AdminClient(confluent_conf(plaintext(node))).list_topics(timeout=10).brokers
    assert _first_error(sasl_ssl(node, pki, password="not-it")) == ck.KafkaError._AUTHENTICATION
    # TLS without SASL to the SASL_SSL port: no SASL exchange, nothing served
    no_sasl = Target(sasl_ssl(node, pki).bootstrap, "SSL", ca=pki.ca)
    with pytest.raises(ck.KafkaException):
        AdminClient(confluent_conf(no_sasl)).list_topics(timeout=5)
    # SASL_SSL credentials to the PLAINTEXT port: no TLS there, nothing served
    wrong_port = sasl_ssl(node, pki).with_(bootstrap=plaintext(node).bootstrap)
    with pytest.raises(ck.KafkaException):
        AdminClient(confluent_conf(wrong_port)).list_topics(timeout=5)


def _first_error(target: Target) -> int:
    """The code of the first error a producer reports (within 20 s)."""
    errors: list[ck.KafkaError] = []
    producer = ck.Producer({**confluent_conf(target), "error_cb": errors.append})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error reported"
    return int(errors[0].code())


def test_the_sasl_ssl_listener_reloads_its_keystore_on_its_own(node: Broker, pki: Pki) -> None:
    """AlterConfigs on listener.name.sasl_ssl.ssl.keystore.location: new SASL_SSL connections
    get the new certificate (signed by another CA); the PLAINTEXT listener serves on."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    def set_keystore(path: str) -> None:
        admin = AdminClient(confluent_conf(plaintext(node)))
        key = "listener.name.sasl_ssl.ssl.keystore.location"
        entry = ConfigEntry(key, path, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)

    rotated = sasl_ssl(node, pki).with_(ca=pki.other_ca)
    set_keystore(str(pki.rogue_server))
    try:
        deadline = time.monotonic() + 20
        while True:  # applied once the change is replayed: a few ms
            try:
                AdminClient(confluent_conf(rotated)).list_topics(timeout=2)
                break
            except ck.KafkaException:
                assert time.monotonic() < deadline, "the new keystore was not served"
        assert roundtrip_confluent(rotated, "rotated") == values("rotated")
        with pytest.raises(ck.KafkaException):  # the old CA no longer verifies it
            AdminClient(confluent_conf(sasl_ssl(node, pki))).list_topics(timeout=3)
        assert roundtrip_confluent(plaintext(node), "plain-on") == values("plain-on")
    finally:
        set_keystore(str(pki.server))


def test_clients_are_told_the_advertised_address() -> None:
    """advertised.listeners: Metadata and DescribeCluster name the advertised host (here
    `localhost`, the listener being bound to 127.0.0.1), and a client reaches the broker there."""
    from gregor.testing.ports import free_ports

    port = free_ports(1)[0]
    config = {"advertised.listeners": f"PLAINTEXT://localhost:{port}"}
    with Broker(config, port=port) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        brokers = admin.list_topics(timeout=20).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("localhost", port)]
        described = admin.describe_cluster().result(20)
        assert [(n.host, n.port) for n in described.nodes] == [("localhost", port)]
        target = Target(broker.bootstrap, "PLAINTEXT")
        assert roundtrip_confluent(target, "advertised") == values("advertised")
