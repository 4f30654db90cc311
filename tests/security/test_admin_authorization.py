"""With ACLs on, the SCRAM credential APIs are authorized on the CLUSTER resource as Kafka does:
a user with no ACL there (eve) gets CLUSTER_AUTHORIZATION_FAILED from AlterUserScramCredentials
(ALTER), and nothing is changed; a super user (admin)
may do both. Metadata, DescribeCluster and DescribeGroups report each caller's authorized
operations when asked; OffsetFetch and OffsetDelete need what Kafka's need. (The client-quota APIs need DESCRIBE_CONFIGS and ALTER_CONFIGS on the cluster:
test_client_quotas.py.)"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from security_clients import Target, confluent_conf

from gregor import Broker
from gregor.protocol import api_keys
from gregor.protocol.messages import (
    DescribeClusterRequest,
    DescribeGroupsRequest,
    MetadataRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
)
from gregor.security.acls import CLUSTER, DESCRIBE, GROUP, READ, TOPIC
from gregor.security.authorizer import all_operations
from gregor.security.sasl_client import PlainClient
from gregor.testing.raw_client import RawClient

ALLOW = AclPermissionType.ALLOW

pytestmark = pytest.mark.client

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_admin="admin-pw" user_eve="eve-pw";'
)


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }
    with Broker(config) as b:
        yield b


def admin_as(broker: Broker, user: str) -> AdminClient:
    target = Target(broker.bootstrap, "SASL_PLAINTEXT", user=user, password=f"{user}-pw")
    return AdminClient(confluent_conf(target))


def upsert(user: str) -> UserScramCredentialUpsertion:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    return UserScramCredentialUpsertion(user, info, b"secret")


def code_of(call) -> int:
    with pytest.raises(KafkaException) as failure:
        call()
    return failure.value.args[0].code()


def test_scram_apis_need_the_cluster_acls(broker: Broker) -> None:
    eve, admin = admin_as(broker, "eve"), admin_as(broker, "admin")
    altered = eve.alter_user_scram_credentials([upsert("mallory")])["mallory"]
    assert code_of(lambda: altered.result(30)) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # (eve's DescribeUserScramCredentials is refused too, but confluent-kafka 2.16 aborts the
    # process on that error answer, whoever sends it: not asked here)
    admin.alter_user_scram_credentials([upsert("carol")])["carol"].result(30)
    assert set(admin.describe_user_scram_credentials().result(30)) == {"carol"}  # no mallory


def raw_as(broker: Broker, user: str) -> RawClient:
    plain = PlainClient({"username": user, "password": f"{user}-pw"})
    return RawClient(broker.bootstrap, timeout_s=10, sasl=("PLAIN", plain))


def ops(*operations: int) -> int:
    return sum(1 << op for op in operations)


def test_authorized_operations_are_the_callers_when_asked(broker: Broker) -> None:
    """Metadata (topic and cluster), DescribeCluster and DescribeGroups report the operations
    the caller's ACLs allow when asked: eve may DESCRIBE the cluster and READ the topic and
    the group (READ implying DESCRIBE); a super user may do every supported operation."""
    topic, group = "ops-topic", "ops-group"
    admin = admin_as(broker, "admin")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    allow = [
        AclBinding(rtype, name, ResourcePatternType.LITERAL, "User:eve", "*", op, ALLOW)
        for rtype, name, op in (
            (ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
            (ResourceType.TOPIC, topic, AclOperation.READ),
            (ResourceType.GROUP, group, AclOperation.READ),
        )
    ]
    for future in admin.create_acls(allow).values():
        future.result(30)
    eve = Target(broker.bootstrap, "SASL_PLAINTEXT", user="eve", password="eve-pw")
    consumer = Consumer({**confluent_conf(eve), "group.id": group})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while not consumer.assignment():  # the group exists, eve a member
            assert time.monotonic() < deadline, "eve's consumer got no assignment"
            consumer.poll(0.2)
        every = {
            CLUSTER: all_operations(CLUSTER),
            TOPIC: all_operations(TOPIC),
            GROUP: all_operations(GROUP),
        }
        expected = {
            "eve": {CLUSTER: ops(DESCRIBE), TOPIC: ops(READ, DESCRIBE), GROUP: ops(READ, DESCRIBE)},
            "admin": every,
        }
        for user, want in expected.items():
            with raw_as(broker, user) as raw:
                meta = raw.call(
                    api_keys.METADATA,
                    10,
                    MetadataRequest(
                        topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                        include_cluster_authorized_operations=True,
                        include_topic_authorized_operations=True,
                    ),
                )
                assert meta.cluster_authorized_operations == want[CLUSTER], user
                assert [t.topic_authorized_operations for t in meta.topics] == [want[TOPIC]]
                cluster = raw.call(
                    api_keys.DESCRIBE_CLUSTER,
                    0,
                    DescribeClusterRequest(include_cluster_authorized_operations=True),
                )
                assert cluster.cluster_authorized_operations == want[CLUSTER], user
                groups = raw.call(
                    api_keys.DESCRIBE_GROUPS,
                    5,
                    DescribeGroupsRequest(groups=[group], include_authorized_operations=True),
                )
                assert [g.authorized_operations for g in groups.groups] == [want[GROUP]], user
    finally:
        consumer.close()


def test_offset_fetch_needs_describe_and_offset_delete_needs_delete(broker: Broker) -> None:
    """Kafka's checks: OffsetFetch DESCRIBE on the group and the topic (READ implies it),
    OffsetDelete DELETE on the group and READ on the topic (else GROUP_ / per partition
    TOPIC_AUTHORIZATION_FAILED, nothing deleted)."""
    topic, group, watched = "offs", "offs-g", "offs-watched"
    admin = admin_as(broker, "admin")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    conf = confluent_conf(
        Target(broker.bootstrap, "SASL_PLAINTEXT", user="admin", password="admin-pw")
    )
    for gid in (group, watched):  # committed by the super user, as a standalone consumer
        committer = Consumer({**conf, "group.id": gid, "enable.auto.commit": False})
        committer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        committer.close()

    def grant(rtype: ResourceType, name: str, op: AclOperation) -> None:
        binding = AclBinding(rtype, name, ResourcePatternType.LITERAL, "User:eve", "*", op, ALLOW)
        admin.create_acls([binding])[binding].result(30)

    def fetched(raw: RawClient, gid: str) -> tuple[int, list[tuple[int, int]]]:
        ask = OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])
        request = OffsetFetchRequest(
            groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=gid, topics=[ask])]
        )
        answer = raw.call(api_keys.OFFSET_FETCH, 8, request).groups[0]
        parts = [(p.error_code, p.committed_offset) for t in answer.topics for p in t.partitions]
        return answer.error_code, parts

    def delete(raw: RawClient) -> tuple[int, list[int]]:
        part = OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)
        request = OffsetDeleteRequest(
            group_id=group,
            topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(name=topic, partitions=[part])],
        )
        answer = raw.call(api_keys.OFFSET_DELETE, 0, request)
        return answer.error_code, [p.error_code for t in answer.topics for p in t.partitions]

    grant(ResourceType.GROUP, group, AclOperation.READ)
    grant(ResourceType.GROUP, watched, AclOperation.DESCRIBE)
    grant(ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    refused_group, refused_topic = 30, 29  # GROUP_, TOPIC_AUTHORIZATION_FAILED
    with raw_as(broker, "eve") as eve:
        assert fetched(eve, group) == (0, [(0, 5)])
        assert fetched(eve, watched) == (0, [(0, 5)])  # DESCRIBE on the group is enough
        assert delete(eve) == (refused_group, [])  # READ on the group is not DELETE
        grant(ResourceType.GROUP, group, AclOperation.DELETE)
        assert delete(eve) == (0, [refused_topic])  # DESCRIBE on the topic is not READ
        assert fetched(eve, group) == (0, [(0, 5)])  # so nothing was deleted
        grant(ResourceType.TOPIC, topic, AclOperation.READ)
        assert delete(eve) == (0, [0])
        assert fetched(eve, group) == (0, [(0, -1)])
