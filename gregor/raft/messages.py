"""The KRaft RPCs as plain values, field for field what the Raft core reads and writes of Kafka's
Vote (v2, with PreVote: KIP-996), BeginQuorumEpoch, EndQuorumEpoch, Fetch (the KRaft fields:
replica id and epoch, last fetched epoch, diverging epoch, current leader, snapshot id),
FetchSnapshot (KIP-630) and DescribeQuorum, for the one partition `__cluster_metadata-0`.

They leave out the topic/partition nesting and the endpoints (voters are static node ids here);
a wire adapter maps them to the generated codec later. `correlation_id` ties a response to its
request: a node acts on a response only if it answers the request it has in flight to that node.

Epoch and leader fields of responses are the responder's current view (`leader_id` -1: unknown).
"""

from __future__ import annotations

from dataclasses import dataclass

from gregor.frozen import positional_constructor
from gregor.raft.log import Batch, SnapshotId

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class VoteRequest:
    cluster_id: str | None
    replica_id: int  # the candidate (or prospective, for a pre-vote)
    replica_epoch: int  # the candidate's epoch; a prospective sends its current epoch
    voter_id: int  # the voter this request is for
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset
    pre_vote: bool
    correlation_id: int


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    correlation_id: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    voter_id: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]  # voters by descending fetch offset
    correlation_id: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    cluster_id: str | None
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int  # the follower's (flushed) log end offset
    last_fetched_epoch: int  # the epoch of the follower's last batch
    log_start_offset: int
    max_wait_ms: int
    max_bytes: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int  # -1: unknown (a new leader before it commits an entry of its epoch)
    log_start_offset: int
    batches: tuple[Batch, ...]
    diverging_epoch: EpochEndOffset | None  # truncate to this before fetching again
    snapshot_id: SnapshotId | None  # fetch this snapshot: the fetch offset is below the log
    correlation_id: int


# The two messages of every metadata commit, built with every field in order (frozen.py).
new_fetch_request = positional_constructor(FetchRequest)
new_fetch_response = positional_constructor(FetchResponse)


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    cluster_id: str | None
    replica_id: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    snapshot_id: SnapshotId | None
    size: int
    position: int
    data: bytes
    correlation_id: int


@dataclass(frozen=True, slots=True)
class DescribeQuorumRequest:
    correlation_id: int


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    replica_id: int
    log_end_offset: int  # -1 before the replica's first fetch in this epoch
    last_fetch_timestamp: int  # -1: never
    last_caught_up_timestamp: int  # -1: never


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    current_voters: tuple[ReplicaDescription, ...]
    observers: tuple[ReplicaDescription, ...]
    correlation_id: int


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
    | DescribeQuorumRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
    | DescribeQuorumResponse
)
Message = Request | Response

REQUEST_TYPES = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    DescribeQuorumRequest,
)
