"""Every Raft message through the wire mapping and the codec's bytes, and back unchanged."""

from __future__ import annotations

import pytest

from gregor.protocol import api_keys, codec, errors
from gregor.raft import messages as m
from gregor.raft import wire
from gregor.raft.log import Batch, SnapshotId

CID = 4711
INCONSISTENT = errors.BY_NAME["INCONSISTENT_CLUSTER_ID"].code
FENCED = errors.BY_NAME["FENCED_LEADER_EPOCH"].code

REQUESTS: list[m.Request] = [
    m.VoteRequest("cluster-a", 2, 7, 3, 6, 120, False, CID),
    m.VoteRequest(None, 1, 5, 2, 5, 0, True, CID),
    m.BeginQuorumEpochRequest("cluster-a", 3, 9, 1, CID),
    m.EndQuorumEpochRequest("cluster-a", 3, 9, (2, 1), CID),
    m.EndQuorumEpochRequest(None, 1, 2, (), CID),
    m.FetchRequest("cluster-a", 2, 9, 1000, 8, 0, 500, 8 << 20, CID),
    m.FetchRequest(None, 3, 1, 0, 0, 0, 0, 1024, CID),
    m.FetchSnapshotRequest("cluster-a", 2, 9, SnapshotId(4711, 3), 65536, 1 << 20, CID),
    m.DescribeQuorumRequest(CID),
]

BATCHES = (
    Batch(100, 8, (b"leader-change",), control=True),
    Batch(101, 8, (b"a", b"", b"c" * 300)),
    Batch(104, 9, (b"d",)),
)

RESPONSES: list[m.Response] = [
    m.VoteResponse(errors.NONE, 2, 7, True, CID),
    m.VoteResponse(FENCED, -1, 8, False, CID),
    m.VoteResponse(INCONSISTENT, 3, 8, False, CID),
    m.BeginQuorumEpochResponse(errors.NONE, 3, 9, CID),
    m.EndQuorumEpochResponse(FENCED, 1, 10, CID),
    m.FetchResponse(errors.NONE, 1, 9, 104, 0, BATCHES, None, None, CID),
    m.FetchResponse(errors.NONE, 1, 9, -1, 0, (), m.EpochEndOffset(7, 90), None, CID),
    m.FetchResponse(errors.NONE, 1, 9, 500, 400, (), None, SnapshotId(400, 6), CID),
    m.FetchResponse(INCONSISTENT, -1, 9, -1, 0, (), None, None, CID),
    m.FetchSnapshotResponse(errors.NONE, 1, 9, SnapshotId(400, 6), 5000, 4096, b"xyz" * 10, CID),
    m.FetchSnapshotResponse(FENCED, 1, 10, None, -1, -1, b"", CID),
    m.DescribeQuorumResponse(
        errors.NONE,
        1,
        9,
        104,
        (m.ReplicaDescription(1, 105, -1, 1700), m.ReplicaDescription(2, -1, -1, -1)),
        (m.ReplicaDescription(7, 80, 1600, 1500),),
        CID,
    ),
]


def _ids(items: list[object]) -> list[str]:
    return [f"{type(x).__name__}-{i}" for i, x in enumerate(items)]


@pytest.mark.parametrize("message", REQUESTS, ids=_ids(REQUESTS))
def test_request_round_trip(message: m.Request) -> None:
    key, version, body = wire.to_request(message)
    assert version == api_keys.BY_KEY[key].max_version  # Kafka 4.0's newest
    raw = bytearray(codec.join(codec.encode_request(key, version, 99, "raft-1", body)))
    header, decoded = codec.decode_request(raw[4:])
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (
        key,
        version,
        99,
    )
    assert wire.from_request(key, version, decoded, CID) == message


@pytest.mark.parametrize("message", RESPONSES, ids=_ids(RESPONSES))
def test_response_round_trip(message: m.Response) -> None:
    key = wire.api_key_of(message)
    version = wire.VERSIONS[key]
    body = wire.to_response(message)
    raw = bytearray(codec.join(codec.encode_response(key, version, 5, body)))
    cid, decoded = codec.decode_response(key, version, raw[4:])
    assert cid == 5
    assert wire.from_response(key, version, decoded, CID) == message


def test_every_message_type_is_covered() -> None:
    seen = {type(x) for x in [*REQUESTS, *RESPONSES]}
    assert seen == set(m.REQUEST_TYPES) | {
        m.VoteResponse,
        m.BeginQuorumEpochResponse,
        m.EndQuorumEpochResponse,
        m.FetchResponse,
        m.FetchSnapshotResponse,
        m.DescribeQuorumResponse,
    }


def test_kafka_layout_single_partition_and_metadata_topic_id() -> None:
    _, _, body = wire.to_request(REQUESTS[5])
    (topic,) = body.topics
    assert topic.topic_id == wire.METADATA_TOPIC_ID == __import__("uuid").UUID(int=1)
    assert [p.partition for p in topic.partitions] == [0]
    assert body.replica_state.replica_id == 2 and body.replica_state.replica_epoch == -1
    assert body.cluster_id == "cluster-a"
    # The cluster id mismatch is request-level, other errors are the partition's.
    top = wire.to_response(RESPONSES[2])
    assert top.error_code == INCONSISTENT and top.topics[0].partitions[0].error_code == 0
    part = wire.to_response(RESPONSES[1])
    assert part.error_code == 0 and part.topics[0].partitions[0].error_code == FENCED


def test_older_versions_read_the_same() -> None:
    """v0 EndQuorumEpoch carries preferred_successors; Fetch v12 names the topic."""
    for message, version in ((REQUESTS[3], 0), (REQUESTS[5], 12), (REQUESTS[0], 1)):
        key, _, body = wire.to_request(message, version)
        raw = bytearray(codec.join(codec.encode_body(key, version, "request", body)))
        decoded = codec.decode_body(key, version, "request", raw)
        back = wire.from_request(key, version, decoded, CID)
        if version == 1 and key == api_keys.VOTE:
            assert back == m.VoteRequest("cluster-a", 2, 7, 3, 6, 120, False, CID)  # no pre-vote
        else:
            assert back == message


def test_top_level_error_without_partitions() -> None:
    cls = codec.message_class(api_keys.VOTE, "response")
    body = cls(error_code=INCONSISTENT, topics=[])
    assert wire.from_response(api_keys.VOTE, 2, body, CID) == m.VoteResponse(
        INCONSISTENT, -1, -1, False, CID
    )


def test_other_partitions_are_refused() -> None:
    key, version, body = wire.to_request(REQUESTS[5])
    body.topics[0].topic_id = __import__("uuid").UUID(int=7)
    assert not wire.is_metadata_fetch(version, body)
    with pytest.raises(wire.WireError):
        wire.from_request(key, version, body, CID)
    key, version, body = wire.to_request(REQUESTS[0])
    body.topics[0].topic_name = "orders"
    with pytest.raises(wire.WireError):
        wire.from_request(key, version, body, CID)


def test_request_source() -> None:
    assert [wire.request_source(r) for r in REQUESTS] == [2, 1, 3, 3, 1, 2, 3, 2, None]
