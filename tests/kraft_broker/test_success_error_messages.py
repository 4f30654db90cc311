"""What a successful answer says in its error_message, as Kafka's broker and controller say it:
null where they set the error's message (ApiError.NONE has none) or the field defaults to null
(CreateTopics, CreatePartitions, DeleteTopics, AlterConfigs, IncrementalAlterConfigs, Produce,
DescribeCluster, DescribeProducers, DeleteAcls, AlterClientQuotas); "" where Kafka leaves a field
whose schema default is "" (DescribeConfigs, FindCoordinator v4+, DescribeAcls, CreateAcls,
DescribeClientQuotas, DescribeUserScramCredentials, DescribeQuorum); "NONE" where Kafka sets
`Errors.NONE.message()` (FindCoordinator v1-3). aiokafka's admin client asserts CreateTopics'
null."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic

from gregor import Broker
from gregor.protocol import api_keys, messages
from gregor.protocol.records.records import build_batch
from gregor.testing.raw_client import RawClient

TOPIC = 2  # config resource type
SET = 0  # IncrementalAlterConfigs operation


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(log_level="INFO") as b:
        yield b


def create_topic(raw: RawClient, version: int = 7) -> Any:
    r = messages.CreateTopicsRequest
    name = f"ok-{uuid.uuid4().hex[:8]}"
    body = r(
        topics=[
            r.CreatableTopic(
                name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[]
            )
        ],
        timeout_ms=10000,
        validate_only=False,
    )
    [result] = raw.call(api_keys.CREATE_TOPICS, version, body).topics
    assert result.error_code == 0, result
    return result


def _create_topics(raw: RawClient, version: int) -> Any:
    return create_topic(raw, version)


def _create_partitions(raw: RawClient, version: int) -> Any:
    r = messages.CreatePartitionsRequest
    name = create_topic(raw).name
    topics = [r.CreatePartitionsTopic(name=name, count=2, assignments=None)]
    body = r(topics=topics, timeout_ms=10000, validate_only=False)
    [result] = raw.call(api_keys.CREATE_PARTITIONS, version, body).results
    return result


def _delete_topics(raw: RawClient, version: int) -> Any:
    r = messages.DeleteTopicsRequest
    name = create_topic(raw).name
    body = r(topic_names=[name], timeout_ms=10000)
    [result] = raw.call(api_keys.DELETE_TOPICS, version, body).responses
    return result


def _alter_configs(raw: RawClient, version: int) -> Any:
    r = messages.AlterConfigsRequest
    name = create_topic(raw).name
    configs = [r.AlterableConfig(name="retention.ms", value="100000")]
    body = r(
        resources=[
            r.AlterConfigsResource(resource_type=TOPIC, resource_name=name, configs=configs)
        ],
        validate_only=False,
    )
    [result] = raw.call(api_keys.ALTER_CONFIGS, version, body).responses
    return result


def _incremental_alter_configs(raw: RawClient, version: int) -> Any:
    r = messages.IncrementalAlterConfigsRequest
    name = create_topic(raw).name
    configs = [r.AlterableConfig(name="retention.ms", config_operation=SET, value="100000")]
    body = r(
        resources=[
            r.AlterConfigsResource(resource_type=TOPIC, resource_name=name, configs=configs)
        ],
        validate_only=False,
    )
    [result] = raw.call(api_keys.INCREMENTAL_ALTER_CONFIGS, version, body).responses
    return result


def _describe_configs(raw: RawClient, version: int) -> Any:
    r = messages.DescribeConfigsRequest
    name = create_topic(raw).name
    resources = [
        r.DescribeConfigsResource(resource_type=TOPIC, resource_name=name, configuration_keys=None)
    ]
    [result] = raw.call(api_keys.DESCRIBE_CONFIGS, version, r(resources=resources)).results
    return result


def _produce(raw: RawClient, version: int) -> Any:
    name = create_topic(raw).name
    return raw.produce(name, bytes(build_batch([(b"k", b"v")])), version=version)


def _describe_cluster(raw: RawClient, version: int) -> Any:
    body = messages.DescribeClusterRequest(include_cluster_authorized_operations=False)
    return raw.call(api_keys.DESCRIBE_CLUSTER, version, body)


def _describe_producers(raw: RawClient, version: int) -> Any:
    r = messages.DescribeProducersRequest
    name = create_topic(raw).name
    body = r(topics=[r.TopicRequest(name=name, partition_indexes=[0])])
    [part] = raw.call(api_keys.DESCRIBE_PRODUCERS, version, body).topics[0].partitions
    return part


def _find_coordinator(raw: RawClient, version: int) -> Any:
    r = messages.FindCoordinatorRequest
    if version >= 4:
        body = r(key_type=0, coordinator_keys=["success-group"])
        [coordinator] = raw.call(api_keys.FIND_COORDINATOR, version, body).coordinators
        return coordinator
    return raw.call(api_keys.FIND_COORDINATOR, version, r(key="success-group", key_type=0))


def _describe_client_quotas(raw: RawClient, version: int) -> Any:
    body = messages.DescribeClientQuotasRequest(components=[], strict=False)
    return raw.call(api_keys.DESCRIBE_CLIENT_QUOTAS, version, body)


def _alter_client_quotas(raw: RawClient, version: int) -> Any:
    r = messages.AlterClientQuotasRequest
    entity = [r.EntityData(entity_type="client-id", entity_name="success-client")]
    ops = [r.OpData(key="producer_byte_rate", value=1e6, remove=False)]
    body = r(entries=[r.EntryData(entity=entity, ops=ops)], validate_only=False)
    [entry] = raw.call(api_keys.ALTER_CLIENT_QUOTAS, version, body).entries
    return entry


def _describe_scram_users(raw: RawClient, version: int) -> Any:
    body = messages.DescribeUserScramCredentialsRequest(users=None)
    return raw.call(api_keys.DESCRIBE_USER_SCRAM_CREDENTIALS, version, body)


def _describe_scram_user(raw: RawClient, version: int) -> Any:
    r = messages.AlterUserScramCredentialsRequest
    upsert = r.ScramCredentialUpsertion(
        name="success-user", mechanism=1, iterations=8192, salt=b"salt", salted_password=b"p" * 32
    )
    body = r(deletions=[], upsertions=[upsert])
    [altered] = raw.call(api_keys.ALTER_USER_SCRAM_CREDENTIALS, version, body).results
    assert (altered.error_code, altered.error_message) == (0, None), altered
    d = messages.DescribeUserScramCredentialsRequest
    body = d(users=[d.UserName(name="success-user")])
    [result] = raw.call(api_keys.DESCRIBE_USER_SCRAM_CREDENTIALS, version, body).results
    return result


def _describe_quorum(raw: RawClient, version: int) -> Any:
    q = messages.DescribeQuorumRequest
    partitions = [q.PartitionData(partition_index=0)]
    body = q(topics=[q.TopicData(topic_name="__cluster_metadata", partitions=partitions)])
    answer = raw.call(api_keys.DESCRIBE_QUORUM, version, body)
    [part] = answer.topics[0].partitions
    assert (part.error_code, part.error_message) == (0, ""), part
    return answer


NULL = None
CASES: dict[str, tuple[Callable[[RawClient, int], Any], int, str | None]] = {
    "CreateTopics v2": (_create_topics, 2, NULL),
    "CreateTopics v7": (_create_topics, 7, NULL),
    "CreatePartitions v3": (_create_partitions, 3, NULL),
    "DeleteTopics v5": (_delete_topics, 5, NULL),
    "AlterConfigs v0": (_alter_configs, 0, NULL),
    "AlterConfigs v2": (_alter_configs, 2, NULL),
    "IncrementalAlterConfigs v0": (_incremental_alter_configs, 0, NULL),
    "IncrementalAlterConfigs v1": (_incremental_alter_configs, 1, NULL),
    "Produce v8": (_produce, 8, NULL),
    "Produce v11": (_produce, 11, NULL),
    "DescribeCluster v0": (_describe_cluster, 0, NULL),
    "DescribeProducers v0": (_describe_producers, 0, NULL),
    # Kafka's ConfigHelper leaves the message unset; the field's default is "".
    "DescribeConfigs v4": (_describe_configs, 4, ""),
    # KafkaApis: v1-3 `setErrorMessage(error.message())`, the enum's name; v4+ never set.
    "FindCoordinator v1": (_find_coordinator, 1, "NONE"),
    "FindCoordinator v3": (_find_coordinator, 3, "NONE"),
    "FindCoordinator v4": (_find_coordinator, 4, ""),
    "DescribeClientQuotas v1": (_describe_client_quotas, 1, ""),
    "AlterClientQuotas v1": (_alter_client_quotas, 1, NULL),
    "DescribeUserScramCredentials v0": (_describe_scram_users, 0, ""),
    "DescribeUserScramCredentials v0, a user": (_describe_scram_user, 0, ""),
    "DescribeQuorum v2": (_describe_quorum, 2, ""),
}


@pytest.mark.parametrize("case", CASES)
def test_a_successful_answer_has_kafkas_error_message(broker: Broker, case: str) -> None:
    call, version, expected = CASES[case]
    with RawClient(broker.bootstrap, client_id="success-messages") as raw:
        result = call(raw, version)
    assert result.error_code == 0, result
    assert result.error_message == expected, result


def test_aiokafka_creates_topics(broker: Broker) -> None:
    # aiokafka's admin client asserts a created topic's error message is null.
    async def create() -> Any:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            return await admin.create_topics([AioNewTopic(f"aio-{uuid.uuid4().hex[:8]}", 1, 1)])
        finally:
            await admin.close()

    response = asyncio.run(create())
    [(_name, code, message)] = response.topic_errors
    assert (code, message) == (0, None)


def test_acl_answers_have_kafkas_error_message() -> None:
    # AclApis: a created ACL's result and DescribeAcls leave the message at its default, "";
    # DeleteAcls sets ApiError.NONE's, null.
    config = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    config["allow.everyone.if.no.acl.found"] = "true"
    acl = dict(resource_type=2, resource_name="acl-topic", principal="User:alice", host="*")
    acl.update(operation=3, permission_type=3)  # READ, ALLOW
    c, d, x = messages.CreateAclsRequest, messages.DescribeAclsRequest, messages.DeleteAclsRequest
    with Broker(config=config, log_level="INFO") as b, RawClient(b.bootstrap) as raw:
        creation = c.AclCreation(resource_pattern_type=3, **acl)
        [made] = raw.call(api_keys.CREATE_ACLS, 3, c(creations=[creation])).results
        assert (made.error_code, made.error_message) == (0, ""), made
        asked = dict(resource_type_filter=2, resource_name_filter="acl-topic")
        asked.update(principal_filter=None, host_filter=None, operation=1, permission_type=1)
        described = raw.call(api_keys.DESCRIBE_ACLS, 3, d(pattern_type_filter=3, **asked))
        assert (described.error_code, described.error_message) == (0, ""), described
        assert [r.resource_name for r in described.resources] == ["acl-topic"]
        filters = [x.DeleteAclsFilter(pattern_type_filter=3, **asked)]
        [deleted] = raw.call(api_keys.DELETE_ACLS, 3, x(filters=filters)).filter_results
        assert (deleted.error_code, deleted.error_message) == (0, None), deleted
        [matching] = deleted.matching_acls
        assert (matching.error_code, matching.error_message) == (0, None), matching
