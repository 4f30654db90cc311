"""The group APIs on the wire, version by version, from a raw socket (clients each use only a
few versions): FindCoordinator v0-6, JoinGroup v0-9, SyncGroup, Heartbeat, LeaveGroup v0-5,
OffsetCommit v2-9, OffsetFetch v1-9, DescribeGroups v0-6, ListGroups v0-5, DeleteGroups,
OffsetDelete, with Kafka's errors."""

from __future__ import annotations

import struct
import time
from typing import Any

import pytest
from group_helpers import Member, create_topic, pump, wait_until

from gregor.coordinator.group import codes
from gregor.protocol import api_keys
from gregor.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from gregor.testing.raw_client import RawClient


def subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    return struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", -1)


SUBSCRIPTION = subscription("t")


class Raw(RawClient):
    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap, client_id="raw-test", timeout_s=20)


@pytest.fixture
def raw(bootstrap: str) -> Any:
    conn = Raw(bootstrap)
    # FindCoordinator first, as clients do: it creates __consumer_offsets.
    conn.call(api_keys.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="x", key_type=0))
    yield conn
    conn.close()


def join(
    raw: Raw,
    version: int,
    group: str,
    member_id: str = "",
    instance: str | None = None,
    session: int = 10000,
    topic: str = "t",
) -> Any:
    return raw.call(
        api_keys.JOIN_GROUP,
        version,
        JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session,
            rebalance_timeout_ms=10000,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type="consumer",
            protocols=[
                JoinGroupRequest.JoinGroupRequestProtocol(
                    name="range", metadata=subscription(topic)
                )
            ],
        ),
    )


def sync(
    raw: Raw, version: int, group: str, generation: int, member: str, assignments: dict[str, bytes]
) -> Any:
    A = SyncGroupRequest.SyncGroupRequestAssignment
    return raw.call(
        api_keys.SYNC_GROUP,
        version,
        SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member,
            protocol_type="consumer" if version >= 5 else None,
            protocol_name="range" if version >= 5 else None,
            assignments=[A(member_id=m, assignment=a) for m, a in assignments.items()],
        ),
    )


def test_find_coordinator_every_version(bootstrap: str, raw: Raw) -> None:
    host, port = bootstrap.rsplit(":", 1)
    for v in range(0, 4):
        r = raw.call(
            api_keys.FIND_COORDINATOR, v, FindCoordinatorRequest(key="some-group", key_type=0)
        )
        assert (r.error_code, r.node_id, r.host, r.port) == (0, 1, host, int(port)), v
    for v in (4, 5, 6):
        r = raw.call(
            api_keys.FIND_COORDINATOR,
            v,
            FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b"]),
        )
        assert [(c.key, c.error_code, c.node_id) for c in r.coordinators] == [
            ("a", 0, 1),
            ("b", 0, 1),
        ]
    r = raw.call(api_keys.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="txn", key_type=1))
    assert (r.error_code, r.node_id, r.host, r.port) == (0, 1, host, int(port))


@pytest.mark.parametrize("version", [0, 3, 4, 5, 7, 9])
def test_join_sync_heartbeat_leave_by_version(raw: Raw, name: str, version: int) -> None:
    r = join(raw, version, name)
    if version >= 4:
        assert r.error_code == codes.MEMBER_ID_REQUIRED and r.member_id
        r = join(raw, version, name, r.member_id)
    assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id
    assert [m.member_id for m in r.members] == [r.member_id] and bytes(
        r.members[0].metadata
    ) == SUBSCRIPTION
    assert r.protocol_name == "range"
    if version >= 7:
        assert r.protocol_type == "consumer"
    me, gen = r.member_id, r.generation_id
    sv = {0: 0, 3: 2, 4: 3, 5: 3, 7: 4, 9: 5}[version]
    s = sync(raw, sv, name, gen, me, {me: b"mine"})
    assert (s.error_code, bytes(s.assignment)) == (0, b"mine")
    hv = min(version, 4)
    hb = raw.call(
        api_keys.HEARTBEAT, hv, HeartbeatRequest(group_id=name, generation_id=gen, member_id=me)
    )
    assert hb.error_code == 0
    hb = raw.call(
        api_keys.HEARTBEAT, hv, HeartbeatRequest(group_id=name, generation_id=gen + 5, member_id=me)
    )
    assert hb.error_code == codes.ILLEGAL_GENERATION
    lv = min(version, 5)
    if lv >= 3:
        M = LeaveGroupRequest.MemberIdentity
        left = raw.call(
            api_keys.LEAVE_GROUP,
            lv,
            LeaveGroupRequest(group_id=name, members=[M(member_id=me), M(member_id="ghost")]),
        )
        assert left.error_code == 0
        assert [(m.member_id, m.error_code) for m in left.members] == [
            (me, 0),
            ("ghost", codes.UNKNOWN_MEMBER_ID),
        ]
    else:
        left = raw.call(api_keys.LEAVE_GROUP, lv, LeaveGroupRequest(group_id=name, member_id=me))
        assert left.error_code == 0
        left = raw.call(api_keys.LEAVE_GROUP, lv, LeaveGroupRequest(group_id=name, member_id=me))
        assert left.error_code == codes.UNKNOWN_MEMBER_ID
    d = raw.call(api_keys.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=[name]))
    assert d.groups[0].group_state == "Empty"


def test_second_member_parks_until_the_first_rejoins(bootstrap: str, raw: Raw, name: str) -> None:
    a = join(raw, 9, name)
    a = join(raw, 9, name, a.member_id)
    other = Raw(bootstrap)
    try:
        b = join(other, 9, name)
        other.send(
            api_keys.JOIN_GROUP,
            9,
            JoinGroupRequest(
                group_id=name,
                session_timeout_ms=10000,
                rebalance_timeout_ms=10000,
                member_id=b.member_id,
                protocol_type="consumer",
                protocols=[
                    JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION)
                ],
            ),
        )
        # The first member learns of the rebalance, and rejoins; then both get generation 2.
        hb = raw.call(
            api_keys.HEARTBEAT,
            4,
            HeartbeatRequest(group_id=name, generation_id=1, member_id=a.member_id),
        )
        assert hb.error_code == codes.REBALANCE_IN_PROGRESS
        a2 = join(raw, 9, name, a.member_id)
        b2 = other.recv()
        assert a2.generation_id == b2.generation_id == 2 and a2.leader == b2.leader
        leader, follower = (raw, other) if a2.leader == a2.member_id else (other, raw)
        lead_join = a2 if leader is raw else b2
        assert len(lead_join.members) == 2
        follower.send(
            api_keys.SYNC_GROUP,
            5,
            SyncGroupRequest(
                group_id=name,
                generation_id=2,
                member_id=(b2 if follower is other else a2).member_id,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[],
            ),
        )
        time.sleep(0.2)  # the follower's SyncGroup is parked until the leader's arrives
        assignments = {m.member_id: m.member_id.encode() for m in lead_join.members}
        s = sync(leader, 5, name, 2, lead_join.member_id, assignments)
        f = follower.recv()
        assert bytes(s.assignment) == lead_join.member_id.encode()
        assert bytes(f.assignment) == (b2 if follower is other else a2).member_id.encode()
    finally:
        other.close()


def test_offset_commit_and_fetch_every_version(bootstrap: str, raw: Raw, name: str) -> None:
    create_topic(bootstrap, name, 2)
    T, P = (
        OffsetCommitRequest.OffsetCommitRequestTopic,
        OffsetCommitRequest.OffsetCommitRequestPartition,
    )
    for v in range(2, 10):
        body = OffsetCommitRequest(
            group_id=name,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                T(
                    name=name,
                    partitions=[
                        P(
                            partition_index=0,
                            committed_offset=10 * v,
                            committed_leader_epoch=3,
                            committed_metadata=f"v{v}",
                        )
                    ],
                ),
                T(
                    name="no-such-topic",
                    partitions=[P(partition_index=0, committed_offset=1, committed_metadata=None)],
                ),
            ],
        )
        r = raw.call(api_keys.OFFSET_COMMIT, v, body)
        assert [[p.error_code for p in t.partitions] for t in r.topics] == [
            [0],
            [codes.UNKNOWN_TOPIC_OR_PARTITION],
        ], v
        FT = OffsetFetchRequest.OffsetFetchRequestTopic
        for fv in (1, 2, 5, 7):
            f = raw.call(
                api_keys.OFFSET_FETCH,
                fv,
                OffsetFetchRequest(group_id=name, topics=[FT(name=name, partition_indexes=[0, 1])]),
            )
            parts = [
                (p.partition_index, p.committed_offset, p.metadata, p.error_code)
                for p in f.topics[0].partitions
            ]
            assert parts == [(0, 10 * v, f"v{v}", 0), (1, -1, "", 0)], (v, fv)
            if fv >= 5:
                expect = 3 if v >= 6 else -1
                assert f.topics[0].partitions[0].committed_leader_epoch == expect
    # v2+: null topics means every committed offset; v8+: several groups at once.
    f = raw.call(api_keys.OFFSET_FETCH, 2, OffsetFetchRequest(group_id=name, topics=None))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in f.topics] == [(name, [0])]
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    f = raw.call(
        api_keys.OFFSET_FETCH,
        8,
        OffsetFetchRequest(
            groups=[G(group_id=name, topics=None), G(group_id="nobody", topics=None)],
            require_stable=True,
        ),
    )
    assert [(g.group_id, g.error_code, len(g.topics)) for g in f.groups] == [
        (name, 0, 1),
        ("nobody", 0, 0),
    ]
    assert f.groups[0].topics[0].partitions[0].committed_offset == 90


def test_offset_commit_errors_for_members(raw: Raw, bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name, 1)
    r = join(raw, 9, name)
    r = join(raw, 9, name, r.member_id)
    T, P = (
        OffsetCommitRequest.OffsetCommitRequestTopic,
        OffsetCommitRequest.OffsetCommitRequestPartition,
    )

    def commit(generation: int, member: str, version: int = 8) -> int:
        body = OffsetCommitRequest(
            group_id=name,
            generation_id_or_member_epoch=generation,
            member_id=member,
            topics=[
                T(
                    name=name,
                    partitions=[P(partition_index=0, committed_offset=5, committed_metadata="")],
                )
            ],
        )
        return raw.call(api_keys.OFFSET_COMMIT, version, body).topics[0].partitions[0].error_code

    assert commit(1, r.member_id) == codes.REBALANCE_IN_PROGRESS  # no assignment yet
    sync(raw, 5, name, 1, r.member_id, {r.member_id: b""})
    assert commit(1, r.member_id) == 0
    assert commit(2, r.member_id) == codes.ILLEGAL_GENERATION
    assert commit(1, "stranger") == codes.UNKNOWN_MEMBER_ID
    assert commit(-1, "") == codes.UNKNOWN_MEMBER_ID  # the group has members
    # A group nobody knows, with a generation: ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND on.
    body = OffsetCommitRequest(
        group_id=name + "-x",
        generation_id_or_member_epoch=3,
        member_id="m",
        topics=[
            T(
                name=name,
                partitions=[P(partition_index=0, committed_offset=5, committed_metadata="")],
            )
        ],
    )
    assert (
        raw.call(api_keys.OFFSET_COMMIT, 8, body).topics[0].partitions[0].error_code
        == codes.ILLEGAL_GENERATION
    )
    assert (
        raw.call(api_keys.OFFSET_COMMIT, 9, body).topics[0].partitions[0].error_code
        == codes.GROUP_ID_NOT_FOUND
    )


def test_describe_list_delete_and_offset_delete(bootstrap: str, raw: Raw, name: str) -> None:
    create_topic(bootstrap, name, 1)
    create_topic(bootstrap, name + "-other", 1)
    r = join(raw, 9, name, instance="inst-1", topic=name)
    sync(raw, 5, name, r.generation_id, r.member_id, {r.member_id: b"A"})
    d = raw.call(api_keys.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=[name, "no-such-group"]))
    g, unknown = d.groups
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
        0,
        "Stable",
        "consumer",
        "range",
    )
    [m] = g.members
    assert (m.member_id, m.group_instance_id, m.client_id, m.client_host) == (
        r.member_id,
        "inst-1",
        "raw-test",
        "/127.0.0.1",
    )
    assert bytes(m.member_assignment) == b"A" and bytes(m.member_metadata) == subscription(name)
    assert (unknown.error_code, unknown.group_state) == (0, "Dead")
    d6 = raw.call(api_keys.DESCRIBE_GROUPS, 6, DescribeGroupsRequest(groups=["no-such-group"]))
    assert d6.groups[0].error_code == codes.GROUP_ID_NOT_FOUND and d6.groups[0].error_message
    for v in range(0, 6):
        body = ListGroupsRequest(
            states_filter=["stable"] if v >= 4 else [], types_filter=["classic"] if v >= 5 else []
        )
        listed = raw.call(api_keys.LIST_GROUPS, v, body)
        mine = [x for x in listed.groups if x.group_id == name]
        assert listed.error_code == 0 and len(mine) == 1 and mine[0].protocol_type == "consumer", v
        if v >= 4:
            assert {x.group_state for x in listed.groups} == {"Stable"}
    assert (
        raw.call(api_keys.LIST_GROUPS, 5, ListGroupsRequest(types_filter=["consumer"])).groups == []
    )
    # Commit, then try deletions while the member is there.
    T, P = (
        OffsetCommitRequest.OffsetCommitRequestTopic,
        OffsetCommitRequest.OffsetCommitRequestPartition,
    )
    raw.call(
        api_keys.OFFSET_COMMIT,
        8,
        OffsetCommitRequest(
            group_id=name,
            generation_id_or_member_epoch=r.generation_id,
            member_id=r.member_id,
            group_instance_id="inst-1",
            topics=[
                T(
                    name=name,
                    partitions=[P(partition_index=0, committed_offset=3, committed_metadata="")],
                )
            ],
        ),
    )
    dg = raw.call(
        api_keys.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=[name, "no-such-group"])
    )
    assert [(x.group_id, x.error_code) for x in dg.results] == [
        (name, codes.NON_EMPTY_GROUP),
        ("no-such-group", codes.GROUP_ID_NOT_FOUND),
    ]
    DT, DP = (
        OffsetDeleteRequest.OffsetDeleteRequestTopic,
        OffsetDeleteRequest.OffsetDeleteRequestPartition,
    )
    od = raw.call(
        api_keys.OFFSET_DELETE,
        0,
        OffsetDeleteRequest(
            group_id=name,
            topics=[
                DT(name=name, partitions=[DP(partition_index=0)]),
                DT(name=name + "-other", partitions=[DP(partition_index=0)]),
                DT(name="no-such-topic", partitions=[DP(partition_index=0)]),
            ],
        ),
    )
    assert od.error_code == 0
    assert [t.partitions[0].error_code for t in od.topics] == [
        codes.GROUP_SUBSCRIBED_TO_TOPIC,
        0,
        codes.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    M = LeaveGroupRequest.MemberIdentity
    raw.call(
        api_keys.LEAVE_GROUP,
        5,
        LeaveGroupRequest(group_id=name, members=[M(member_id="", group_instance_id="inst-1")]),
    )
    od = raw.call(
        api_keys.OFFSET_DELETE,
        0,
        OffsetDeleteRequest(
            group_id=name, topics=[DT(name=name, partitions=[DP(partition_index=0)])]
        ),
    )
    assert od.topics[0].partitions[0].error_code == 0, "the group is empty now"
    F = OffsetFetchRequest.OffsetFetchRequestTopic
    f = raw.call(
        api_keys.OFFSET_FETCH,
        7,
        OffsetFetchRequest(group_id=name, topics=[F(name=name, partition_indexes=[0])]),
    )
    assert f.topics[0].partitions[0].committed_offset == -1
    dg = raw.call(api_keys.DELETE_GROUPS, 1, DeleteGroupsRequest(groups_names=[name]))
    assert dg.results[0].error_code == 0
    d = raw.call(api_keys.DESCRIBE_GROUPS, 6, DescribeGroupsRequest(groups=[name]))
    assert d.groups[0].error_code == codes.GROUP_ID_NOT_FOUND


def test_member_removed_by_someone_else_sees_unknown_member_id_and_rejoins(
    bootstrap: str, raw: Raw, name: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Also proves the churn test's log counter sees librdkafka's UNKNOWN_MEMBER_ID."""
    create_topic(bootstrap, name, 3)
    m = Member(bootstrap, name, name, debug="cgrp")
    try:
        wait_until(lambda: m.partitions() == {0, 1, 2}, 20, "the assignment", pump([m]))
        M = LeaveGroupRequest.MemberIdentity
        left = raw.call(
            api_keys.LEAVE_GROUP,
            5,
            LeaveGroupRequest(group_id=name, members=[M(member_id=m.consumer.memberid())]),
        )
        assert left.members[0].error_code == 0
        logs = m.logs
        assert logs is not None

        def heard() -> bool:
            logs.feed(capfd.readouterr().err)  # librdkafka's log lines written since the last look
            return logs.counts["UNKNOWN_MEMBER_ID"] >= 1

        wait_until(
            heard,
            10,
            "the member to hear UNKNOWN_MEMBER_ID",
            pump([m]),
        )
        d = raw.call(api_keys.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=[name]))
        wait_until(
            lambda: (
                raw.call(api_keys.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=[name]))
                .groups[0]
                .group_state
                == "Stable"
            ),
            10,
            "the member to rejoin",
            pump([m]),
        )
        d = raw.call(api_keys.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=[name]))
        assert len(d.groups[0].members) == 1 and m.partitions() == {0, 1, 2}
    finally:
        m.close()
