"""Forwarding (KIP-590) in a three-node cluster: every broker takes admin writes and hands them to
the active controller in an Envelope; topics auto-created, and internal topics needed, through a
node that is not the controller are created by the controller; the Envelope API itself refuses
what it must (a node that is not the controller, an API that is not forwarded, a torn frame);
and a replication factor of three is honoured, one above the broker count refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gregor.protocol import api_keys
from gregor.protocol.errors import BY_NAME
from gregor.protocol.messages import (
    CreateTopicsRequest,
    DescribeQuorumRequest,
    EnvelopeRequest,
    FindCoordinatorRequest,
    MetadataRequest,
    ProduceRequest,
)
from gregor.testing.cluster import LocalCluster
from tests.kraft_broker.helpers import Raw
from tests.kraft_cluster.helpers import (
    FAST,
    active_controller,
    all_brokers_seen,
    make_cluster,
    metadata_of,
    topics_on,
    wait_for,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

NONE = 0
NOT_CONTROLLER = BY_NAME["NOT_CONTROLLER"].code
INVALID_REQUEST = BY_NAME["INVALID_REQUEST"].code
LEADER_NOT_AVAILABLE = BY_NAME["LEADER_NOT_AVAILABLE"].code


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    with make_cluster(tmp_path, FAST) as c:
        yield c


def create_request(name: str, factor: int = 1) -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=name, num_partitions=2, replication_factor=factor
            )
        ],
        timeout_ms=10_000,
    )


def envelope(inner: bytes) -> EnvelopeRequest:
    return EnvelopeRequest(
        request_data=inner, request_principal=None, client_host_address=b"\x7f\x00\x00\x01"
    )


def test_admin_writes_through_a_node_that_is_not_the_controller(cluster: LocalCluster) -> None:
    ctrl = active_controller(cluster)
    other = next(i for i in cluster.ids if i != ctrl)
    all_brokers_seen(cluster)
    # an AdminClient that knows only the non-controller: create, add partitions, configure, delete
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_of(other)})
    # Learn the brokers first: librdkafka drops its bootstrap connection once it knows them,
    # failing a request sent on it meanwhile (_DESTROY_BROKER, a client-side race).
    assert len(client.list_topics(timeout=10).brokers) == 3
    client.create_topics([NewTopic("fwd", 2, 1)], operation_timeout=10)["fwd"].result(15)
    client.create_partitions([NewPartitions("fwd", 4)], operation_timeout=10)["fwd"].result(15)
    entry = ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", "fwd", incremental_configs=[entry])
    client.incremental_alter_configs([resource])[resource].result(15)
    for node in cluster.ids:
        wait_for(
            f"fwd with 4 partitions on node {node}",
            lambda n=node: _partitions(cluster, n, "fwd") == 4,
        )

    def retention() -> str:  # any broker may answer: each once it has replayed the change
        described = client.describe_configs([ConfigResource("topic", "fwd")])
        return str(next(iter(described.values())).result(15)["retention.ms"].value)

    wait_for("the altered config described", lambda: retention() == "123456")
    client.delete_topics(["fwd"], operation_timeout=10)["fwd"].result(15)
    for node in cluster.ids:
        wait_for(f"fwd gone from node {node}", lambda n=node: "fwd" not in topics_on(cluster, n))

    # an item the controller refuses comes back with the controller's own error
    with Raw(cluster.bootstrap_of(other)) as raw:
        answer = raw.call(api_keys.CREATE_TOPICS, 7, create_request("__cluster_metadata"))
    assert answer.topics[0].error_code == INVALID_REQUEST
    assert "metadata log" in (answer.topics[0].error_message or "")

    # DescribeQuorum through a follower is answered by the leader
    request = DescribeQuorumRequest(
        topics=[
            DescribeQuorumRequest.TopicData(
                topic_name="__cluster_metadata",
                partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)],
            )
        ]
    )
    with Raw(cluster.bootstrap_of(other)) as raw:
        part = raw.call(api_keys.DESCRIBE_QUORUM, 1, request).topics[0].partitions[0]
    assert (part.error_code, part.leader_id) == (NONE, ctrl)
    assert sorted(v.replica_id for v in part.current_voters) == sorted(cluster.ids)


def _partitions(cluster: LocalCluster, node: int, topic: str) -> int:
    t = next((t for t in metadata_of(cluster, node).topics if t.name == topic), None)
    return 0 if t is None else len(t.partitions)


def test_topics_are_auto_created_through_any_node(cluster: LocalCluster) -> None:
    ctrl = active_controller(cluster)
    other = next(i for i in cluster.ids if i != ctrl)
    all_brokers_seen(cluster)
    # the first Metadata asking for a new topic through a follower: LEADER_NOT_AVAILABLE, then
    # the topic exists everywhere
    with Raw(cluster.bootstrap_of(other)) as raw:
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="auto-raw")],
            allow_auto_topic_creation=True,
        )
        first = raw.call(api_keys.METADATA, 12, request).topics[0]
    assert first.error_code == LEADER_NOT_AVAILABLE
    for node in cluster.ids:
        wait_for(f"auto-raw on node {node}", lambda n=node: "auto-raw" in topics_on(cluster, n))

    # a producer and a consumer group that only know the follower
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_of(other)})
    for i in range(10):
        producer.produce("auto-topic", value=f"a{i}".encode())
    assert producer.flush(20) == 0
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_of(other),
            "group.id": "auto-group",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["auto-topic"])
    values: list[str] = []
    deadline = time.monotonic() + 40
    while len(values) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value().decode())
    consumer.close()
    assert sorted(values) == sorted(f"a{i}" for i in range(10))
    assert "__consumer_offsets" in topics_on(cluster, ctrl)


def test_internal_topic_made_on_first_find_coordinator_at_a_follower(cluster: LocalCluster) -> None:
    ctrl = active_controller(cluster)
    other = next(i for i in cluster.ids if i != ctrl)
    request = FindCoordinatorRequest(key_type=0, coordinator_keys=["g"])

    def coordinator() -> Any:
        with Raw(cluster.bootstrap_of(other)) as raw:
            answer = raw.call(api_keys.FIND_COORDINATOR, 4, request).coordinators[0]
        return answer if answer.error_code == NONE else None

    found = wait_for("a coordinator for group g through a follower", coordinator, 30)
    assert found.node_id in cluster.ids
    assert "__consumer_offsets" in topics_on(cluster, other)


def test_the_envelope_api_refuses_what_it_must(cluster: LocalCluster) -> None:
    ctrl = active_controller(cluster)
    # a topic needs registered brokers to be placed on
    wait_for("three unfenced brokers", lambda: len(metadata_of(cluster, ctrl).brokers) == 3)
    other = next(i for i in cluster.ids if i != ctrl)
    all_brokers_seen(cluster)
    inner = Raw.__new__(Raw)
    inner.correlation, inner.client_id = 41, "inner"
    create = inner.encode(api_keys.CREATE_TOPICS, 7, create_request("via-envelope"))[4:]
    produce = inner.encode(
        api_keys.PRODUCE, 9, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[])
    )[4:]

    with Raw(f"{cluster.host}:{cluster.controller_ports[other]}") as raw:
        assert raw.call(api_keys.ENVELOPE, 0, envelope(create)).error_code == NOT_CONTROLLER
    with Raw(f"{cluster.host}:{cluster.controller_ports[ctrl]}") as raw:
        assert raw.call(api_keys.ENVELOPE, 0, envelope(produce)).error_code == INVALID_REQUEST
        assert raw.call(api_keys.ENVELOPE, 0, envelope(create[:9])).error_code == INVALID_REQUEST
        answer = raw.call(api_keys.ENVELOPE, 0, envelope(create))
    assert answer.error_code == NONE
    from gregor.protocol import codec

    correlation, body = codec.decode_response(
        api_keys.CREATE_TOPICS, 7, bytes(answer.response_data)
    )
    assert correlation == 42  # the inner request's own
    assert (body.topics[0].name, body.topics[0].error_code) == ("via-envelope", NONE)
    # the client listener does not serve Envelope
    with Raw(cluster.bootstrap_of(ctrl)) as raw:
        versions = raw.call(api_keys.API_VERSIONS, 3, _api_versions_request())
    assert api_keys.ENVELOPE not in {a.api_key for a in versions.api_keys}


def _api_versions_request() -> Any:
    from gregor.protocol.messages import ApiVersionsRequest

    return ApiVersionsRequest(client_software_name="test", client_software_version="1")


def test_a_replication_factor_of_three_is_honoured_and_four_is_refused(
    cluster: LocalCluster,
) -> None:
    active_controller(cluster)
    all_brokers_seen(cluster)
    with Raw(cluster.bootstrap_of(1)) as raw:
        answer = raw.call(api_keys.CREATE_TOPICS, 7, create_request("rf3", factor=3)).topics[0]
        too_many = raw.call(api_keys.CREATE_TOPICS, 7, create_request("rf4", factor=4)).topics[0]
    assert answer.error_code == NONE
    assert too_many.error_code == BY_NAME["INVALID_REPLICATION_FACTOR"].code

    def replicated(node: int) -> bool:
        topic = next((t for t in metadata_of(cluster, node).topics if t.name == "rf3"), None)
        return topic is not None and all(
            sorted(p.replica_nodes) == [1, 2, 3]
            and sorted(p.isr_nodes) == [1, 2, 3]
            and p.leader_id in (1, 2, 3)
            for p in topic.partitions
        )

    for node in cluster.ids:
        wait_for(f"rf3 on three replicas seen by node {node}", lambda n=node: replicated(n))
    assert "rf4" not in topics_on(cluster, 1)
