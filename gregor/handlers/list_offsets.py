"""ListOffsets v1-9: the offset for a time, or for one of the special times.

timestamp -1 latest (the high watermark, or the last stable offset for read_committed), -2
earliest (log start), -3 the record with the largest timestamp (v7, KIP-734), -4 earliest
local (v8), -5 latest tiered (v9; no tiered storage, so -1). v2: isolation_level. v4:
current_leader_epoch, leader_epoch. v6: flexible. A time later than every record's gives
offset -1, timestamp -1.
"""

from __future__ import annotations

from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import ListOffsetsResponse
from gregor.security.acls import DESCRIBE
from gregor.storage import log as storage_log

TopicResp = ListOffsetsResponse.ListOffsetsTopicResponse
PartResp = ListOffsetsResponse.ListOffsetsPartitionResponse


@handles(api_keys.LIST_OFFSETS)
def handle(ctx: RequestContext, request: Any) -> Any:
    replicas = ctx.services.replicas
    read_committed = ctx.version >= 2 and request.isolation_level == 1
    topics = []
    for t in request.topics:
        parts = []
        for rp in t.partitions:
            offset, ts, epoch, code = -1, -1, -1, errors.NONE
            try:
                ctx.check_topic(DESCRIBE, t.name)
                p = replicas.leader(t.name, rp.partition_index)
                log = p.log
                epoch = p.leader_epoch
                # The offsets a consumer of this isolation level may read below.
                upper = log.last_stable_offset if read_committed else log.high_watermark
                if rp.timestamp == storage_log.LATEST_TIMESTAMP:
                    offset = upper
                elif rp.timestamp == storage_log.LATEST_TIERED_TIMESTAMP:
                    offset = -1
                else:
                    found = log.offset_for_timestamp(rp.timestamp)
                    if found is not None and (found[0] < upper or rp.timestamp < -1):
                        offset, ts = found
                        epoch = log.leader_epochs.latest_epoch
            except KafkaError as exc:
                code = exc.code
            parts.append(
                PartResp(
                    partition_index=rp.partition_index,
                    error_code=code,
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=epoch,
                )
            )
        topics.append(TopicResp(name=t.name, partitions=parts))
    return ListOffsetsResponse(topics=topics)
