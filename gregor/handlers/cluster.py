"""DescribeCluster v0-2, DescribeLogDirs v1-4, DescribeTopicPartitions v0: what is where.

DescribeCluster: v1 endpoint_type (brokers only; controllers are this same node), v2
include_fenced_brokers and is_fenced (KIP-1073); each broker at its endpoint on the listener the
request came in on. DescribeLogDirs:
v2 flexible, v3 error_code, v4 total_bytes/usable_bytes. DescribeTopicPartitions (KIP-966):
topics by name (all when the list is empty), paged by response_partition_limit and cursor.
"""

from __future__ import annotations

import os
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.metadata import topic_response
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import (
    DescribeClusterResponse,
    DescribeLogDirsResponse,
    DescribeTopicPartitionsResponse,
)
from gregor.security.acls import CLUSTER, CLUSTER_NAME, DESCRIBE, TOPIC


@handles(api_keys.DESCRIBE_CLUSTER)
def describe_cluster(ctx: RequestContext, request: Any) -> Any:
    b = ctx.services
    include_fenced = ctx.version >= 2 and request.include_fenced_brokers
    fenced = b.cluster.fenced_broker_ids() if include_fenced else set()
    response = DescribeClusterResponse(
        error_code=errors.NONE,
        endpoint_type=getattr(request, "endpoint_type", 1),
        cluster_id=b.cluster_id,
        controller_id=b.controller_id(ctx.listener_name),
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=n, host=h, port=p, rack=rack, is_fenced=n in fenced
            )
            for n, h, p, rack in b.cluster.brokers(ctx.listener_name, include_fenced=include_fenced)
        ],
    )
    if request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = ctx.authorized_operations(CLUSTER, CLUSTER_NAME)
    return response


@handles(api_keys.DESCRIBE_LOG_DIRS)
def describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    R = DescribeLogDirsResponse
    if not ctx.authorize_cluster(DESCRIBE):
        return R(error_code=errors.CLUSTER_AUTHORIZATION_FAILED, results=[])
    logs = ctx.services.logs
    wanted: set[tuple[str, int]] | None = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    results = []
    for d in logs.log_dirs:
        if d in logs.offline_dirs:  # as Kafka: the dir, its error, nothing more
            results.append(
                R.DescribeLogDirsResult(error_code=errors.KAFKA_STORAGE_ERROR, log_dir=d, topics=[])
            )
            continue
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), lg in logs.partitions():
            if logs.dir_of(topic, index) != d or (
                wanted is not None and (topic, index) not in wanted
            ):
                continue
            by_topic.setdefault(topic, []).append(
                R.DescribeLogDirsPartition(
                    partition_index=index,
                    partition_size=lg.size_in_bytes,
                    offset_lag=0,
                    is_future_key=False,
                )
            )
        st = os.statvfs(d)
        results.append(
            R.DescribeLogDirsResult(
                error_code=errors.NONE,
                log_dir=d,
                topics=[
                    R.DescribeLogDirsTopic(name=t, partitions=ps)
                    for t, ps in sorted(by_topic.items())
                ],
                total_bytes=st.f_blocks * st.f_frsize,
                usable_bytes=st.f_bavail * st.f_frsize,
            )
        )
    return R(error_code=errors.NONE, results=results)


@handles(api_keys.DESCRIBE_TOPIC_PARTITIONS)
def describe_topic_partitions(ctx: RequestContext, request: Any) -> Any:
    R = DescribeTopicPartitionsResponse
    store = ctx.services.store
    names = [t.name for t in request.topics] if request.topics else sorted(store.topics)
    if not request.topics and ctx.services.authorizer is not None:  # those it may describe
        names = [n for n in names if ctx.authorize(DESCRIBE, TOPIC, n)]
    names = sorted(names)
    cursor = request.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    limit = max(1, request.response_partition_limit)
    topics = []
    next_cursor = None
    for name in names:
        info = store.topics.get(name)
        denied = not ctx.authorize(DESCRIBE, TOPIC, name)
        if info is None or denied:
            code = (
                errors.TOPIC_AUTHORIZATION_FAILED if denied else errors.UNKNOWN_TOPIC_OR_PARTITION
            )
            topics.append(
                R.DescribeTopicPartitionsResponseTopic(error_code=code, name=name, partitions=[])
            )
            continue
        meta = topic_response(ctx, info)
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        parts = []
        for mp in meta.partitions[start:]:
            if limit == 0:
                next_cursor = R.Cursor(topic_name=name, partition_index=mp.partition_index)
                break
            parts.append(
                R.DescribeTopicPartitionsResponsePartition(
                    error_code=mp.error_code,
                    partition_index=mp.partition_index,
                    leader_id=mp.leader_id,
                    leader_epoch=mp.leader_epoch,
                    replica_nodes=mp.replica_nodes,
                    isr_nodes=mp.isr_nodes,
                    eligible_leader_replicas=None,
                    last_known_elr=None,
                    offline_replicas=[],
                )
            )
            limit -= 1
        topics.append(
            R.DescribeTopicPartitionsResponseTopic(
                error_code=errors.NONE,
                name=name,
                topic_id=info.topic_id,
                is_internal=info.internal,
                partitions=parts,
                topic_authorized_operations=ctx.authorized_operations(TOPIC, name),
            )
        )
        if next_cursor is not None:
            break
    return R(topics=topics, next_cursor=next_cursor)
