"""The empty group id, as Kafka treats it (GroupCoordinatorService): OffsetCommit, OffsetFetch,
DescribeGroups and DeleteGroups take it as any other group (old clients commit to it), and
FindCoordinator answers for it; JoinGroup, SyncGroup, Heartbeat, LeaveGroup, TxnOffsetCommit
and OffsetDelete refuse it with INVALID_GROUP_ID.

Every test here shares the one group "" on the session's broker: each commits to its own topic
and ends by deleting the group.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient
from group_helpers import create_topic

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
    TxnOffsetCommitRequest,
)
from gregor.testing.raw_client import RawClient

EMPTY = ""


@pytest.fixture
def raw(bootstrap: str) -> Any:
    with RawClient(bootstrap, client_id="empty-group", timeout_s=20) as conn:
        yield conn


def commit(raw: RawClient, version: int, topic: str, offset: int) -> list[int]:
    T, P = (
        OffsetCommitRequest.OffsetCommitRequestTopic,
        OffsetCommitRequest.OffsetCommitRequestPartition,
    )
    body = OffsetCommitRequest(
        group_id=EMPTY, generation_id_or_member_epoch=-1, member_id="",
        topics=[T(name=topic, partitions=[P(partition_index=0, committed_offset=offset, committed_metadata=f"v{version}")])],
    )  # fmt: skip
    return [
        p.error_code
        for t in raw.call(api_keys.OFFSET_COMMIT, version, body).topics
        for p in t.partitions
    ]


def fetched(raw: RawClient, version: int, topic: str) -> tuple[int, int, str]:
    """(error, committed offset, metadata) of partition 0 of `topic` for the empty group."""
    F = OffsetFetchRequest.OffsetFetchRequestTopic
    if version >= 8:
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        body = OffsetFetchRequest(
            groups=[G(group_id=EMPTY, topics=[F(name=topic, partition_indexes=[0])])]
        )
        [group] = raw.call(api_keys.OFFSET_FETCH, version, body).groups
        assert group.group_id == EMPTY
        p = group.topics[0].partitions[0]
        return group.error_code or p.error_code, p.committed_offset, p.metadata
    r = raw.call(
        api_keys.OFFSET_FETCH,
        version,
        OffsetFetchRequest(group_id=EMPTY, topics=[F(name=topic, partition_indexes=[0])]),
    )
    p = r.topics[0].partitions[0]
    return (r.error_code if version >= 2 else 0) or p.error_code, p.committed_offset, p.metadata


def find_coordinator(raw: RawClient) -> None:
    """FindCoordinator answers for the empty group id at every version (this one broker)."""
    for v in range(0, 4):
        r = raw.call(api_keys.FIND_COORDINATOR, v, FindCoordinatorRequest(key=EMPTY, key_type=0))
        assert (r.error_code, r.node_id) == (codes.NONE, 1), v
    for v in (4, 5):
        r = raw.call(
            api_keys.FIND_COORDINATOR,
            v,
            FindCoordinatorRequest(coordinator_keys=[EMPTY], key_type=0),
        )
        assert [(c.key, c.error_code, c.node_id) for c in r.coordinators] == [
            (EMPTY, codes.NONE, 1)
        ], v


def test_offsets_describe_and_delete_take_the_empty_group_id(
    bootstrap: str, raw: RawClient, name: str
) -> None:
    create_topic(bootstrap, name, 1)
    find_coordinator(raw)  # as a client does first
    for v in range(2, 10):
        assert commit(raw, v, name, 100 + v) == [codes.NONE], f"OffsetCommit v{v}"
        for fv in (1, 2, 5, 7, 8, 9):
            assert fetched(raw, fv, name) == (codes.NONE, 100 + v, f"v{v}"), (v, fv)
    for v in (0, 5):
        [g] = raw.call(api_keys.DESCRIBE_GROUPS, v, DescribeGroupsRequest(groups=[EMPTY])).groups
        assert (g.group_id, g.error_code, g.group_state, g.members) == (
            EMPTY,
            codes.NONE,
            "Empty",
            [],
        ), v
    listed = raw.call(api_keys.LIST_GROUPS, 4, ListGroupsRequest(states_filter=[]))
    assert EMPTY in [g.group_id for g in listed.groups]
    dg = raw.call(api_keys.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=[EMPTY]))
    assert [(x.group_id, x.error_code) for x in dg.results] == [(EMPTY, codes.NONE)]
    assert fetched(raw, 7, name) == (codes.NONE, -1, "")
    [g] = raw.call(api_keys.DESCRIBE_GROUPS, 6, DescribeGroupsRequest(groups=[EMPTY])).groups
    assert g.error_code == codes.GROUP_ID_NOT_FOUND
    dg = raw.call(api_keys.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=[EMPTY]))
    assert [(x.group_id, x.error_code) for x in dg.results] == [(EMPTY, codes.GROUP_ID_NOT_FOUND)]


def test_membership_txn_commit_and_offset_delete_refuse_the_empty_group_id(
    bootstrap: str, raw: RawClient, name: str
) -> None:
    create_topic(bootstrap, name, 1)
    assert commit(raw, 8, name, 5) == [codes.NONE]  # the group exists: still refused below
    protocol = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")
    join = JoinGroupRequest(
        group_id=EMPTY, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
        protocol_type="consumer", protocols=[protocol],
    )  # fmt: skip
    for v in (0, 5, 9):
        assert raw.call(api_keys.JOIN_GROUP, v, join).error_code == codes.INVALID_GROUP_ID, v
    sync = SyncGroupRequest(group_id=EMPTY, generation_id=1, member_id="m", assignments=[])
    assert raw.call(api_keys.SYNC_GROUP, 3, sync).error_code == codes.INVALID_GROUP_ID
    beat = HeartbeatRequest(group_id=EMPTY, generation_id=1, member_id="m")
    assert raw.call(api_keys.HEARTBEAT, 3, beat).error_code == codes.INVALID_GROUP_ID
    M = LeaveGroupRequest.MemberIdentity
    leave = LeaveGroupRequest(group_id=EMPTY, member_id="m", members=[M(member_id="m")])
    for v in (0, 3):
        assert raw.call(api_keys.LEAVE_GROUP, v, leave).error_code == codes.INVALID_GROUP_ID, v
    TT, TP = (
        TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic,
        TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition,
    )
    txn = TxnOffsetCommitRequest(
        transactional_id="tx", group_id=EMPTY, producer_id=1, producer_epoch=0,
        topics=[TT(name=name, partitions=[TP(partition_index=0, committed_offset=9, committed_metadata=None)])],
    )  # fmt: skip
    r = raw.call(api_keys.TXN_OFFSET_COMMIT, 3, txn)
    assert [p.error_code for p in r.topics[0].partitions] == [codes.INVALID_GROUP_ID]
    DT, DP = (
        OffsetDeleteRequest.OffsetDeleteRequestTopic,
        OffsetDeleteRequest.OffsetDeleteRequestPartition,
    )
    od = raw.call(
        api_keys.OFFSET_DELETE,
        0,
        OffsetDeleteRequest(
            group_id=EMPTY, topics=[DT(name=name, partitions=[DP(partition_index=0)])]
        ),
    )
    assert od.error_code == codes.INVALID_GROUP_ID
    assert fetched(raw, 7, name) == (codes.NONE, 5, "v8"), (
        "nothing refused above touched the offset"
    )
    raw.call(api_keys.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=[EMPTY]))


def test_kafka_python_commits_reads_and_deletes_the_empty_group(bootstrap: str, name: str) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.errors import InvalidGroupIdError
    from kafka.structs import OffsetAndMetadata

    create_topic(bootstrap, name, 2)
    tp = TopicPartition(name, 1)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=EMPTY, enable_auto_commit=False)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(42, "kp", -1)})
        assert consumer.committed(tp) == 42
        offsets = admin.list_group_offsets(EMPTY)[EMPTY]
        assert offsets[tp].offset == 42 and offsets[tp].metadata == "kp"
        described = admin.describe_groups([EMPTY])[EMPTY]
        assert (described["group_state"], described["error"]) == ("Empty", None)
        with pytest.raises(InvalidGroupIdError):
            admin.delete_group_offsets(EMPTY, [tp])
        assert admin.delete_groups([EMPTY]) == {EMPTY: "OK"}
        assert tp not in admin.list_group_offsets(EMPTY)[EMPTY]
    finally:
        consumer.close()
        admin.close()


def test_confluent_admin_describes_and_deletes_the_empty_group(
    bootstrap: str, raw: RawClient, name: str
) -> None:
    create_topic(bootstrap, name, 1)
    assert commit(raw, 8, name, 3) == [codes.NONE]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([EMPTY])[EMPTY].result(20)
    assert (described.group_id, described.state, described.members) == (
        EMPTY,
        ConsumerGroupState.EMPTY,
        [],
    )
    assert admin.delete_consumer_groups([EMPTY])[EMPTY].result(20) is None
    assert fetched(raw, 7, name) == (codes.NONE, -1, "")
