"""TxnOffsetCommit v0-5: a transactional producer commits a consumer group's offsets as part of
its transaction (`sendOffsetsToTransaction`). The rules live in `gregor.coordinator`; this
module translates.

v2 committed_leader_epoch; v3 flexible, and generation_id / member_id / group_instance_id, which
the coordinator checks against a classic group as OffsetCommit does (KIP-447: a zombie member
is fenced with ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID); v4 and v5 as v3.
Partitions of topics that do not exist get UNKNOWN_TOPIC_OR_PARTITION and never reach the
coordinator, as in Kafka. Before v2, COORDINATOR_LOAD_IN_PROGRESS is answered as
COORDINATOR_NOT_AVAILABLE (clients older than 2.0 did not retry the former; Kafka does the same).

The offsets stay pending -- OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for
them -- until the transaction coordinator's COMMIT or ABORT marker reaches the group's
`__consumer_offsets` partition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gregor.coordinator.group import codes
from gregor.coordinator.group.results import PartitionErrors, TxnOffsetCommitRequest
from gregor.handlers.context import RequestContext
from gregor.handlers.groups import may_read_group, respond
from gregor.handlers.offsets import (
    error_by_partition,
    offsets_to_commit,
    partition_errors,
    refused_topics,
    unreadable_topics,
)
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import TxnOffsetCommitResponse
from gregor.security.acls import TRANSACTIONAL_ID, WRITE


@handles(api_keys.TXN_OFFSET_COMMIT)
def txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    v = ctx.version
    refusal = 0
    if not ctx.authorize(WRITE, TRANSACTIONAL_ID, request.transactional_id):
        refusal = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not may_read_group(ctx, request.group_id):
        refusal = errors.GROUP_AUTHORIZATION_FAILED
    if refusal:
        return _response(v, request, None, lambda _t, _p: refusal)
    denied = unreadable_topics(ctx, (t.name for t in request.topics))
    allowed = [t for t in request.topics if t.name not in denied]
    wanted = offsets_to_commit(ctx, allowed, with_epoch=v >= 2)
    r = TxnOffsetCommitRequest(
        group_id=request.group_id,
        producer_id=request.producer_id,
        producer_epoch=request.producer_epoch,
        generation_id=request.generation_id if v >= 3 else -1,
        member_id=request.member_id if v >= 3 else "",
        group_instance_id=request.group_instance_id if v >= 3 else None,
        offsets=wanted,
        transactional_id=request.transactional_id,
    )
    result = ctx.services.groups.txn_offset_commit(r, ctx.services.now_ms()) if wanted else None
    return respond(result, lambda res: _response(v, request, res, refused_topics(
        error_by_partition(res), denied)))  # fmt: skip


def _response(
    v: int, request: Any, res: PartitionErrors | None, coordinator_error: Callable[[str, int], int]
) -> Any:

    def error(topic: str, partition: int) -> int:
        code = coordinator_error(topic, partition)
        if v < 2 and code == codes.COORDINATOR_LOAD_IN_PROGRESS:
            return codes.COORDINATOR_NOT_AVAILABLE
        return code

    R = TxnOffsetCommitResponse
    return R(
        topics=partition_errors(
            request.topics,
            R.TxnOffsetCommitResponseTopic,
            R.TxnOffsetCommitResponsePartition,
            error,
        )
    )
