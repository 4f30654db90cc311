"""Fetch v4-17: record data for consumers and follower replicas, zero-copy from the segment files.

v4: isolation_level, last_stable_offset, aborted_transactions: a read_committed fetch reads up to
the last stable offset and lists the aborted transactions that start below it and end at or
after the fetch offset (from the segments' .txnindex), so the client drops their records; a
read_uncommitted one reads to the high watermark, aborted_transactions null (as Kafka). v5: log_start_offset. v7: fetch
sessions (KIP-227): we answer every request with session id 0, which tells the client no
session was made, so it keeps sending full requests, as Kafka allows. v9: current_leader_epoch
(older than ours: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH; the client refreshes its
metadata). v11: rack_id, preferred_read_replica (always -1: no follower fetching, KIP-392).
v12: flexible; last_fetched_epoch, diverging_epoch. v13: topic ids instead of names. v15:
replica_state. v16: node_endpoints. v17: replica_directory_id.

Consumers read only from the leader (NOT_LEADER_OR_FOLLOWER elsewhere). A Fetch with a replica
id (`replica_id` >= 0 before v15, `replica_state.replica_id` from v15) is a follower's: it
reads to the log end, its fetch offset becomes that follower's log end offset on the leader
(which may move the high watermark or add it to the ISR), and a `last_fetched_epoch` whose
history diverges from ours gets `diverging_epoch` and no records (replication/partition.py).

Sizes: each partition gets at most partition_max_bytes and the response at most max_bytes, but
the first partition with data always gets at least one whole batch (KIP-74). Fewer than
min_bytes ready: the request waits up to max_wait_ms, woken by an append to a partition it
reads or a move of its high watermark. Record data leaves as file slices the runtime
`sendfile`s; the fds are duplicated here, and the runtime closes them once sent, so a segment
deleted meanwhile is still readable.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import FetchResponse
from gregor.replication.partition import Partition

TopicResp = FetchResponse.FetchableTopicResponse
PartResp = FetchResponse.PartitionData
Aborted = FetchResponse.AbortedTransaction
Diverging = FetchResponse.EpochEndOffset
READ_COMMITTED = 1


def _resolve_topics(ctx: RequestContext, request: Any) -> list[tuple[str | None, Any]]:
    """(topic name or None if unknown, the request topic) for every requested topic."""
    out = []
    store = ctx.broker.store
    for t in request.topics:
        if ctx.version >= 13:
            info = store.topic_by_id(t.topic_id)
            out.append((info.name if info else None, t))
        else:
            out.append((t.topic, t))
    return out


def _replica_of(ctx: RequestContext, request: Any) -> tuple[int, int]:
    """(replica id, broker epoch) of a follower's Fetch; replica id -1 for a consumer."""
    if ctx.version >= 15:
        state = request.replica_state
        return (state.replica_id, state.replica_epoch) if state is not None else (-1, -1)
    return request.replica_id, -1


def _collect(
    ctx: RequestContext, request: Any, topics: list[tuple[str | None, Any]], first: bool = True
) -> tuple[list[Any], int, list[Partition]]:
    replicas = ctx.broker.replicas
    read_committed = ctx.version >= 4 and request.isolation_level == READ_COMMITTED
    replica_id, broker_epoch = _replica_of(ctx, request)
    now = ctx.broker.now_ms()
    budget = request.max_bytes if ctx.version >= 3 else 0x7FFFFFFF
    total = 0
    responses = []
    partitions: list[Partition] = []
    for name, t in topics:
        parts = []
        for fp in t.partitions:
            records: Any = b""
            aborted: list[Any] | None = None
            diverging: Any = None
            hw = lso = start = -1
            code = errors.NONE
            if name is None:
                code = errors.UNKNOWN_TOPIC_ID
            else:
                p = replicas.get(name, fp.partition)
                if p is None:
                    code = errors.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    partitions.append(p)
                    log = p.log
                    hw, start, lso = (
                        log.high_watermark,
                        log.log_start_offset,
                        log.last_stable_offset,
                    )
                    leader_epoch = fp.current_leader_epoch if ctx.version >= 9 else -1
                    try:
                        limit = min(fp.partition_max_bytes, budget - total)
                        found = None
                        if replica_id >= 0:
                            read = p.fetch_for_follower(
                                replica_id,
                                broker_epoch,
                                fp.fetch_offset,
                                fp.last_fetched_epoch if ctx.version >= 12 else -1,
                                leader_epoch,
                                fp.log_start_offset,
                                max(limit, 1),
                                total == 0,
                                now,
                                update_fetch_state=first,
                            )
                            hw, start, lso = (
                                read.high_watermark,
                                read.log_start_offset,
                                read.last_stable_offset,
                            )
                            found = read.records if limit > 0 or total == 0 else None
                            if read.diverging_epoch is not None:
                                diverging = Diverging(
                                    epoch=read.diverging_epoch[0],
                                    end_offset=read.diverging_epoch[1],
                                )
                        else:
                            p.check_leader_epoch(leader_epoch)
                            if limit > 0 or total == 0:
                                found = p.read(
                                    fp.fetch_offset,
                                    max(limit, 1),
                                    min_one_batch=total == 0,
                                    read_committed=read_committed,
                                )
                        if found is not None:
                            records = found.dup()
                            total += found.length
                            if read_committed:
                                aborted = [
                                    Aborted(producer_id=a.producer_id, first_offset=a.first_offset)
                                    for a in log.collect_aborted_transactions(fp.fetch_offset, lso)
                                ]
                        elif read_committed:
                            aborted = []
                    except KafkaError as exc:
                        code = exc.code
            part = PartResp(
                partition_index=fp.partition,
                error_code=code,
                high_watermark=hw,
                last_stable_offset=lso,
                log_start_offset=start,
                aborted_transactions=aborted,
                records=records,
            )
            if diverging is not None:
                part.diverging_epoch = diverging
            parts.append(part)
        if ctx.version >= 13:
            responses.append(TopicResp(topic_id=t.topic_id, partitions=parts))
        else:
            responses.append(TopicResp(topic=name, partitions=parts))
    return responses, total, partitions


def _close(responses: list[Any]) -> None:
    import os

    for t in responses:
        for p in t.partitions:
            if not isinstance(p.records, (bytes, bytearray, memoryview)) and p.records is not None:
                os.close(p.records.fd)


@handles(api_keys.FETCH)
def handle(ctx: RequestContext, request: Any) -> Any:
    topics = _resolve_topics(ctx, request)
    responses, total, partitions = _collect(ctx, request, topics)
    if (
        total >= request.min_bytes
        or request.max_wait_ms <= 0
        or not partitions
        or _has_error(responses)
    ):
        return _response(responses)
    _close(responses)
    return _wait(ctx, request, topics, partitions)


def _has_error(responses: list[Any]) -> bool:
    """An error or a diverging epoch: an answer the client must act on, sent without waiting."""
    return any(
        p.error_code or p.diverging_epoch.epoch >= 0 for t in responses for p in t.partitions
    )


async def _wait(
    ctx: RequestContext,
    request: Any,
    topics: list[tuple[str | None, Any]],
    partitions: list[Partition],
) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000.0
    while True:
        woken = loop.create_future()

        def wake(f: asyncio.Future[None] = woken) -> None:
            if not f.done():
                f.set_result(None)

        for p in partitions:
            p.watch(wake)
        try:
            await asyncio.wait_for(asyncio.shield(woken), max(0.0, deadline - loop.time()))
        except TimeoutError:
            pass
        finally:
            for p in partitions:
                p.unwatch(wake)
        responses, total, partitions = _collect(ctx, request, topics, first=False)
        if total >= request.min_bytes or loop.time() >= deadline or _has_error(responses):
            return _response(responses)
        _close(responses)


def _response(responses: list[Any]) -> Any:
    return FetchResponse(error_code=errors.NONE, session_id=0, responses=responses)


__all__ = ["handle", "uuid"]
