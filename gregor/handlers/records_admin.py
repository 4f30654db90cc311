"""DeleteRecords v0-2 and OffsetForLeaderEpoch v2-4: moving the log start, finding epoch ends.

DeleteRecords: offset -1 means the high watermark; the new low watermark is returned; an offset
above the high watermark is OFFSET_OUT_OF_RANGE; an internal topic's records are not a client's
to delete (INVALID_TOPIC_EXCEPTION, as Kafka). v2 flexible. OffsetForLeaderEpoch: the end
offset of the largest epoch <= the asked one (a follower or consumer checking for truncation);
v3 replica_id, v4 flexible.
"""

from __future__ import annotations

from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.registry import handles
from gregor.metadata.store import INTERNAL_TOPICS
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import DeleteRecordsResponse, OffsetForLeaderEpochResponse
from gregor.security.acls import CLUSTER_ACTION, DELETE, DESCRIBE


@handles(api_keys.DELETE_RECORDS)
def delete_records(ctx: RequestContext, request: Any) -> Any:
    R = DeleteRecordsResponse
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            low, code = -1, errors.NONE
            try:
                ctx.check_topic(DELETE, t.name)
                if t.name in INTERNAL_TOPICS:  # as Kafka: only the coordinators trim them
                    raise KafkaError(
                        errors.INVALID_TOPIC_EXCEPTION,
                        f"Cannot delete records of internal topic {t.name}",
                    )
                partition = ctx.services.replicas.leader(t.name, p.partition_index)
                log = partition.log
                target = log.high_watermark if p.offset == -1 else p.offset
                if target < 0:
                    raise KafkaError(errors.OFFSET_OUT_OF_RANGE, f"offset {p.offset} is negative")
                low = log.increment_log_start_offset(target)
            except KafkaError as exc:
                code = exc.code
            parts.append(
                R.DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=low, error_code=code
                )
            )
        topics.append(R.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    ctx.services.logs.checkpoint()
    return R(topics=topics)


@handles(api_keys.OFFSET_FOR_LEADER_EPOCH)
def offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    R = OffsetForLeaderEpochResponse
    topics = []
    # a follower's (replica_id >= 0) needs CLUSTER_ACTION, a consumer's DESCRIBE on the topic
    follower = request.replica_id >= 0 if ctx.version >= 3 else False
    cluster_ok = follower and ctx.authorize_cluster(CLUSTER_ACTION)
    for t in request.topics:
        parts = []
        for p in t.partitions:
            epoch, end, code = -1, -1, errors.NONE
            try:
                if follower and not cluster_ok:
                    raise KafkaError(errors.TOPIC_AUTHORIZATION_FAILED, "")
                if not follower:
                    ctx.check_topic(DESCRIBE, t.topic)
                partition = ctx.services.replicas.leader(t.topic, p.partition)
                if p.current_leader_epoch >= 0 and p.current_leader_epoch > partition.leader_epoch:
                    raise KafkaError(errors.UNKNOWN_LEADER_EPOCH, "")
                if p.current_leader_epoch >= 0 and p.current_leader_epoch < partition.leader_epoch:
                    raise KafkaError(errors.FENCED_LEADER_EPOCH, "")
                log = partition.log
                epoch, end = log.leader_epochs.end_offset_for(p.leader_epoch, log.log_end_offset)
            except KafkaError as exc:
                code = exc.code
            parts.append(
                R.EpochEndOffset(
                    error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end
                )
            )
        topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return R(topics=topics)
