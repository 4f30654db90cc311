"""Metadata v0-12: this broker, and the topics asked for with their partitions' leaders.

v0: an empty topic list means all topics; v1+: null means all, empty means none.
v4+: allow_auto_topic_creation (with the broker's auto.create.topics.enable). v10+: topic ids.
v12: topics may be named by id only. Brokers are named at their endpoints on the listener the
request came in on (one without it is left out; a partition led by one answers
LISTENER_NOT_FOUND, v6+, as Kafka). Unknown topics get UNKNOWN_TOPIC_OR_PARTITION (or
UNKNOWN_TOPIC_ID), illegal names INVALID_TOPIC_EXCEPTION.

With an authorizer (as Kafka's KafkaApis): all topics means those the caller may DESCRIBE; a
topic named without DESCRIBE gets TOPIC_AUTHORIZATION_FAILED, one named by id UNKNOWN_TOPIC_ID;
auto-creation needs CREATE on the cluster or the topic. v8+: topic_authorized_operations (and,
v8-10, cluster_authorized_operations) when asked.
"""

from __future__ import annotations

import uuid
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.controller_writes import answer_once_hosted
from gregor.handlers.metadata_partitions import leader_error
from gregor.handlers.registry import handles
from gregor.metadata.store import TopicInfo, validate_topic_name
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import MetadataResponse
from gregor.security.acls import CLUSTER, CLUSTER_NAME, CREATE, DESCRIBE, TOPIC

ZERO_UUID = uuid.UUID(int=0)
Topic = MetadataResponse.MetadataResponseTopic
Part = MetadataResponse.MetadataResponsePartition


def topic_response(ctx: RequestContext, info: TopicInfo) -> Any:
    """A topic's answer as message objects, one per partition (DescribeTopicPartitions reads
    them; Metadata's answers are these, encoded: `_topic_answer`)."""
    parts = []
    image_topic = ctx.services.store.image.topic(info.name)
    for index, replicas in enumerate(info.replicas):
        p = ctx.services.replicas.get(info.name, index)
        reg = image_topic.partitions.get(index) if image_topic is not None else None
        if p is None and reg is not None and ctx.services.store.networked:
            # led by another node (or by none): what the metadata says
            error = _leader_error(ctx, reg.leader)
            parts.append(
                Part(
                    error_code=error,
                    partition_index=index,
                    leader_id=reg.leader if error == errors.NONE else -1,
                    leader_epoch=reg.leader_epoch,
                    replica_nodes=list(reg.replicas),
                    isr_nodes=list(reg.isr),
                    offline_replicas=[],
                )
            )
            continue
        parts.append(
            Part(
                error_code=errors.NONE if p is not None else errors.LEADER_NOT_AVAILABLE,
                partition_index=index,
                leader_id=p.leader_id if p is not None else -1,
                leader_epoch=p.leader_epoch if p is not None else -1,
                replica_nodes=list(replicas),
                isr_nodes=list(p.isr) if p is not None else [],
                offline_replicas=[],
            )
        )
    return _topic(info, parts)


def _topic(info: TopicInfo, partitions: Any) -> Any:
    """A topic's answer without an error: its name, id, whether internal, and `partitions`."""
    return Topic(
        error_code=errors.NONE,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.internal,
        partitions=partitions,
    )


def _leader_error(ctx: RequestContext, leader: int) -> int:
    """`leader_error` (metadata_partitions.py) for the request's listener and version."""
    return leader_error(ctx.services.store.image, leader, ctx.listener_name, ctx.version)


def _topic_answer(ctx: RequestContext, info: TopicInfo) -> Any:
    """What `topic_response` answers, its partitions as their bytes kept per topic
    (metadata_partitions.py)."""
    services = ctx.services
    partitions = services.partition_arrays.partitions(
        services.replicas, services.store, info, ctx.version, ctx.listener_name
    )
    return _topic(info, partitions)


def _error(code: int, name: str | None, topic_id: uuid.UUID = ZERO_UUID) -> Any:
    return Topic(error_code=code, name=name, topic_id=topic_id, partitions=[])


def _named_topic(ctx: RequestContext, name: str, auto: bool, created: list[str]) -> Any:
    """The answer for a topic asked for by name: TOPIC_AUTHORIZATION_FAILED without DESCRIBE on
    it (existing or not, so nothing leaks), auto-created when allowed (which needs CREATE on
    the cluster or on the topic, as Kafka; its name goes to `created`), else
    UNKNOWN_TOPIC_OR_PARTITION."""
    services = ctx.services
    if not ctx.authorize(DESCRIBE, TOPIC, name):
        return _error(errors.TOPIC_AUTHORIZATION_FAILED, name)
    info = services.store.topics.get(name)
    if info is None:
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            return _error(exc.code, name)
        if auto:
            if not (ctx.authorize_cluster(CREATE) or ctx.authorize(CREATE, TOPIC, name)):
                return _error(errors.TOPIC_AUTHORIZATION_FAILED, name)
            try:
                info = services.maybe_auto_create(name)
            except KafkaError as exc:  # e.g. LEADER_NOT_AVAILABLE: being created
                return _error(exc.code, name)
            if info is not None:
                created.append(name)
    if info is None:
        return _error(errors.UNKNOWN_TOPIC_OR_PARTITION, name)
    return _topic_answer(ctx, info)


@handles(api_keys.METADATA)
def handle(ctx: RequestContext, request: Any) -> Any:
    """With one voter, an answer that auto-created a topic waits until this node hosts its
    partitions, then is made anew (controller_writes.py): it names their leaders."""
    created: list[str] = []
    response = _answer(ctx, request, created)
    return answer_once_hosted(ctx, created, response, lambda: _answer(ctx, request, []))


def _answer(ctx: RequestContext, request: Any, created: list[str]) -> Any:
    services = ctx.services
    store = services.store
    topics: list[Any] = []
    wanted = request.topics
    if wanted is None or (ctx.version == 0 and not wanted):
        # every topic the caller may describe; the others are left out, as Kafka leaves them
        everything = services.authorizer is None
        topics = [
            _topic_answer(ctx, t)
            for t in store.topics.values()
            if everything or ctx.authorize(DESCRIBE, TOPIC, t.name)
        ]
    else:
        auto = request.allow_auto_topic_creation if ctx.version >= 4 else True
        for t in wanted:
            if t.name is not None:
                topics.append(_named_topic(ctx, t.name, auto, created))
                continue
            info = store.topic_by_id(t.topic_id)
            if info is None or not ctx.authorize(DESCRIBE, TOPIC, info.name):
                topics.append(_error(errors.UNKNOWN_TOPIC_ID, None, t.topic_id))
            else:
                topics.append(_topic_answer(ctx, info))
    response = MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(node_id=n, host=h, port=p, rack=rack)
            for n, h, p, rack in services.cluster_brokers(ctx.listener_name)
        ],
        cluster_id=services.cluster_id,
        controller_id=services.controller_id(ctx.listener_name),
        topics=topics,
    )
    if ctx.version >= 8:
        _authorized_operations(ctx, request, response)
    return response


def _authorized_operations(ctx: RequestContext, request: Any, response: Any) -> None:
    """What the caller may do with each topic, and (v8-10) the cluster, when asked."""
    if request.include_topic_authorized_operations:
        for t in response.topics:
            if t.error_code == errors.NONE and t.name is not None:
                t.topic_authorized_operations = ctx.authorized_operations(TOPIC, t.name)
    if ctx.version <= 10 and request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = ctx.authorized_operations(CLUSTER, CLUSTER_NAME)
