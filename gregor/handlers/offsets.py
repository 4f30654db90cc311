"""Committed offsets: OffsetCommit v2-9, OffsetFetch v1-9, OffsetDelete v0. The rules live in
`gregor.coordinator`; this module translates.

OffsetCommit: v2-4 retention_time_ms (-1: offsets.retention.minutes); v6 committed_leader_epoch;
v7 group_instance_id; v8 flexible; v9 GROUP_ID_NOT_FOUND (instead of ILLEGAL_GENERATION) for an
unknown group with a generation. Standalone consumers and admin tools commit with generation -1
and no member id. Partitions of topics that do not exist get UNKNOWN_TOPIC_OR_PARTITION, as in
Kafka, and never reach the coordinator.
OffsetFetch: v2 null topics (all) and a top-level error; v5 committed_leader_epoch; v6 flexible;
v7 require_stable: a partition with an offset pending in an open transaction (TxnOffsetCommit)
answers UNSTABLE_OFFSET_COMMIT, which the client retries; without it, the last committed offset;
v8 several groups per request (KIP-709); v9 member id and epoch (KIP-848 groups only; a classic
group ignores them).
OffsetDelete: a group's offsets for some partitions (KIP-496); refused for topics a live
consumer group subscribes to (GROUP_SUBSCRIBED_TO_TOPIC).
With ACLs, as Kafka: OffsetCommit needs READ on the group and each topic, OffsetFetch DESCRIBE
on both (READ implies it), OffsetDelete DELETE on the group and READ on each topic.
The empty group id: OffsetCommit and OffsetFetch take it as any other (Kafka keeps it for old
clients); OffsetDelete refuses it with INVALID_GROUP_ID, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gregor.coordinator.group import codes
from gregor.coordinator.group.results import (
    FetchedOffset,
    OffsetCommitRequest,
    OffsetFetchResult,
    PartitionErrors,
)
from gregor.handlers.context import RequestContext
from gregor.handlers.groups import may_read_group, respond
from gregor.handlers.registry import handles, later
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import OffsetCommitResponse, OffsetDeleteResponse, OffsetFetchResponse
from gregor.replication.pending import Pending, all_of
from gregor.security.acls import DELETE, DESCRIBE, GROUP, READ, TOPIC


def _exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    info = ctx.services.store.topics.get(topic)
    return info is not None and 0 <= partition < info.partitions


def offsets_to_commit(
    ctx: RequestContext, topics: Any, with_epoch: bool
) -> list[tuple[str, int, int, int, str | None]]:
    """(topic, partition, offset, leader epoch, metadata) of the partitions that exist (the
    others are answered UNKNOWN_TOPIC_OR_PARTITION and never reach the coordinator); the epoch
    is -1 unless the request version carries it."""
    wanted = []
    for t in topics:
        for p in t.partitions:
            if _exists(ctx, t.name, p.partition_index):
                epoch = p.committed_leader_epoch if with_epoch else -1
                wanted.append(
                    (t.name, p.partition_index, p.committed_offset, epoch, p.committed_metadata)
                )
    return wanted


def partition_errors(
    topics: Any, topic_type: Any, partition_type: Any, error: Callable[[str, int], int]
) -> list[Any]:
    """A response's topics, each partition of the request with `error(topic, partition)`."""
    return [
        topic_type(
            name=t.name,
            partitions=[
                partition_type(
                    partition_index=p.partition_index, error_code=error(t.name, p.partition_index)
                )
                for p in t.partitions
            ],
        )
        for t in topics
    ]


def error_by_partition(res: PartitionErrors | None) -> Callable[[str, int], int]:
    """The coordinator's error of a partition; UNKNOWN_TOPIC_OR_PARTITION if it did not see it."""
    by_tp = {(t, p): e for t, p, e in res.partitions} if res is not None else {}
    return lambda topic, partition: by_tp.get((topic, partition), codes.UNKNOWN_TOPIC_OR_PARTITION)


def unreadable_topics(ctx: RequestContext, names: Any, operation: int = READ) -> set[str]:
    """The topics among `names` the caller may not READ (or `operation`; empty without an
    authorizer)."""
    if ctx.services.authorizer is None:
        return set()
    return {n for n in names if not ctx.authorize(operation, TOPIC, n)}


def may_describe_group(ctx: RequestContext, group_id: str) -> bool:
    """DESCRIBE on the group (READ implies it): what OffsetFetch needs, as in Kafka."""
    return ctx.authorize(DESCRIBE, GROUP, group_id)


def refused_topics(error: Callable[[str, int], int], denied: set[str]) -> Callable[[str, int], int]:
    """`error`, but TOPIC_AUTHORIZATION_FAILED for the partitions of `denied` topics."""
    if not denied:
        return error
    return lambda t, p: errors.TOPIC_AUTHORIZATION_FAILED if t in denied else error(t, p)


@handles(api_keys.OFFSET_COMMIT)
def offset_commit(ctx: RequestContext, request: Any) -> Any:
    v = ctx.version
    if not may_read_group(ctx, request.group_id):
        R = OffsetCommitResponse
        return R(
            topics=partition_errors(
                request.topics,
                R.OffsetCommitResponseTopic,
                R.OffsetCommitResponsePartition,
                lambda _t, _p: errors.GROUP_AUTHORIZATION_FAILED,
            )
        )
    denied = unreadable_topics(ctx, (t.name for t in request.topics))
    allowed = [t for t in request.topics if t.name not in denied]
    wanted = offsets_to_commit(ctx, allowed, with_epoch=v >= 6)
    r = OffsetCommitRequest(
        group_id=request.group_id,
        generation_id=request.generation_id_or_member_epoch,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if v >= 7 else None,
        retention_time_ms=request.retention_time_ms if v <= 4 else -1,
        offsets=wanted,
        api_version=v,
    )
    result = ctx.services.groups.commit_offsets(r, ctx.services.now_ms()) if wanted else None
    return respond(result, lambda res: _commit_response(request, res, denied))


def _commit_response(request: Any, res: PartitionErrors | None, denied: set[str]) -> Any:
    R = OffsetCommitResponse
    return R(
        topics=partition_errors(
            request.topics,
            R.OffsetCommitResponseTopic,
            R.OffsetCommitResponsePartition,
            refused_topics(error_by_partition(res), denied),
        )
    )


def _by_topic(offsets: list[FetchedOffset]) -> dict[str, list[FetchedOffset]]:
    out: dict[str, list[FetchedOffset]] = {}
    for o in offsets:
        out.setdefault(o.topic, []).append(o)
    return out


def _authorized_fetch(
    ctx: RequestContext, group_id: str, topics: list[tuple[str, list[int]]] | None, result: Any
) -> Any:
    """An OffsetFetch result as the caller may see it: GROUP_AUTHORIZATION_FAILED without
    DESCRIBE on the group; the partitions of topics it may not DESCRIBE are
    TOPIC_AUTHORIZATION_FAILED when named, left out when all were asked for (Kafka's
    KafkaApis)."""
    if not may_describe_group(ctx, group_id):
        return OffsetFetchResult(errors.GROUP_AUTHORIZATION_FAILED)
    if ctx.services.authorizer is None:
        return result

    def filtered(res: OffsetFetchResult) -> OffsetFetchResult:
        denied = unreadable_topics(ctx, {o.topic for o in res.offsets}, DESCRIBE)
        if not denied:
            return res
        kept = [
            FetchedOffset(o.topic, o.partition, -1, -1, "", errors.TOPIC_AUTHORIZATION_FAILED)
            if o.topic in denied
            else o
            for o in res.offsets
            if topics is not None or o.topic not in denied
        ]
        return OffsetFetchResult(res.error, kept)

    return later(result, filtered) if isinstance(result, Pending) else filtered(result)


@handles(api_keys.OFFSET_FETCH)
def offset_fetch(ctx: RequestContext, request: Any) -> Any:
    v = ctx.version
    groups = ctx.services.groups
    now = ctx.services.now_ms()
    if v >= 8:
        asked = [
            None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            for g in request.groups
        ]
        fetched = all_of({
            str(i): _authorized_fetch(
                ctx, g.group_id, asked[i],
                groups.fetch_offsets(g.group_id, asked[i], request.require_stable, now)
                if may_describe_group(ctx, g.group_id) else None,
            )
            for i, g in enumerate(request.groups)
        })  # fmt: skip
        return respond(fetched, lambda by_index: _fetch_groups_response(request, by_index))
    topics = (
        None
        if request.topics is None
        else [(t.name, list(t.partition_indexes)) for t in request.topics]
    )
    result = None
    if may_describe_group(ctx, request.group_id):
        result = groups.fetch_offsets(
            request.group_id, topics, v >= 7 and request.require_stable, now
        )
    result = _authorized_fetch(ctx, request.group_id, topics, result)
    return respond(result, lambda res: _fetch_response(v, topics, res))


def _fetch_groups_response(request: Any, by_index: dict[str, OffsetFetchResult]) -> Any:
    R = OffsetFetchResponse
    out = []
    for i, g in enumerate(request.groups):
        res = by_index[str(i)]
        out.append(
            R.OffsetFetchResponseGroup(
                group_id=g.group_id,
                error_code=res.error,
                topics=_topics(
                    res.offsets, R.OffsetFetchResponseTopics, R.OffsetFetchResponsePartitions
                ),
            )
        )
    return R(groups=out)


def _fetch_response(
    v: int, topics: list[tuple[str, list[int]]] | None, res: OffsetFetchResult
) -> Any:
    R = OffsetFetchResponse
    offsets = res.offsets
    if res.error and v < 2 and topics is not None:
        # v1 has no top-level error: every partition carries it.
        offsets = [FetchedOffset(t, p, -1, -1, "", res.error) for t, ps in topics for p in ps]
    return R(
        error_code=res.error,
        topics=_topics(offsets, R.OffsetFetchResponseTopic, R.OffsetFetchResponsePartition),
    )


def _topics(offsets: list[FetchedOffset], topic_cls: Any, partition_cls: Any) -> list[Any]:
    """OffsetFetch's topics (the struct names differ between the v8+ groups form and v1-7)."""
    return [
        topic_cls(
            name=name,
            partitions=[
                partition_cls(
                    partition_index=o.partition,
                    committed_offset=o.offset,
                    committed_leader_epoch=o.leader_epoch,
                    metadata=o.metadata,
                    error_code=o.error,
                )
                for o in parts
            ],
        )
        for name, parts in _by_topic(offsets).items()
    ]


@handles(api_keys.OFFSET_DELETE)
def offset_delete(ctx: RequestContext, request: Any) -> Any:
    """As Kafka: DELETE on the group (else GROUP_AUTHORIZATION_FAILED), READ on each topic
    (else TOPIC_AUTHORIZATION_FAILED for its partitions, which are left as they are)."""
    if not ctx.authorize(DELETE, GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=errors.GROUP_AUTHORIZATION_FAILED, topics=[])
    denied = unreadable_topics(ctx, (t.name for t in request.topics))
    wanted = [
        (
            t.name,
            [p.partition_index for p in t.partitions if _exists(ctx, t.name, p.partition_index)],
        )
        for t in request.topics
        if t.name not in denied
    ]
    result = ctx.services.groups.delete_offsets(request.group_id, wanted, ctx.services.now_ms())
    return respond(result, lambda res: _delete_response(request, res, denied))


def _delete_response(request: Any, res: PartitionErrors, denied: set[str]) -> Any:
    R = OffsetDeleteResponse
    if res.error:
        return R(error_code=res.error, topics=[])
    return R(
        error_code=codes.NONE,
        topics=partition_errors(
            request.topics,
            R.OffsetDeleteResponseTopic,
            R.OffsetDeleteResponsePartition,
            refused_topics(error_by_partition(res), denied),
        ),
    )
