"""Groups for tools: DescribeGroups v0-6, ListGroups v0-5, DeleteGroups v0-2. The rules live in
`gregor.coordinator`; this module translates.

DescribeGroups: v3 authorized operations (no ACLs yet: left unset); v4 group_instance_id of
members; v5 flexible; v6 an unknown group is GROUP_ID_NOT_FOUND with a message (KIP-1043), where
v0-5 describe it as a Dead group with no error. Member metadata and assignments are shown only
for a Stable group, as Kafka does. ListGroups: v4 states_filter (case-insensitive); v5
types_filter and group_type ("classic": the only kind served). DeleteGroups: empty groups only
(NON_EMPTY_GROUP otherwise); their committed offsets go with them. The empty group id is a
group like any other for all three, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from gregor.coordinator.group import codes
from gregor.handlers.context import RequestContext
from gregor.handlers.groups import respond
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import (
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
)
from gregor.security.acls import DELETE, DESCRIBE, GROUP


@handles(api_keys.DESCRIBE_GROUPS)
def describe_groups(ctx: RequestContext, request: Any) -> Any:
    R = DescribeGroupsResponse
    out = []
    for gid in request.groups:
        d: Any = ctx.services.groups.describe_group(gid)
        if not ctx.authorize(DESCRIBE, GROUP, gid):
            d = errors.GROUP_AUTHORIZATION_FAILED
        if isinstance(d, int):
            out.append(
                R.DescribedGroup(
                    error_code=d,
                    group_id=gid,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                )
            )
        elif d is None:
            unknown = ctx.version >= 6
            out.append(
                R.DescribedGroup(
                    error_code=codes.GROUP_ID_NOT_FOUND if unknown else codes.NONE,
                    error_message=f"Group {gid} not found." if unknown else None,
                    group_id=gid,
                    group_state="Dead",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                )
            )
        else:
            out.append(
                R.DescribedGroup(
                    error_code=codes.NONE,
                    group_id=gid,
                    group_state=d.state,
                    protocol_type=d.protocol_type,
                    protocol_data=d.protocol_data,
                    members=[
                        R.DescribedGroupMember(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata,
                            member_assignment=m.assignment,
                        )
                        for m in d.members
                    ],
                )
            )
            if ctx.version >= 3 and request.include_authorized_operations:
                out[-1].authorized_operations = ctx.authorized_operations(GROUP, gid)
    return R(groups=out)


@handles(api_keys.LIST_GROUPS)
def list_groups(ctx: RequestContext, request: Any) -> Any:
    v = ctx.version
    error, groups = ctx.services.groups.list_groups(
        request.states_filter if v >= 4 else (), request.types_filter if v >= 5 else ()
    )
    R = ListGroupsResponse
    if not ctx.authorize_cluster(DESCRIBE):  # then only the groups it may describe, as Kafka
        groups = [g for g in groups if ctx.authorize(DESCRIBE, GROUP, g.group_id)]
    return R(
        error_code=error,
        groups=[
            R.ListedGroup(
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.state,
                group_type=g.group_type,
            )
            for g in groups
        ],
    )


@handles(api_keys.DELETE_GROUPS)
def delete_groups(ctx: RequestContext, request: Any) -> Any:
    names = list(request.groups_names)
    allowed = [g for g in dict.fromkeys(names) if ctx.authorize(DELETE, GROUP, g)]
    results = ctx.services.groups.delete_groups(allowed, ctx.services.now_ms())
    R = DeleteGroupsResponse

    def error(by_group: dict[str, int], g: str) -> int:
        return by_group.get(g, errors.GROUP_AUTHORIZATION_FAILED)

    return respond(
        results,
        lambda by_group: R(
            results=[
                R.DeletableGroupResult(group_id=g, error_code=error(by_group, g)) for g in names
            ]
        ),
    )
