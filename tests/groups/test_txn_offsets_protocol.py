"""TxnOffsetCommit v0-5 on the wire, from a raw socket with our own codec: the offsets stay
pending (OffsetFetch require_stable answers UNSTABLE_OFFSET_COMMIT, without it the last committed
offset) until a WriteTxnMarkers COMMIT reaches the group's `__consumer_offsets` partition; the
member checks of v3+ against a classic group; unknown topics."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest
from group_helpers import BROKER_CONFIG, create_topic
from test_protocol_groups import Raw, join, sync

from gregor.coordinator.group import codes
from gregor.coordinator.group.records import partition_for
from gregor.protocol import api_keys
from gregor.protocol.messages import (
    FindCoordinatorRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)

OFFSETS_PARTITIONS = int(BROKER_CONFIG["offsets.topic.num.partitions"])
UNSTABLE = codes.UNSTABLE_OFFSET_COMMIT
# Producer ids of our own, far from those InitProducerId hands out to other tests.
_PIDS = itertools.count(9_000_000 + os.getpid() % 1000 * 1000)


@pytest.fixture
def conn(bootstrap: str) -> Iterator[Raw]:
    c = Raw(bootstrap)
    c.call(
        api_keys.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="x", key_type=0)
    )  # makes __consumer_offsets
    yield c
    c.close()


def txn_commit(
    raw: Raw,
    version: int,
    group: str,
    producer_id: int,
    offsets: dict[tuple[str, int], int],
    **member: Any,
) -> list[tuple[str, int, int]]:
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    P = TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition
    by_topic: dict[str, list[Any]] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(
            P(
                partition_index=p,
                committed_offset=o,
                committed_leader_epoch=4,
                committed_metadata=f"m{o}",
            )
        )
    body = TxnOffsetCommitRequest(
        transactional_id="txn-" + group, group_id=group, producer_id=producer_id, producer_epoch=0,
        topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()], **member,
    )  # fmt: skip
    r = raw.call(api_keys.TXN_OFFSET_COMMIT, version, body)
    return [(t.name, p.partition_index, p.error_code) for t in r.topics for p in t.partitions]


def fetch(
    raw: Raw, group: str, topic: str, partitions: list[int], version: int = 7, stable: bool = True
) -> list[tuple[int, int]]:
    if version >= 8:
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        GT = OffsetFetchRequest.OffsetFetchRequestTopics
        body = OffsetFetchRequest(
            groups=[G(group_id=group, topics=[GT(name=topic, partition_indexes=partitions)])],
            require_stable=stable,
        )
        [g] = raw.call(api_keys.OFFSET_FETCH, version, body).groups
        assert g.error_code == 0
        return [(p.committed_offset, p.error_code) for t in g.topics for p in t.partitions]
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    body = OffsetFetchRequest(
        group_id=group, topics=[T(name=topic, partition_indexes=partitions)], require_stable=stable
    )
    r = raw.call(api_keys.OFFSET_FETCH, version, body)
    return [(p.committed_offset, p.error_code) for t in r.topics for p in t.partitions]


def write_marker(raw: Raw, group: str, producer_id: int, committed: bool) -> int:
    M = WriteTxnMarkersRequest.WritableTxnMarker
    MT = WriteTxnMarkersRequest.WritableTxnMarkerTopic
    body = WriteTxnMarkersRequest(markers=[M(
        producer_id=producer_id, producer_epoch=0, transaction_result=committed, coordinator_epoch=0,
        topics=[MT(name="__consumer_offsets", partition_indexes=[partition_for(group, OFFSETS_PARTITIONS)])],
    )])  # fmt: skip
    r = raw.call(api_keys.WRITE_TXN_MARKERS, 1, body)
    return int(r.markers[0].topics[0].partitions[0].error_code)


def test_pending_until_the_marker_every_version(bootstrap: str, conn: Raw, name: str) -> None:
    create_topic(bootstrap, name, 2)
    OT, OP = (
        OffsetCommitRequest.OffsetCommitRequestTopic,
        OffsetCommitRequest.OffsetCommitRequestPartition,
    )
    plain = OffsetCommitRequest(
        group_id=name,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OT(
                name=name,
                partitions=[OP(partition_index=0, committed_offset=1, committed_metadata="")],
            )
        ],
    )
    assert conn.call(api_keys.OFFSET_COMMIT, 8, plain).topics[0].partitions[0].error_code == 0
    for v in range(0, 6):
        pid = next(_PIDS)
        offsets = {(name, 0): 10 * (v + 1), (name, 1): 10 * (v + 1) + 1, ("no-such-topic", 0): 5}
        assert txn_commit(conn, v, name, pid, offsets) == [
            (name, 0, 0),
            (name, 1, 0),
            ("no-such-topic", 0, codes.UNKNOWN_TOPIC_OR_PARTITION),
        ], v
        before = 1 if v == 0 else 10 * v
        before_1 = -1 if v == 0 else 10 * v + 1
        for fv in (7, 8):
            assert fetch(conn, name, name, [0, 1], fv) == [(-1, UNSTABLE), (-1, UNSTABLE)], (v, fv)
            assert fetch(conn, name, name, [0, 1], fv, stable=False) == [
                (before, 0),
                (before_1, 0),
            ], (v, fv)
        assert fetch(conn, name, name, [0, 1], 1, stable=False) == [(before, 0), (before_1, 0)], (
            "v1 has no require_stable"
        )
        assert write_marker(conn, name, pid, committed=True) == 0
        assert fetch(conn, name, name, [0, 1]) == [(10 * (v + 1), 0), (10 * (v + 1) + 1, 0)], v
    # The leader epoch (v2+) and metadata are kept.
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    f = conn.call(
        api_keys.OFFSET_FETCH,
        7,
        OffsetFetchRequest(group_id=name, topics=[T(name=name, partition_indexes=[0])]),
    )
    p = f.topics[0].partitions[0]
    assert (p.committed_offset, p.committed_leader_epoch, p.metadata) == (60, 4, "m60")


def test_abort_marker_keeps_the_committed_offset(bootstrap: str, conn: Raw, name: str) -> None:
    create_topic(bootstrap, name, 1)
    first, second = next(_PIDS), next(_PIDS)
    assert txn_commit(conn, 3, name, first, {(name, 0): 7}) == [(name, 0, 0)]
    assert write_marker(conn, name, first, committed=True) == 0
    assert txn_commit(conn, 3, name, second, {(name, 0): 70}) == [(name, 0, 0)]
    assert fetch(conn, name, name, [0]) == [(-1, UNSTABLE)]
    assert write_marker(conn, name, second, committed=False) == 0
    assert fetch(conn, name, name, [0]) == [(7, 0)]


def test_member_checks_from_v3(bootstrap: str, conn: Raw, name: str) -> None:
    create_topic(bootstrap, name, 1)
    r = join(conn, 9, name)
    r = join(conn, 9, name, r.member_id)
    sync(conn, 5, name, r.generation_id, r.member_id, {r.member_id: b""})
    pid = next(_PIDS)
    me, gen = r.member_id, r.generation_id

    def commit(version: int, **member: Any) -> int:
        return txn_commit(conn, version, name, pid, {(name, 0): 3}, **member)[0][2]

    assert commit(3, generation_id=gen, member_id=me) == 0
    assert commit(4, generation_id=gen + 1, member_id=me) == codes.ILLEGAL_GENERATION
    assert commit(5, generation_id=gen, member_id="stranger") == codes.UNKNOWN_MEMBER_ID
    assert (
        commit(3, generation_id=gen, member_id=me, group_instance_id="nobody")
        == codes.UNKNOWN_MEMBER_ID
    )
    assert commit(2) == 0, "v0-2 have no member fields"
    assert (
        txn_commit(conn, 3, name + "-x", pid, {(name, 0): 3}, generation_id=1, member_id="m")[0][2]
        == codes.ILLEGAL_GENERATION
    )
    assert write_marker(conn, name, pid, committed=True) == 0
    assert fetch(conn, name, name, [0]) == [(3, 0)]
