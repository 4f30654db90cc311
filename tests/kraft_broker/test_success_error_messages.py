"""What a successful answer says in its error_message, as Kafka's broker and controller say it:
null where they set the error's message (ApiError.NONE has none) or the field defaults to null
(CreateTopics, CreatePartitions, DeleteTopics, AlterConfigs, IncrementalAlterConfigs, Produce,
DescribeCluster, DescribeProducers); "" where Kafka leaves a field whose schema default is ""
(DescribeConfigs). aiokafka's admin client asserts CreateTopics' null."""

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
