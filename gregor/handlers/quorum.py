"""DescribeQuorum v0-2 (KIP-595) on the client listener: the metadata quorum as this node's Raft
node sees it (`kafka-metadata-quorum describe`, `gregor quorum describe`).

v0: leader, epoch, high watermark, each voter's and observer's log end offset. v1: their last
fetch and last caught-up times (KIP-836). v2: error messages, directory ids (sent as the zero
uuid, as raft/wire.py sends them) and the voters' listeners (none sent). The request must name
`__cluster_metadata` partition 0 only; anything else is answered UNKNOWN_TOPIC_OR_PARTITION for
what it named, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import DescribeQuorumResponse
from gregor.raft import wire
from gregor.security.acls import DESCRIBE

R = DescribeQuorumResponse


def _names_metadata_partition(request: Any) -> bool:
    topics = request.topics
    return (
        len(topics) == 1
        and topics[0].topic_name == wire.METADATA_TOPIC
        and [p.partition_index for p in topics[0].partitions] == [wire.METADATA_PARTITION]
    )


@handles(api_keys.DESCRIBE_QUORUM)
def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize_cluster(DESCRIBE):
        return R(error_code=errors.CLUSTER_AUTHORIZATION_FAILED, topics=[])
    if not _names_metadata_partition(request):
        return R(
            error_code=errors.NONE,
            topics=[
                R.TopicData(
                    topic_name=t.topic_name,
                    partitions=[
                        R.PartitionData(
                            partition_index=p.partition_index,
                            error_code=errors.UNKNOWN_TOPIC_OR_PARTITION,
                            leader_id=-1,
                            leader_epoch=-1,
                            high_watermark=-1,
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ],
        )
    quorum = ctx.services.store.describe_quorum(ctx.services.now_ms())
    return wire.to_response(quorum, ctx.version)
