"""Metadata v0-12: this broker, and the topics asked for with their partitions' leaders.

v0: an empty topic list means all topics; v1+: null means all, empty means none.
v4+: allow_auto_topic_creation (with the broker's auto.create.topics.enable). v10+: topic ids.
v12: topics may be named by id only. Unknown topics get UNKNOWN_TOPIC_OR_PARTITION (or
UNKNOWN_TOPIC_ID), illegal names INVALID_TOPIC_EXCEPTION.
"""

from __future__ import annotations

import uuid
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.registry import handles
from gregor.metadata.store import TopicInfo, validate_topic_name
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import MetadataResponse

ZERO_UUID = uuid.UUID(int=0)
Topic = MetadataResponse.MetadataResponseTopic
Part = MetadataResponse.MetadataResponsePartition


def topic_response(ctx: RequestContext, info: TopicInfo) -> Any:
    parts = []
    image_topic = ctx.services.store.image.topic(info.name)
    for index, replicas in enumerate(info.replicas):
        p = ctx.services.replicas.get(info.name, index)
        reg = image_topic.partitions.get(index) if image_topic is not None else None
        if p is None and reg is not None and ctx.services.store.networked:
            # led by another node (or by none): what the metadata says
            parts.append(
                Part(
                    error_code=errors.NONE if reg.leader >= 0 else errors.LEADER_NOT_AVAILABLE,
                    partition_index=index,
                    leader_id=reg.leader,
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
    return Topic(
        error_code=errors.NONE,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.internal,
        partitions=parts,
    )


@handles(api_keys.METADATA)
def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    store = services.store
    topics: list[Any] = []
    wanted = request.topics
    if wanted is None or (ctx.version == 0 and not wanted):
        topics = [topic_response(ctx, t) for t in store.topics.values()]
    else:
        auto = request.allow_auto_topic_creation if ctx.version >= 4 else True
        for t in wanted:
            name = t.name
            if name is None:
                info = store.topic_by_id(t.topic_id)
                if info is None:
                    topics.append(
                        Topic(
                            error_code=errors.UNKNOWN_TOPIC_ID,
                            name=None,
                            topic_id=t.topic_id,
                            partitions=[],
                        )
                    )
                else:
                    topics.append(topic_response(ctx, info))
                continue
            info = store.topics.get(name)
            if info is None:
                try:
                    validate_topic_name(name)
                except KafkaError as exc:
                    topics.append(
                        Topic(error_code=exc.code, name=name, topic_id=ZERO_UUID, partitions=[])
                    )
                    continue
                if auto:
                    try:
                        info = services.maybe_auto_create(name)
                    except KafkaError as exc:  # e.g. LEADER_NOT_AVAILABLE: being created
                        topics.append(
                            Topic(error_code=exc.code, name=name, topic_id=ZERO_UUID, partitions=[])
                        )
                        continue
            if info is None:
                topics.append(
                    Topic(
                        error_code=errors.UNKNOWN_TOPIC_OR_PARTITION,
                        name=name,
                        topic_id=ZERO_UUID,
                        partitions=[],
                    )
                )
            else:
                topics.append(topic_response(ctx, info))
    return MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(node_id=n, host=h, port=p, rack=rack)
            for n, h, p, rack in services.cluster_brokers()
        ],
        cluster_id=services.cluster_id,
        controller_id=services.controller_id(),
        topics=topics,
    )
