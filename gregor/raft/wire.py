"""The Raft core's messages (messages.py) as Kafka requests and responses of our codec, and back.

Every KRaft RPC names the one partition `__cluster_metadata-0`: a single topic (by name, and
for Fetch v13+ by Kafka's fixed metadata topic id, 00000000-0000-0000-0000-000000000001) with a
single partition. The versions sent are the newest Kafka 4.0 speaks (`VERSIONS`); any version
the schema declares is read.

    to_request(message)                      -> (api_key, version, body)
    from_request(api_key, version, body, c)  -> a messages.Request with correlation id c
    to_response(message, version)            -> body
    from_response(api_key, version, body, c) -> a messages.Response with correlation id c
    request_source(message)                  -> the node that sent a request (None: anyone)

Error codes: INCONSISTENT_CLUSTER_ID is request-level (the top-level error code, as Kafka's
RaftUtil does); every other error goes in the partition. A response read back takes the
top-level error when it is set; a response without our partition (a top-level error from a
Kafka node) reads as that error with the leader unknown.

Absent values: a diverging epoch or snapshot id the core leaves as None travels as Kafka's
default (-1, -1) and reads back as None. Fetched batches travel as record batches v2 (a
control batch's record keyed as LEADER_CHANGE); a trailing partial batch is ignored.
Directory ids (KIP-853) are sent as the zero uuid. Endpoints: a Fetch response (v16+) may name
where the leader listens (`node_endpoints`, KIP-951/853), so that an observer that only knows
bootstrap servers can reach it (`add_leader_endpoint`, `node_endpoints`); other responses carry
none.
"""

from __future__ import annotations

import uuid
from typing import Any

from gregor.protocol import api_keys, codec, errors
from gregor.protocol.codec import message_class
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch, read_batch_records, record_values
from gregor.raft import fetch_wire
from gregor.raft import messages as m
from gregor.raft.control import LEADER_CHANGE_KEY
from gregor.raft.log import Batch, SnapshotId, new_batch

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID
INCONSISTENT_CLUSTER_ID = errors.BY_NAME["INCONSISTENT_CLUSTER_ID"].code
_TOP_LEVEL_ERRORS = frozenset({INCONSISTENT_CLUSTER_ID})
_ZERO_UUID = uuid.UUID(int=0)

VERSIONS: dict[int, int] = {
    api_keys.VOTE: 2,
    api_keys.BEGIN_QUORUM_EPOCH: 1,
    api_keys.END_QUORUM_EPOCH: 1,
    api_keys.FETCH: 17,
    api_keys.FETCH_SNAPSHOT: 1,
    api_keys.DESCRIBE_QUORUM: 2,
}
RAFT_APIS = frozenset(VERSIONS)

_KEY_OF: dict[type, int] = {
    m.VoteRequest: api_keys.VOTE,
    m.VoteResponse: api_keys.VOTE,
    m.BeginQuorumEpochRequest: api_keys.BEGIN_QUORUM_EPOCH,
    m.BeginQuorumEpochResponse: api_keys.BEGIN_QUORUM_EPOCH,
    m.EndQuorumEpochRequest: api_keys.END_QUORUM_EPOCH,
    m.EndQuorumEpochResponse: api_keys.END_QUORUM_EPOCH,
    m.FetchRequest: api_keys.FETCH,
    m.FetchResponse: api_keys.FETCH,
    m.FetchSnapshotRequest: api_keys.FETCH_SNAPSHOT,
    m.FetchSnapshotResponse: api_keys.FETCH_SNAPSHOT,
    m.DescribeQuorumRequest: api_keys.DESCRIBE_QUORUM,
    m.DescribeQuorumResponse: api_keys.DESCRIBE_QUORUM,
}


# KRaft's Fetch v17 read straight into the core's fields (fetch_wire.py), other shapes as before.
codec.add_shortcut(api_keys.FETCH, fetch_wire.VERSION, "request", fetch_wire.read_request)
codec.add_shortcut(api_keys.FETCH, fetch_wire.VERSION, "response", fetch_wire.read_response)


class WireError(ValueError):
    """A request or response that does not name `__cluster_metadata-0` as the core needs."""


def api_key_of(message: m.Message) -> int:
    return _KEY_OF[type(message)]


def _cls(api_key: int, kind: str) -> Any:
    return message_class(api_key, kind)


def _split_error(error: int) -> tuple[int, int]:
    """(top-level error, partition error) for the core's one error code."""
    return (error, errors.NONE) if error in _TOP_LEVEL_ERRORS else (errors.NONE, error)


def _only_partition(body: Any, topic_field: str = "topics", partitions: str = "partitions") -> Any:
    """The one partition of a response; None when the response carries none (a top-level error)."""
    topics = getattr(body, topic_field)
    if not topics:
        return None
    parts = getattr(topics[0], partitions)
    if len(topics) != 1 or len(parts) != 1:
        raise WireError(f"expected one topic with one partition, got {topics!r}")
    return parts[0]


def _request_partition(
    body: Any, topic_field: str = "topics", name_field: str = "topic_name"
) -> Any:
    topics = getattr(body, topic_field)
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        raise WireError(f"expected one topic with one partition, got {topics!r}")
    topic = topics[0]
    name = getattr(topic, name_field, None)
    if name is not None and name != "" and name != METADATA_TOPIC:
        raise WireError(f"not the metadata topic: {name!r}")
    return topic.partitions[0]


# -- batches ------------------------------------------------------------------------------------


def encode_batches(batches: tuple[Batch, ...]) -> bytes | None:
    """Record batches v2, one per Raft batch (None for none, as Kafka sends no records): the
    bytes the log wrote where it kept them, else built."""
    if not batches:
        return None
    if len(batches) == 1 and batches[0].encoded is not None:
        return batches[0].encoded
    out = bytearray()
    for batch in batches:
        if batch.encoded is not None:
            out += batch.encoded
            continue
        key = LEADER_CHANGE_KEY if batch.control else None
        out += build_batch(
            [(key, record) for record in batch.records],
            base_offset=batch.base_offset,
            partition_leader_epoch=batch.epoch,
            control=batch.control,
        )
    return bytes(out)


def decode_batches(data: Any) -> tuple[Batch, ...]:
    if data is None or len(data) == 0:
        return ()
    out = []
    for pos, header in rb.iter_headers(data):
        values = record_values(data, pos, header, b"")
        if values is None:  # compressed, or not as the lean walk expects
            header, records = read_batch_records(data, pos)
            values = tuple(bytes(r.value) if r.value is not None else b"" for r in records)
        wire_bytes = bytes(data[pos : pos + header.batch_length + rb.LOG_OVERHEAD])
        out.append(
            new_batch(
                header.base_offset,
                header.partition_leader_epoch,
                values,
                header.is_control,
                wire_bytes,  # a follower writes the leader's bytes (its log checks the CRC)
            )
        )
    return tuple(out)


# -- requests -----------------------------------------------------------------------------------


def to_request(message: m.Request, version: int | None = None) -> tuple[int, int, Any]:
    """The request body for `message`, with its api key and the version to send."""
    if type(message) is m.FetchRequest and version in (None, fetch_wire.VERSION):
        return api_keys.FETCH, fetch_wire.VERSION, fetch_wire.FetchRequestBody(message, _fetch_body)
    key = api_key_of(message)
    v = VERSIONS[key] if version is None else version
    cls = _cls(key, "request")
    if isinstance(message, m.VoteRequest):
        body = _vote_request(cls, message)
    elif isinstance(message, m.BeginQuorumEpochRequest):
        part = cls.PartitionData(
            partition_index=METADATA_PARTITION,
            leader_id=message.leader_id,
            leader_epoch=message.leader_epoch,
        )
        body = cls(
            cluster_id=message.cluster_id,
            voter_id=message.voter_id,
            topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[part])],
        )
    elif isinstance(message, m.EndQuorumEpochRequest):
        body = _end_quorum_epoch_request(cls, message)
    elif isinstance(message, m.FetchRequest):
        body = _fetch_request(cls, message)
    elif isinstance(message, m.FetchSnapshotRequest):
        body = _fetch_snapshot_request(cls, message)
    else:
        body = cls(
            topics=[
                cls.TopicData(
                    topic_name=METADATA_TOPIC,
                    partitions=[cls.PartitionData(partition_index=METADATA_PARTITION)],
                )
            ]
        )
    return key, v, body


def _vote_request(cls: Any, message: m.VoteRequest) -> Any:
    """A Vote request's body."""
    part = cls.PartitionData(
        partition_index=METADATA_PARTITION,
        replica_epoch=message.replica_epoch,
        replica_id=message.replica_id,
        last_offset_epoch=message.last_offset_epoch,
        last_offset=message.last_offset,
        pre_vote=message.pre_vote,
    )
    return cls(
        cluster_id=message.cluster_id,
        voter_id=message.voter_id,
        topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[part])],
    )


def _end_quorum_epoch_request(cls: Any, message: m.EndQuorumEpochRequest) -> Any:
    """An EndQuorumEpoch request's body."""
    successors = list(message.preferred_successors)
    part = cls.PartitionData(
        partition_index=METADATA_PARTITION,
        leader_id=message.leader_id,
        leader_epoch=message.leader_epoch,
        preferred_successors=successors,
        preferred_candidates=[
            cls.ReplicaInfo(candidate_id=s, candidate_directory_id=_ZERO_UUID) for s in successors
        ],
    )
    return cls(
        cluster_id=message.cluster_id,
        topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[part])],
    )


def _fetch_snapshot_request(cls: Any, message: m.FetchSnapshotRequest) -> Any:
    """A FetchSnapshot request's body."""
    part = cls.PartitionSnapshot(
        partition=METADATA_PARTITION,
        current_leader_epoch=message.current_leader_epoch,
        snapshot_id=cls.SnapshotId(
            end_offset=message.snapshot_id.end_offset, epoch=message.snapshot_id.epoch
        ),
        position=message.position,
    )
    return cls(
        cluster_id=message.cluster_id,
        replica_id=message.replica_id,
        max_bytes=message.max_bytes,
        topics=[cls.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])],
    )


def _fetch_body(body: fetch_wire.FetchRequestBody) -> Any:
    """The generated body of the newest Fetch request for `body`'s message."""
    return _fetch_request(_cls(api_keys.FETCH, "request"), body.message)


def _fetch_request(cls: Any, message: m.FetchRequest) -> Any:
    part = cls.FetchPartition(
        partition=METADATA_PARTITION,
        current_leader_epoch=message.current_leader_epoch,
        fetch_offset=message.fetch_offset,
        last_fetched_epoch=message.last_fetched_epoch,
        log_start_offset=message.log_start_offset,
        partition_max_bytes=message.max_bytes,
    )
    return cls(
        cluster_id=message.cluster_id,
        replica_id=message.replica_id,  # v14 and below
        replica_state=cls.ReplicaState(replica_id=message.replica_id, replica_epoch=-1),
        max_wait_ms=message.max_wait_ms,
        min_bytes=0,
        max_bytes=message.max_bytes,
        topics=[
            cls.FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part])
        ],
    )


def is_metadata_fetch(version: int, body: Any) -> bool:
    """Whether a Fetch request names exactly `__cluster_metadata-0` (by id from v13)."""
    if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
        return False
    topic = body.topics[0]
    named = topic.topic_id == METADATA_TOPIC_ID if version >= 13 else topic.topic == METADATA_TOPIC
    return named and topic.partitions[0].partition == METADATA_PARTITION


def from_request(api_key: int, version: int, body: Any, correlation_id: int) -> m.Request:
    """The core's request for a decoded request body; WireError if it is not for our partition."""
    if type(body) is fetch_wire.FetchRequestView:  # a KRaft Fetch v17, read straight
        return m.new_fetch_request(*body.fields, correlation_id)
    if api_key == api_keys.VOTE:
        p = _request_partition(body)
        return m.VoteRequest(
            cluster_id=body.cluster_id,
            replica_id=p.replica_id,
            replica_epoch=p.replica_epoch,
            voter_id=body.voter_id,
            last_offset_epoch=p.last_offset_epoch,
            last_offset=p.last_offset,
            pre_vote=p.pre_vote,
            correlation_id=correlation_id,
        )
    if api_key == api_keys.BEGIN_QUORUM_EPOCH:
        p = _request_partition(body)
        return m.BeginQuorumEpochRequest(
            cluster_id=body.cluster_id,
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
            voter_id=body.voter_id,
            correlation_id=correlation_id,
        )
    if api_key == api_keys.END_QUORUM_EPOCH:
        p = _request_partition(body)
        successors = (
            p.preferred_successors
            if version == 0
            else [c.candidate_id for c in p.preferred_candidates]
        )
        return m.EndQuorumEpochRequest(
            cluster_id=body.cluster_id,
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
            preferred_successors=tuple(successors),
            correlation_id=correlation_id,
        )
    if api_key == api_keys.FETCH:
        if not is_metadata_fetch(version, body):
            raise WireError("a KRaft Fetch names __cluster_metadata-0 only")
        p = body.topics[0].partitions[0]
        replica_id = body.replica_state.replica_id if version >= 15 else body.replica_id
        return m.FetchRequest(
            cluster_id=body.cluster_id,
            replica_id=replica_id,
            current_leader_epoch=p.current_leader_epoch,
            fetch_offset=p.fetch_offset,
            last_fetched_epoch=p.last_fetched_epoch,
            log_start_offset=p.log_start_offset,
            max_wait_ms=body.max_wait_ms,
            max_bytes=min(body.max_bytes, p.partition_max_bytes),
            correlation_id=correlation_id,
        )
    if api_key == api_keys.FETCH_SNAPSHOT:
        p = _request_partition(body, name_field="name")
        return m.FetchSnapshotRequest(
            cluster_id=body.cluster_id,
            replica_id=body.replica_id,
            current_leader_epoch=p.current_leader_epoch,
            snapshot_id=SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch),
            position=p.position,
            max_bytes=body.max_bytes,
            correlation_id=correlation_id,
        )
    if api_key == api_keys.DESCRIBE_QUORUM:
        _request_partition(body)
        return m.DescribeQuorumRequest(correlation_id=correlation_id)
    raise WireError(f"api {api_key} is not a KRaft RPC")


def request_source(message: m.Request) -> int | None:
    """The node a request comes from, as the core names it (None: DescribeQuorum, anyone)."""
    if type(message) is m.FetchRequest:  # nearly every one: a voter's or an observer's Fetch
        return message.replica_id
    if isinstance(message, m.VoteRequest):
        return message.replica_id
    if isinstance(message, (m.BeginQuorumEpochRequest, m.EndQuorumEpochRequest)):
        return message.leader_id
    if isinstance(message, (m.FetchRequest, m.FetchSnapshotRequest)):
        return message.replica_id
    return None


# -- responses ----------------------------------------------------------------------------------


def to_response(message: m.Response, version: int | None = None) -> Any:
    """The response body for the core's `message` (`version` only matters for Fetch's topic)."""
    if type(message) is m.FetchResponse and version in (None, fetch_wire.VERSION):
        return _fetch_response_body(message)
    key = api_key_of(message)
    v = VERSIONS[key] if version is None else version
    cls = _cls(key, "response")
    top, err = _split_error(message.error_code)
    if isinstance(message, m.VoteResponse):
        part = cls.PartitionData(
            partition_index=METADATA_PARTITION,
            error_code=err,
            leader_id=message.leader_id,
            leader_epoch=message.leader_epoch,
            vote_granted=message.vote_granted,
        )
        return cls(
            error_code=top, topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[part])]
        )
    if isinstance(message, (m.BeginQuorumEpochResponse, m.EndQuorumEpochResponse)):
        part = cls.PartitionData(
            partition_index=METADATA_PARTITION,
            error_code=err,
            leader_id=message.leader_id,
            leader_epoch=message.leader_epoch,
        )
        return cls(
            error_code=top, topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[part])]
        )
    if isinstance(message, m.FetchResponse):
        return _fetch_response(cls, message, top, err, v)
    if isinstance(message, m.FetchSnapshotResponse):
        snap = message.snapshot_id or SnapshotId(-1, -1)
        part = cls.PartitionSnapshot(
            index=METADATA_PARTITION,
            error_code=err,
            snapshot_id=cls.SnapshotId(end_offset=snap.end_offset, epoch=snap.epoch),
            current_leader=cls.LeaderIdAndEpoch(
                leader_id=message.leader_id, leader_epoch=message.leader_epoch
            ),
            size=message.size,
            position=message.position,
            unaligned_records=message.data,
        )
        return cls(
            error_code=top, topics=[cls.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])]
        )
    assert isinstance(message, m.DescribeQuorumResponse)
    state = cls.ReplicaState

    def replicas(found: tuple[m.ReplicaDescription, ...]) -> list[Any]:
        return [
            state(
                replica_id=r.replica_id,
                log_end_offset=r.log_end_offset,
                last_fetch_timestamp=r.last_fetch_timestamp,
                last_caught_up_timestamp=r.last_caught_up_timestamp,
            )
            for r in found
        ]

    part = cls.PartitionData(
        partition_index=METADATA_PARTITION,
        error_code=err,
        leader_id=message.leader_id,
        leader_epoch=message.leader_epoch,
        high_watermark=message.high_watermark,
        current_voters=replicas(message.current_voters),
        observers=replicas(message.observers),
    )
    return cls(error_code=top, topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])


def _fetch_response_body(message: m.FetchResponse) -> fetch_wire.FetchResponseBody:
    """The newest Fetch response for `message`, written straight from it (fetch_wire.py)."""
    top, err = _split_error(message.error_code)
    records = encode_batches(message.batches)
    return fetch_wire.FetchResponseBody(message, _generic_fetch_response, top, err, records)


def _generic_fetch_response(body: fetch_wire.FetchResponseBody) -> Any:
    """The generated body of the newest Fetch response for `body`'s message."""
    cls = _cls(api_keys.FETCH, "response")
    top, err = body.error_code, body.partition_error
    return _fetch_response(cls, body.message, top, err, fetch_wire.VERSION)


def _fetch_response(cls: Any, message: m.FetchResponse, top: int, err: int, version: int) -> Any:
    diverging = message.diverging_epoch or m.EpochEndOffset(-1, -1)
    snap = message.snapshot_id or SnapshotId(-1, -1)
    part = cls.PartitionData(
        partition_index=METADATA_PARTITION,
        error_code=err,
        high_watermark=message.high_watermark,
        log_start_offset=message.log_start_offset,
        diverging_epoch=cls.EpochEndOffset(epoch=diverging.epoch, end_offset=diverging.end_offset),
        current_leader=cls.LeaderIdAndEpoch(
            leader_id=message.leader_id, leader_epoch=message.leader_epoch
        ),
        snapshot_id=cls.SnapshotId(end_offset=snap.end_offset, epoch=snap.epoch),
        records=encode_batches(message.batches),
    )
    topic = cls.FetchableTopicResponse(
        topic=METADATA_TOPIC if version < 13 else "",
        topic_id=METADATA_TOPIC_ID,
        partitions=[part],
    )
    return cls(error_code=top, responses=[topic])


NODE_ENDPOINTS_VERSION = 16  # Fetch responses carry node_endpoints from this version


def add_leader_endpoint(body: Any, version: int, leader_id: int, host: str, port: int) -> None:
    """Name where `leader_id` listens in a Fetch response body (a no-op below v16)."""
    if version < NODE_ENDPOINTS_VERSION or leader_id < 0:
        return
    if isinstance(body, fetch_wire.FetchResponseBody):
        body.set_endpoints(((leader_id, host, port),))
        return
    cls = _cls(api_keys.FETCH, "response")
    body.node_endpoints = [cls.NodeEndpoint(node_id=leader_id, host=host, port=port, rack=None)]


def node_endpoints(body: Any) -> dict[int, tuple[str, int]]:
    """The endpoints a decoded Fetch response names: {node id: (host, port)}."""
    if type(body) is fetch_wire.FetchResponseView:
        return body.endpoints
    return {e.node_id: (e.host, e.port) for e in getattr(body, "node_endpoints", None) or ()}


def _error(top: int, part: Any) -> int:
    return top if top != errors.NONE else part.error_code


def from_response(api_key: int, version: int, body: Any, correlation_id: int) -> m.Response:
    """The core's response for a decoded response body to a request with `correlation_id`."""
    if api_key == api_keys.FETCH:
        return _from_fetch_response(body, correlation_id)
    if api_key == api_keys.FETCH_SNAPSHOT:
        p = _only_partition(body)
        if p is None:
            return m.FetchSnapshotResponse(
                body.error_code, -1, -1, None, -1, -1, b"", correlation_id
            )
        snap = SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        return m.FetchSnapshotResponse(
            error_code=_error(body.error_code, p),
            leader_id=p.current_leader.leader_id,
            leader_epoch=p.current_leader.leader_epoch,
            snapshot_id=None if snap == (-1, -1) else snap,
            size=p.size,
            position=p.position,
            data=bytes(p.unaligned_records or b""),
            correlation_id=correlation_id,
        )
    p = _only_partition(body)
    top = body.error_code
    leader_id, epoch = (p.leader_id, p.leader_epoch) if p is not None else (-1, -1)
    error = top if p is None else _error(top, p)
    if api_key == api_keys.VOTE:
        granted = p.vote_granted if p is not None else False
        return m.VoteResponse(error, leader_id, epoch, granted, correlation_id)
    if api_key == api_keys.BEGIN_QUORUM_EPOCH:
        return m.BeginQuorumEpochResponse(error, leader_id, epoch, correlation_id)
    if api_key == api_keys.END_QUORUM_EPOCH:
        return m.EndQuorumEpochResponse(error, leader_id, epoch, correlation_id)
    if api_key == api_keys.DESCRIBE_QUORUM:

        def replicas(found: list[Any]) -> tuple[m.ReplicaDescription, ...]:
            return tuple(
                m.ReplicaDescription(
                    r.replica_id,
                    r.log_end_offset,
                    r.last_fetch_timestamp,
                    r.last_caught_up_timestamp,
                )
                for r in found
            )

        if p is None:
            return m.DescribeQuorumResponse(error, -1, -1, -1, (), (), correlation_id)
        return m.DescribeQuorumResponse(
            error_code=error,
            leader_id=leader_id,
            leader_epoch=epoch,
            high_watermark=p.high_watermark,
            current_voters=replicas(p.current_voters),
            observers=replicas(p.observers),
            correlation_id=correlation_id,
        )
    raise WireError(f"api {api_key} is not a KRaft RPC")


def _from_fetch_response(body: Any, correlation_id: int) -> m.FetchResponse:
    if type(body) is fetch_wire.FetchResponseView:
        return _from_fetch_view(body, correlation_id)
    p = _only_partition(body, "responses")
    if p is None:
        return m.FetchResponse(body.error_code, -1, -1, -1, -1, (), None, None, correlation_id)
    diverging = m.EpochEndOffset(p.diverging_epoch.epoch, p.diverging_epoch.end_offset)
    snap = SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch)
    return m.FetchResponse(
        error_code=_error(body.error_code, p),
        leader_id=p.current_leader.leader_id,
        leader_epoch=p.current_leader.leader_epoch,
        high_watermark=p.high_watermark,
        log_start_offset=p.log_start_offset,
        batches=decode_batches(p.records),
        diverging_epoch=None if diverging.epoch == -1 and diverging.end_offset == -1 else diverging,
        snapshot_id=None if snap == (-1, -1) else snap,
        correlation_id=correlation_id,
    )


def _from_fetch_view(view: fetch_wire.FetchResponseView, correlation_id: int) -> m.FetchResponse:
    """`_from_fetch_response` for a response read by fetch_wire's shortcut."""
    diverging, snap = view.diverging_epoch, view.snapshot_id
    return m.new_fetch_response(
        view.error_code if view.error_code != errors.NONE else view.partition_error,
        view.leader_id,
        view.leader_epoch,
        view.high_watermark,
        view.log_start_offset,
        decode_batches(view.records),
        None if diverging == (-1, -1) else m.EpochEndOffset(*diverging),
        None if snap == (-1, -1) else SnapshotId(*snap),
        correlation_id,
    )
