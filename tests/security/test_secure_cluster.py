"""A 3-node cluster whose every node-to-node connection is SASL_SSL: Raft between the
controllers, brokers to the active controller, replica fetchers and inter-broker links, each
authenticated with PLAIN over mutual TLS, with ACLs on: the nodes are super users by their SASL
name, a client by its own. Records produced with acks=all to an RF-3 topic by a user with ACLs
are replicated and read back, a user without is refused, also after the active controller is
lost and on that node once it is back; the controller listener refuses a client that is not TLS. What only nodes send needs
CLUSTER_ACTION, as Kafka checks it: a user that is not a super user gets
CLUSTER_AUTHORIZATION_FAILED for AlterPartition, the Raft RPCs, broker registration and
heartbeats and Envelope on the controller listener (DescribeQuorum needs DESCRIBE) and for
WriteTxnMarkers on a broker, and TOPIC_AUTHORIZATION_FAILED for a replica's Fetch from a
broker (Kafka's answer there); an admin write sent to the controller listener is authorized as
its caller's."""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from security_certs import Pki
from security_clients import Target, confluent_conf, logged

from gregor.protocol import api_keys, codec, errors
from gregor.protocol.messages import (
    CreateTopicsRequest,
    DescribeQuorumRequest,
    FetchRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    WriteTxnMarkersRequest,
)
from gregor.testing.cluster import LocalCluster
from gregor.testing.raw_client import RawClient

pytestmark = pytest.mark.cluster

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="node" password="node-secret" user_node="node-secret" user_alice="alice-secret" '
    'user_bob="bob-secret";'
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
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:node",  # the nodes' own SASL user: replication, markers
        # KIP-368: node-to-node connections move to new ones before their sessions end
        "connections.max.reauth.ms": "10000",
    }
    with LocalCluster(3, config=config, client_listener="SASL_SSL") as c:
        c.start()
        yield c


def user_conf(cluster: LocalCluster, pki: Pki, user: str, bootstrap: str = "") -> dict:
    return confluent_conf(
        Target(
            bootstrap or cluster.bootstrap, "SASL_SSL", ca=pki.ca, cert=pki.client_cert,
            key=pki.client_key, user=user, password=f"{user}-secret",
        )
    )  # fmt: skip


def alice_may_use(topic: str) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
        AclOperation.ALL, AclPermissionType.ALLOW,
    )  # fmt: skip


def wait_for_three_brokers(admin: AdminClient) -> None:
    """Until Metadata names all three brokers (registered and unfenced): a topic of replication
    factor 3 can then be made."""
    deadline = time.monotonic() + 90
    while len(admin.list_topics(timeout=10).brokers) < 3:
        assert time.monotonic() < deadline, "3 brokers did not register over SASL_SSL"
        time.sleep(0.2)


def refused_to_produce(conf: dict, topic: str) -> int:
    """The error code of bob's produce to `topic` (0 if it was written)."""
    producer = ck.Producer({**conf, "acks": "all", "message.timeout.ms": 20000})
    outcome: list[ck.KafkaError | None] = []
    producer.produce(topic, b"not allowed", on_delivery=lambda e, m: outcome.append(e))
    producer.flush(30)
    assert len(outcome) == 1
    return 0 if outcome[0] is None else outcome[0].code()


def test_acks_all_over_sasl_ssl_between_every_node(cluster: LocalCluster, pki: Pki) -> None:
    conf = user_conf(cluster, pki, "alice")
    admin = AdminClient(user_conf(cluster, pki, "node"))  # a super user creates and grants
    admin.create_acls([alice_may_use("secure")])[alice_may_use("secure")].result(30)
    wait_for_three_brokers(admin)
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
    bob = user_conf(cluster, pki, "bob")
    assert refused_to_produce(bob, "secure") == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "secure" not in AdminClient(bob).list_topics(timeout=10).topics  # hidden from bob


def test_acls_hold_after_the_active_controller_is_lost(cluster: LocalCluster, pki: Pki) -> None:
    admin = AdminClient(user_conf(cluster, pki, "node"))
    wait_for_three_brokers(admin)  # tests run in any order: a node another restarted, back
    admin.create_topics([NewTopic("kept", 1, 3)])["kept"].result(30)
    admin.create_acls([alice_may_use("kept")])[alice_may_use("kept")].result(30)
    lost = admin.describe_cluster().result(30).controller.id  # (a raw plaintext probe cannot)
    cluster.kill(lost)
    try:
        survivor = next(n for n in cluster.running() if n != lost)
        bootstrap = cluster.bootstrap_of(survivor)
        deadline = time.monotonic() + 60
        while True:  # a new controller is elected; the survivors enforce the same ACLs
            code = refused_to_produce(user_conf(cluster, pki, "bob", bootstrap), "kept")
            if code == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED or time.monotonic() > deadline:
                break
        assert code == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
        alice = user_conf(cluster, pki, "alice", bootstrap)
        producer = ck.Producer({**alice, "acks": "1"})
        producer.produce("kept", b"allowed")
        assert producer.flush(30) == 0
    finally:
        cluster.start_node(lost)
    # The lost node restarts from its own log and snapshot and enforces the same ACLs: alice
    # may describe "kept" there (her ACL), bob may not (none).
    kept = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="kept")], allow_auto_topic_creation=False
    )
    deadline = time.monotonic() + 90
    while True:
        try:
            with raw_sasl_ssl(cluster.broker_ports[lost], pki, "alice") as raw:
                if raw.call(api_keys.METADATA, 12, kept).topics[0].error_code == 0:
                    break
        except OSError:  # its requests are held until it has caught up (a timeout here)
            pass
        assert time.monotonic() < deadline, f"node {lost} does not show alice her topic"
        time.sleep(0.5)
    with raw_sasl_ssl(cluster.broker_ports[lost], pki, "bob") as raw:
        code = raw.call(api_keys.METADATA, 12, kept).topics[0].error_code
    assert code == errors.BY_NAME["TOPIC_AUTHORIZATION_FAILED"].code


def test_the_controller_listener_refuses_plain_text(cluster: LocalCluster) -> None:
    port = cluster.controller_ports[1]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(struct.pack(">ihhih", 10, 18, 0, 1, 0))  # ApiVersions v0, in clear
        try:
            assert s.recv(100) == b""
        except ConnectionResetError:
            pass
    assert logged(cluster.nodes[1].read_log, "TLS handshake failed")


def raw_sasl_ssl(port: int, pki: Pki, user: str) -> RawClient:
    """A raw connection over mutual TLS, authenticated with PLAIN as `user`."""
    raw = RawClient(f"127.0.0.1:{port}", timeout_s=10)
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    raw.sock = context.wrap_socket(raw.sock, server_hostname="127.0.0.1")
    shake = raw.call(api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert shake.error_code == 0
    token = f"\x00{user}\x00{user}-secret".encode()
    answer = raw.call(api_keys.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token))
    assert answer.error_code == 0, answer.error_message
    return raw


def empty(key: int) -> Any:
    return codec.message_class(key, "request")()


CLUSTER_ACTION_APIS = [
    api_keys.ALTER_PARTITION, api_keys.BROKER_HEARTBEAT, api_keys.BROKER_REGISTRATION,
    api_keys.ALLOCATE_PRODUCER_IDS, api_keys.VOTE, api_keys.BEGIN_QUORUM_EPOCH,
    api_keys.END_QUORUM_EPOCH, api_keys.FETCH, api_keys.FETCH_SNAPSHOT, api_keys.ENVELOPE,
    api_keys.DESCRIBE_QUORUM,
]  # fmt: skip


def test_what_only_nodes_send_needs_cluster_action(cluster: LocalCluster, pki: Pki) -> None:
    node = next(iter(cluster.controller_ports))
    refused = errors.BY_NAME["CLUSTER_AUTHORIZATION_FAILED"].code
    with raw_sasl_ssl(cluster.controller_ports[node], pki, "alice") as alice:
        for key in CLUSTER_ACTION_APIS:
            version = api_keys.BY_KEY[key].max_version
            answer = alice.call(key, version, empty(key))
            assert answer.error_code == refused, (api_keys.name_of(key), answer)
    lines = logged(cluster.nodes[node].read_log, "Principal = User:alice is denied", 11)
    assert any(
        "CLUSTER_ACTION on the cluster" in line and "AlterPartition" in line for line in lines
    )
    with raw_sasl_ssl(cluster.controller_ports[node], pki, "node") as peer:  # a super user
        metadata = DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData()]
        )
        quorum = peer.call(api_keys.DESCRIBE_QUORUM, 2, DescribeQuorumRequest(topics=[metadata]))
        assert quorum.error_code == 0
    deadline = time.monotonic() + 90  # a node restarted by the test before: caught up again
    while True:
        try:
            with raw_sasl_ssl(cluster.broker_ports[node], pki, "alice") as warm:
                warm.call(api_keys.METADATA, 12, MetadataRequest(topics=[]))
            break
        except OSError:  # its requests are held until it has caught up (a timeout here)
            assert time.monotonic() < deadline, f"node {node} did not catch up"
    with raw_sasl_ssl(cluster.broker_ports[node], pki, "alice") as alice:
        marker = WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=1, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=[WriteTxnMarkersRequest.WritableTxnMarkerTopic(name="secure", partition_indexes=[0])],
        )  # fmt: skip
        markers = alice.call(
            api_keys.WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=[marker])
        )
        assert markers.markers[0].topics[0].partitions[0].error_code == refused
        part = FetchRequest.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )  # fmt: skip
        fetch = FetchRequest(
            replica_id=2, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            topics=[FetchRequest.FetchTopic(topic="secure", partitions=[part])],
        )  # fmt: skip
        answer = alice.call(api_keys.FETCH, 11, fetch)  # a follower's Fetch, as broker 2
        partition = answer.responses[0].partitions[0]
        assert partition.error_code == errors.BY_NAME["TOPIC_AUTHORIZATION_FAILED"].code
        assert len(partition.records or b"") == 0


def test_an_admin_write_on_the_controller_listener_is_the_callers(
    cluster: LocalCluster, pki: Pki
) -> None:
    """Sent straight to the active controller, a CreateTopics is authorized as its caller's
    (not as User:ANONYMOUS): a super user's is done, alice's is refused."""

    def create(port: int, user: str, name: str) -> int:
        topic = CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=1, replication_factor=1
        )
        with raw_sasl_ssl(port, pki, user) as raw:
            answer = raw.call(api_keys.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[topic]))
        return int(answer.topics[0].error_code)

    not_controller = errors.BY_NAME["NOT_CONTROLLER"].code
    deadline = time.monotonic() + 30
    while True:  # the active controller: the one that does not answer NOT_CONTROLLER
        codes = {p: create(p, "node", "direct-node") for p in cluster.controller_ports.values()}
        done = [p for p, code in codes.items() if code != not_controller]
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(done) == 1 and codes[done[0]] == 0, codes
    refused = errors.BY_NAME["TOPIC_AUTHORIZATION_FAILED"].code
    assert create(done[0], "alice", "direct-alice") == refused
