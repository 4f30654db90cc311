"""DescribeProducers v0 (KIP-664): the active producers of partitions this broker leads.

v0 only, always flexible. Each partition's leader answers from its producer state
(storage/producer_state.py): producer id, epoch, last sequence written, last timestamp, the
coordinator epoch of its last transaction marker and the first offset of its open transaction
(-1 for none). A partition we do not host is UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import DescribeProducersResponse
from gregor.security.acls import READ

R = DescribeProducersResponse


@handles(api_keys.DESCRIBE_PRODUCERS)
def handle(ctx: RequestContext, request: Any) -> Any:
    topics = []
    for t in request.topics:
        parts = []
        for index in t.partition_indexes:
            code, message, active = errors.NONE, None, []
            try:
                ctx.check_topic(READ, t.name)
                state = ctx.services.replicas.leader(t.name, index).log.producer_state
                active = [
                    R.ProducerState(
                        producer_id=pid,
                        producer_epoch=e.producer_epoch,
                        last_sequence=e.last_seq,
                        last_timestamp=e.last_timestamp,
                        coordinator_epoch=e.coordinator_epoch,
                        current_txn_start_offset=e.current_txn_first_offset,
                    )
                    for pid, e in sorted(state.active_producers().items())
                ]
            except KafkaError as exc:
                code, message = exc.code, exc.message
            parts.append(
                R.PartitionResponse(
                    partition_index=index,
                    error_code=code,
                    error_message=message,
                    active_producers=active,
                )
            )
        topics.append(R.TopicResponse(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
