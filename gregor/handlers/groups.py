"""The classic group protocol: FindCoordinator v0-6, JoinGroup v0-9, SyncGroup v0-5, Heartbeat
v0-4, LeaveGroup v0-5. The rules live in `gregor.coordinator`; this module translates.

FindCoordinator: v1 key_type, error_message; v3 flexible; v4 batched coordinator_keys (KIP-699);
v6 share groups (key_type 2, not served). The coordinator is named at its endpoint on the
listener the request came in on (COORDINATOR_NOT_AVAILABLE when it has none, as Kafka). The
first FindCoordinator for a group creates `__consumer_offsets`; the first for a transactional id
(key_type 1) creates `__transaction_state`.
JoinGroup: v0 has no rebalance_timeout_ms (the session timeout serves); v4 MEMBER_ID_REQUIRED
(KIP-394); v5 group_instance_id (KIP-345); v6 flexible; v7 protocol_type in the response (the
protocol name is nullable from v7, "" before); v8 reason; v9 skip_assignment (KIP-814).
SyncGroup: v3 group_instance_id; v5 protocol_type/protocol_name, checked against the group's.
Heartbeat: v3 group_instance_id. LeaveGroup: v3 a batch of members by id or instance id, with
per-member errors (v0-2: one member, its error at the top level); v5 reason. JoinGroup,
SyncGroup, Heartbeat and LeaveGroup refuse the empty group id (INVALID_GROUP_ID); FindCoordinator
answers for it, as Kafka does (old clients commit offsets to it).

JoinGroup and SyncGroup may wait (a rebalance, the leader's assignment), and every answer waits
while the coordinator's records are being replicated: the coordinator then returns a `Pending`,
and the handler returns a Pending of the response, which the broker sends once it completes
(`respond`, which every coordinator handler uses).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gregor.coordinator.group import codes
from gregor.coordinator.group.records import partition_for
from gregor.coordinator.group.results import (
    JoinRequest,
    JoinResult,
    LeaveResult,
    SyncRequest,
    SyncResult,
)
from gregor.coordinator.txn.runtime import OFFSETS_TOPIC, TRANSACTION_TOPIC
from gregor.handlers.context import RequestContext
from gregor.handlers.controller_writes import answer_once_hosted
from gregor.handlers.registry import handles, later
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import (
    FindCoordinatorResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)
from gregor.replication.pending import Pending
from gregor.security import acls
from gregor.security.acls import DESCRIBE, READ

GROUP, TRANSACTION = 0, 1


def respond(result: Any, translate: Callable[[Any], Any]) -> Any:
    """The response now, or a Pending of it if the coordinator parked the request."""
    if isinstance(result, Pending):
        if result.done:
            return translate(result.value)
        return later(result, translate)
    return translate(result)


def client_host(ctx: RequestContext) -> str:
    """As Kafka shows it (InetAddress.toString): "/127.0.0.1"."""
    return "/" + ctx.peer.rpartition(":")[0]


# -- FindCoordinator -------------------------------------------------------------------------------


def _coordinator(ctx: RequestContext, key_type: int, key: str) -> tuple[int, str | None]:
    """(error, message) for one key; NONE means this broker."""
    b = ctx.services
    ensure_topic: Callable[[], None]
    if key_type == TRANSACTION:
        topic, ensure_topic, leads = (
            "__transaction_state", b.transactions.ensure_transaction_topic, b.transactions.is_leader_for
        )  # fmt: skip
    elif key_type == GROUP:
        topic, ensure_topic, leads = (
            "__consumer_offsets", b.groups.ensure_offsets_topic, b.groups.is_leader_for
        )  # fmt: skip
    else:
        return codes.INVALID_REQUEST, f"key type {key_type} is not served"
    try:
        ensure_topic()
    except KafkaError as exc:
        return codes.COORDINATOR_NOT_AVAILABLE, f"{topic} cannot be created: {exc.message}"
    if not leads(key):
        return codes.COORDINATOR_NOT_AVAILABLE, "the coordinator is not available"
    return codes.NONE, None


def _elsewhere(ctx: RequestContext, key_type: int, key: str) -> tuple[int, str, int] | None:
    """In a cluster: (node, host, port) of the broker leading the key's partition of
    `__consumer_offsets` / `__transaction_state` by the metadata image, at its endpoint on the
    listener the request came in on, when that is another live broker with that listener; None
    otherwise (COORDINATOR_NOT_AVAILABLE, as Kafka answers)."""
    b = ctx.services
    if not b.store.networked or key_type not in (GROUP, TRANSACTION):
        return None
    topic = b.store.image.topic(OFFSETS_TOPIC if key_type == GROUP else TRANSACTION_TOPIC)
    if topic is None or not topic.partitions:
        return None
    part = topic.partitions.get(partition_for(key, len(topic.partitions)))
    if part is None or part.leader == b.node_id:
        return None
    found = b.cluster.alive_broker_endpoint(part.leader, ctx.listener_name)
    return None if found is None else (part.leader, *found)


def _find(ctx: RequestContext, key_type: int, key: str) -> tuple[int, str | None, int, str, int]:
    """(error, message, node, host, port) of the coordinator of one key."""
    b = ctx.services
    error, message = _coordinator(ctx, key_type, key)
    if not error:
        here = b.endpoint(ctx.listener_name)
        if here is not None:
            return error, message, b.node_id, *here
        error, message = codes.COORDINATOR_NOT_AVAILABLE, "no endpoint on this listener"
    if error == codes.COORDINATOR_NOT_AVAILABLE:
        other = _elsewhere(ctx, key_type, key)
        if other is not None:
            return codes.NONE, None, *other
    return error, message, -1, "", -1


def may_read_group(ctx: RequestContext, group_id: str) -> bool:
    """READ on the group: what every membership and offset API of a group needs (else
    GROUP_AUTHORIZATION_FAILED, as Kafka)."""
    return ctx.authorize(READ, acls.GROUP, group_id)


def _find_authorized(
    ctx: RequestContext, key_type: int, key: str
) -> tuple[int, str | None, int, str, int]:
    """`_find`, after DESCRIBE on the group or transactional id the key names (Kafka's
    FindCoordinator: GROUP_ / TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
    if key_type == GROUP:
        if not ctx.authorize(DESCRIBE, acls.GROUP, key):
            return errors.GROUP_AUTHORIZATION_FAILED, None, -1, "", -1
    elif not ctx.authorize(DESCRIBE, acls.TRANSACTIONAL_ID, key):
        return errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None, -1, "", -1
    return _find(ctx, key_type, key)


@handles(api_keys.FIND_COORDINATOR)
def find_coordinator(ctx: RequestContext, request: Any) -> Any:
    """The first for a group (or a transactional id) creates the topic of its coordinators; with
    one voter the answer waits until this node hosts its partitions, then is made anew."""
    key_type = request.key_type if ctx.version >= 1 else GROUP
    topic = TRANSACTION_TOPIC if key_type == TRANSACTION else OFFSETS_TOPIC
    response = _find_coordinators(ctx, request, key_type)
    if key_type not in (GROUP, TRANSACTION):
        return response
    return answer_once_hosted(
        ctx, [topic], response, lambda: _find_coordinators(ctx, request, key_type)
    )


def _find_coordinators(ctx: RequestContext, request: Any, key_type: int) -> Any:
    R = FindCoordinatorResponse
    if ctx.version >= 4:
        out = []
        for key in request.coordinator_keys:
            error, message, node, host, port = _find_authorized(ctx, key_type, key)
            out.append(
                R.Coordinator(
                    key=key,
                    node_id=node,
                    host=host,
                    port=port,
                    error_code=error,
                    error_message=message if error else "",  # as Kafka: never set on success
                )
            )
        return R(coordinators=out)
    error, message, node, host, port = _find_authorized(ctx, key_type, request.key)
    if not error:
        message = "NONE"  # as Kafka: `Errors.NONE.message()`, the error's name
    return R(error_code=error, error_message=message, node_id=node, host=host, port=port)


# -- JoinGroup -------------------------------------------------------------------------------------


@handles(api_keys.JOIN_GROUP)
def join_group(ctx: RequestContext, request: Any) -> Any:
    v = ctx.version
    if not may_read_group(ctx, request.group_id):
        return JoinGroupResponse(error_code=errors.GROUP_AUTHORIZATION_FAILED)
    r = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if v >= 5 else None,
        client_id=ctx.header.client_id or "",
        client_host=client_host(ctx),
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if v >= 1 else request.session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=v >= 4,
        supports_skip_assignment=v >= 9,
        reason=request.reason if v >= 8 else None,
    )
    result = ctx.services.groups.join_group(r, ctx.services.now_ms())
    return respond(result, lambda res: _join_response(v, res))


def _join_response(version: int, res: JoinResult) -> Any:
    R = JoinGroupResponse
    return R(
        error_code=res.error,
        generation_id=res.generation_id,
        protocol_type=res.protocol_type,
        protocol_name=res.protocol_name if version >= 7 else (res.protocol_name or ""),
        leader=res.leader,
        skip_assignment=res.skip_assignment,
        member_id=res.member_id,
        members=[
            R.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=meta)
            for m, i, meta in res.members
        ],
    )


# -- SyncGroup -------------------------------------------------------------------------------------


@handles(api_keys.SYNC_GROUP)
def sync_group(ctx: RequestContext, request: Any) -> Any:
    v = ctx.version
    if not may_read_group(ctx, request.group_id):
        return SyncGroupResponse(error_code=errors.GROUP_AUTHORIZATION_FAILED)
    r = SyncRequest(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if v >= 3 else None,
        protocol_type=request.protocol_type if v >= 5 else None,
        protocol_name=request.protocol_name if v >= 5 else None,
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    result = ctx.services.groups.sync_group(r, ctx.services.now_ms())
    return respond(result, _sync_response)


def _sync_response(res: SyncResult) -> Any:
    return SyncGroupResponse(
        error_code=res.error,
        protocol_type=res.protocol_type,
        protocol_name=res.protocol_name,
        assignment=res.assignment,
    )


# -- Heartbeat and LeaveGroup ----------------------------------------------------------------------


@handles(api_keys.HEARTBEAT)
def heartbeat(ctx: RequestContext, request: Any) -> Any:
    if not may_read_group(ctx, request.group_id):
        return HeartbeatResponse(error_code=errors.GROUP_AUTHORIZATION_FAILED)
    result = ctx.services.groups.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if ctx.version >= 3 else None,
        ctx.services.now_ms(),
    )
    return respond(result, lambda error: HeartbeatResponse(error_code=error))


@handles(api_keys.LEAVE_GROUP)
def leave_group(ctx: RequestContext, request: Any) -> Any:
    v = ctx.version
    if not may_read_group(ctx, request.group_id):
        return LeaveGroupResponse(error_code=errors.GROUP_AUTHORIZATION_FAILED)
    if v >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    result = ctx.services.groups.leave_group(request.group_id, members, ctx.services.now_ms())
    return respond(result, lambda res: _leave_response(v, res))


def _leave_response(v: int, res: LeaveResult) -> Any:
    R = LeaveGroupResponse
    if v >= 3:
        return R(
            error_code=res.error,
            members=[
                R.MemberResponse(member_id=m, group_instance_id=i, error_code=e)
                for m, i, e in res.members
            ],
        )
    error = res.error or (res.members[0][2] if res.members else codes.NONE)
    return R(error_code=error)
