"""The records of `__consumer_offsets`, in Kafka's formats, so Kafka's tools read our logs and we
read theirs.

Every record is a key and a value, each opening with an int16 version. The key version says what
the record is; a null value is a tombstone (compaction then forgets the key)::

    key version 0 or 1: OffsetCommitKey      group:string topic:string partition:int32
    key version 2:      GroupMetadataKey     group:string
    key version 3+:     consumer-protocol (KIP-848) and share-group records: not ours, skipped

    OffsetCommitValue v0-4 (we write v3, or v1 when an explicit expiry is asked for):
      offset:int64
      leaderEpoch:int32          v3+
      metadata:string
      commitTimestamp:int64
      expireTimestamp:int64      v1 only
      (v4 is flexible: compact strings and a tagged-field section at the end)

    GroupMetadataValue v0-4 (we write v3):
      protocolType:string  generation:int32  protocol:string?  leader:string?
      currentStateTimestamp:int64                           v2+
      members:[MemberMetadata]
        memberId:string
        groupInstanceId:string?                             v3+
        clientId:string  clientHost:string
        rebalanceTimeout:int32                              v1+
        sessionTimeout:int32
        subscription:bytes  assignment:bytes

A TxnOffsetCommit writes the same OffsetCommit records in a transactional batch (the producer's
id and epoch, the transactional attribute); the transaction is ended by a control batch of that
producer whose one record has the key `version:int16 type:int16` (type 0 ABORT, 1 COMMIT) and
the value `version:int16 coordinatorEpoch:int32` (the runtime reads it when loading).

Non-flexible encodings: string = int16 length + UTF-8 (-1 for null), bytes = int32 length,
array = int32 count. Flexible (v4): lengths and counts are unsigned varints of n+1 (0 for null),
and every struct ends with its tagged fields (a varint count of (tag, size, data)), which we skip.

The same layouts, versions and field names as Kafka's `OffsetCommitKey.json`,
`OffsetCommitValue.json`, `GroupMetadataKey.json` and `GroupMetadataValue.json`; the encoding is
our own.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field

from gregor.coordinator.record_reader import RecordFormatError, RecordReader

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3
NO_LEADER_EPOCH = -1


# -- the records ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1  # only set by OffsetCommit v2-4 retention_time_ms
    # Where the record that set it is in the log (-1: not known). Not part of the record: the
    # coordinator notes it on replay, to order a transactional commit against plain ones.
    record_offset: int = field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = -1
    members: list[MemberMetadata] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    group_id: str
    topic: str
    partition: int
    value: OffsetAndMetadata | None  # None: tombstone, the offset is deleted


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    group_id: str
    value: GroupMetadataValue | None  # None: tombstone, the group is deleted


Record = OffsetCommitRecord | GroupMetadataRecord


# -- encoding ------------------------------------------------------------------------------------


def _str(out: bytearray, s: str | None) -> None:
    if s is None:
        out += b"\xff\xff"
        return
    b = s.encode()
    out += struct.pack(">h", len(b))
    out += b


def _bytes(out: bytearray, b: bytes) -> None:
    out += struct.pack(">i", len(b))
    out += b


def encode_key(record: Record) -> bytes:
    out = bytearray()
    if isinstance(record, OffsetCommitRecord):
        out += struct.pack(">h", OFFSET_COMMIT_KEY_VERSION)
        _str(out, record.group_id)
        _str(out, record.topic)
        out += struct.pack(">i", record.partition)
    else:
        out += struct.pack(">h", GROUP_METADATA_KEY_VERSION)
        _str(out, record.group_id)
    return bytes(out)


def encode_value(record: Record) -> bytes | None:
    if record.value is None:
        return None
    out = bytearray()
    v = record.value
    if isinstance(v, OffsetAndMetadata):
        if v.expire_timestamp_ms >= 0:
            out += struct.pack(">hq", OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY, v.offset)
            _str(out, v.metadata)
            out += struct.pack(">qq", v.commit_timestamp_ms, v.expire_timestamp_ms)
        else:
            out += struct.pack(">hqi", OFFSET_COMMIT_VALUE_VERSION, v.offset, v.leader_epoch)
            _str(out, v.metadata)
            out += struct.pack(">q", v.commit_timestamp_ms)
        return bytes(out)
    out += struct.pack(">h", GROUP_METADATA_VALUE_VERSION)
    _str(out, v.protocol_type)
    out += struct.pack(">i", v.generation)
    _str(out, v.protocol)
    _str(out, v.leader)
    out += struct.pack(">qi", v.current_state_timestamp_ms, len(v.members))
    for m in v.members:
        _str(out, m.member_id)
        _str(out, m.group_instance_id)
        _str(out, m.client_id)
        _str(out, m.client_host)
        out += struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms)
        _bytes(out, m.subscription)
        _bytes(out, m.assignment)
    return bytes(out)


def encode(record: Record) -> tuple[bytes, bytes | None]:
    return encode_key(record), encode_value(record)


# -- decoding ------------------------------------------------------------------------------------


def decode(key: bytes, value: bytes | None) -> Record | None:
    """The record for a key and value of `__consumer_offsets`; None for records that are not a
    classic group's (KIP-848 consumer groups, share groups). RecordFormatError if damaged."""
    k = RecordReader(key)
    key_version = k.int16()
    if key_version in (0, 1):
        group, topic, partition = k.string(), k.string(), k.int32()
        return OffsetCommitRecord(
            group, topic, partition, None if value is None else _offset_value(value)
        )
    if key_version == 2:
        group = k.string()
        return GroupMetadataRecord(group, None if value is None else _group_value(value))
    return None


def _offset_value(value: bytes) -> OffsetAndMetadata:
    r = RecordReader(value)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"OffsetCommitValue version {version} is not one of 0-4")
    r.flexible = version >= 4
    offset = r.int64()
    epoch = r.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = r.string()
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else -1
    r.skip_tags()
    return OffsetAndMetadata(offset, epoch, metadata, commit_ts, expire_ts)


def _group_value(value: bytes) -> GroupMetadataValue:
    r = RecordReader(value)
    version = r.int16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"GroupMetadataValue version {version} is not one of 0-4")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription, assignment = r.bytes_(), r.bytes_()
        r.skip_tags()
        if rebalance_timeout == -1:
            rebalance_timeout = session_timeout
        members.append(
            MemberMetadata(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    r.skip_tags()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, members)


# -- partitioning --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=65536)
def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode(): s[0]*31^(n-1) + ... over UTF-16 code units, in int32."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of a group: Utils.abs(groupId.hashCode()) % partitions,
    where Kafka's Utils.abs maps Integer.MIN_VALUE to 0."""
    h = java_string_hashcode(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# -- the consumer protocol, read only as far as the coordinator needs ----------------------------


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a `consumer` protocol subscription (ConsumerProtocolSubscription, read with
    its v0 prefix, which every version keeps: version:int16 topics:[string]); None if it does not
    parse."""
    try:
        r = RecordReader(metadata)
        if r.int16() < 0:
            return None
        return {r.string() for _ in range(r.array_len())}
    except RecordFormatError:
        return None
