"""What the group coordinator is asked and what it answers, in its own words (no wire versions:
handlers translate to and from the protocol messages)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gregor.coordinator.group import codes

# (member id, group instance id, protocol metadata) as JoinGroup gives them to the leader
JoinedMember = tuple[str, str | None, bytes]
# (topic, partition)
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool = True  # JoinGroup v4+ (KIP-394)
    supports_skip_assignment: bool = False  # JoinGroup v9+ (KIP-814)
    reason: str | None = None


@dataclass(slots=True)
class JoinResult:
    error: int
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: list[JoinedMember] = field(default_factory=list)

    @classmethod
    def failed(cls, error: int, member_id: str = "") -> JoinResult:
        return cls(error, member_id)


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes]


@dataclass(slots=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""

    @classmethod
    def failed(cls, error: int) -> SyncResult:
        return cls(error)


@dataclass(slots=True)
class LeaveResult:
    error: int
    members: list[tuple[str, str | None, int]] = field(
        default_factory=list
    )  # (member, instance, error)


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    retention_time_ms: int  # -1: the broker's offsets.retention.minutes
    # (topic, partition, offset, leader epoch, metadata)
    offsets: list[tuple[str, int, int, int, str | None]]
    api_version: int = 9


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """TxnOffsetCommit: offsets committed as part of the producer's transaction. The member
    fields come with v3+ (KIP-447); older versions leave them at -1 / "" / None."""

    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str | None
    # (topic, partition, offset, leader epoch, metadata)
    offsets: list[tuple[str, int, int, int, str | None]]
    transactional_id: str = ""


@dataclass(slots=True)
class PartitionErrors:
    """Per-partition error codes in request order, or one error for the whole request."""

    error: int = codes.NONE
    partitions: list[tuple[str, int, int]] = field(
        default_factory=list
    )  # (topic, partition, error)


@dataclass(slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int  # -1: none committed
    leader_epoch: int
    metadata: str
    error: int = codes.NONE


@dataclass(slots=True)
class OffsetFetchResult:
    error: int
    offsets: list[FetchedOffset] = field(default_factory=list)


@dataclass(slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(slots=True)
class DescribedGroup:
    error: int
    group_id: str
    state: str = "Dead"
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribedMember] = field(default_factory=list)
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"
