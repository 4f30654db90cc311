"""`__consumer_offsets` record formats: bytes laid out by hand from Kafka's message definitions
(OffsetCommitKey/Value, GroupMetadataKey/Value), every version we read, and the partitioning of
groups (Java's String.hashCode)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.coordinator.group.records import (
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberMetadata,
    OffsetAndMetadata,
    OffsetCommitRecord,
    RecordFormatError,
    decode,
    encode,
    java_string_hashcode,
    partition_for,
    subscribed_topics,
)


def s16(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def cs(s: str | None) -> bytes:
    """compact string (flexible versions)"""
    if s is None:
        return b"\x00"
    b = s.encode()
    return bytes([len(b) + 1]) + b


def test_offset_commit_bytes() -> None:
    r = OffsetCommitRecord("g", "t", 3, OffsetAndMetadata(42, 7, "meta", 1000))
    key, value = encode(r)
    assert key == struct.pack(">h", 1) + s16("g") + s16("t") + struct.pack(">i", 3)
    assert value == struct.pack(">hqi", 3, 42, 7) + s16("meta") + struct.pack(">q", 1000)
    assert decode(key, value) == r
    # With an explicit expiry (OffsetCommit v2-4 retention_time_ms): value v1.
    r1 = OffsetCommitRecord("g", "t", 3, OffsetAndMetadata(42, -1, "", 1000, 5000))
    assert encode(r1)[1] == struct.pack(">hq", 1, 42) + s16("") + struct.pack(">qq", 1000, 5000)
    assert decode(*encode(r1)) == r1
    tomb = OffsetCommitRecord("g", "t", 3, None)
    assert encode(tomb) == (key, None) and decode(key, None) == tomb


def test_offset_commit_value_older_and_flexible_versions() -> None:
    key = struct.pack(">h", 0) + s16("g") + s16("t") + struct.pack(">i", 0)
    v0 = struct.pack(">hq", 0, 5) + s16("m") + struct.pack(">q", 9)
    assert decode(key, v0) == OffsetCommitRecord("g", "t", 0, OffsetAndMetadata(5, -1, "m", 9))
    # v4: flexible, compact string, and a tagged field (tag 5, 2 bytes) we skip.
    v4 = struct.pack(">hqi", 4, 5, 2) + cs("m") + struct.pack(">q", 9) + b"\x01\x05\x02ab"
    assert decode(key, v4) == OffsetCommitRecord("g", "t", 0, OffsetAndMetadata(5, 2, "m", 9))


def test_group_metadata_bytes() -> None:
    m = MemberMetadata("m-1", "inst", "cid", "/127.0.0.1", 30000, 10000, b"sub", b"asg")
    r = GroupMetadataRecord("g", GroupMetadataValue("consumer", 4, "range", "m-1", 777, [m]))
    key, value = encode(r)
    assert key == struct.pack(">h", 2) + s16("g")
    member = (
        s16("m-1") + s16("inst") + s16("cid") + s16("/127.0.0.1") + struct.pack(">ii", 30000, 10000)
    )
    member += struct.pack(">i", 3) + b"sub" + struct.pack(">i", 3) + b"asg"
    expected = (
        struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 4) + s16("range") + s16("m-1")
    )
    expected += struct.pack(">qi", 777, 1) + member
    assert value == expected
    assert decode(key, value) == r
    empty = GroupMetadataRecord("g", GroupMetadataValue("consumer", 5, None, None, 800, []))
    assert encode(empty)[1] == struct.pack(">h", 3) + s16("consumer") + struct.pack(
        ">i", 5
    ) + b"\xff\xff\xff\xff" + struct.pack(">qi", 800, 0)
    assert decode(*encode(empty)) == empty
    assert decode(key, None) == GroupMetadataRecord("g", None)


def test_group_metadata_v0_and_v4() -> None:
    key = struct.pack(">h", 2) + s16("g")
    v0 = struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m")
    v0 += struct.pack(">i", 1) + s16("m") + s16("c") + s16("h") + struct.pack(">i", 6000)
    v0 += struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a"
    got = decode(key, v0)
    assert isinstance(got, GroupMetadataRecord) and got.value is not None
    assert got.value.members == [MemberMetadata("m", None, "c", "h", 6000, 6000, b"s", b"a")]
    assert got.value.current_state_timestamp_ms == -1
    v4 = struct.pack(">h", 4) + cs("consumer") + struct.pack(">i", 1) + cs("range") + cs(None)
    v4 += struct.pack(">q", 5) + b"\x02"  # one member
    v4 += (
        cs("m")
        + cs(None)
        + cs("c")
        + cs("h")
        + struct.pack(">ii", 100, 6000)
        + b"\x02s"
        + b"\x02a"
        + b"\x00"
    )
    v4 += b"\x00"
    got = decode(key, v4)
    assert isinstance(got, GroupMetadataRecord) and got.value == GroupMetadataValue(
        "consumer",
        1,
        "range",
        None,
        5,
        [MemberMetadata("m", None, "c", "h", 100, 6000, b"s", b"a")],
    )


def test_records_of_other_coordinators_are_not_ours_and_damage_is_reported() -> None:
    assert decode(struct.pack(">h", 3) + s16("g"), b"whatever") is None  # KIP-848 records
    key = struct.pack(">h", 1) + s16("g") + s16("t") + struct.pack(">i", 0)
    with pytest.raises(RecordFormatError):
        decode(key, struct.pack(">hq", 3, 1))
    with pytest.raises(RecordFormatError):
        decode(key, struct.pack(">h", 9) + b"\x00" * 30)


names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


@given(
    names,
    st.integers(0, 2**31 - 1),
    st.integers(-1, 2**63 - 1),
    st.integers(-1, 2**31 - 1),
    names,
    st.integers(0, 2**62),
)
def test_offset_commit_roundtrip(
    group: str, partition: int, offset: int, epoch: int, meta: str, ts: int
) -> None:
    r = OffsetCommitRecord(group, "topic", partition, OffsetAndMetadata(offset, epoch, meta, ts))
    assert decode(*encode(r)) == r


@given(
    st.lists(
        st.tuples(names, st.none() | names, st.binary(max_size=30), st.binary(max_size=30)),
        max_size=5,
    )
)
def test_group_metadata_roundtrip(members: list[tuple[str, str | None, bytes, bytes]]) -> None:
    ms = [MemberMetadata(m, i, "c", "/h", 1, 2, s, a) for m, i, s, a in members]
    r = GroupMetadataRecord(
        "grp",
        GroupMetadataValue(
            "consumer", 3, "range" if ms else None, ms[0].member_id if ms else None, 1, ms
        ),
    )
    assert decode(*encode(r)) == r


def test_java_hashcode_and_partitioning() -> None:
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("Aa") == java_string_hashcode("BB") == 2112
    assert java_string_hashcode("polygenelubricants") == -(2**31)  # Utils.abs maps it to 0
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hashcode("😀") == 0xD83D * 31 + 0xDE00  # UTF-16 code units
    h = java_string_hashcode("console-consumer-12345")
    assert partition_for("console-consumer-12345", 50) == abs(h) % 50


def test_subscribed_topics() -> None:
    v1 = (
        struct.pack(">hi", 1, 2)
        + s16("a")
        + s16("b")
        + struct.pack(">i", -1)
        + struct.pack(">i", 0)
    )
    assert subscribed_topics(v1) == {"a", "b"}
    assert subscribed_topics(b"\x00") is None
