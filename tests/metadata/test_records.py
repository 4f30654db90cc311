"""Metadata records in Kafka's framing: bytes laid by hand from the JSON specs, strict decoding,
and a round trip of every record type and version."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.metadata import record_schema
from gregor.metadata import records as r
from gregor.protocol.schema.dsl import Field, Struct

TID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")


def uv(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return uv(len(b) + 1) + b


def int32s(xs: list[int]) -> bytes:
    return uv(len(xs) + 1) + b"".join(struct.pack(">i", x) for x in xs)


def test_topic_record_bytes() -> None:
    want = b"\x01\x02\x00" + cstr("orders") + TID.bytes + b"\x00"
    rec = r.TopicRecord(name="orders", topic_id=TID)
    assert r.encode(rec) == want
    assert r.decode(want) == rec


def test_partition_record_v1_bytes() -> None:
    d1, d2 = uuid.UUID(int=7), uuid.UUID(int=8)
    want = (
        b"\x01\x03\x01"
        + struct.pack(">i", 4)
        + TID.bytes
        + int32s([1, 2])  # replicas
        + int32s([2])  # isr
        + int32s([])  # removing
        + int32s([])  # adding
        + struct.pack(">iii", 1, 5, 9)  # leader, leader epoch, partition epoch
        + uv(3)
        + d1.bytes
        + d2.bytes  # directories
        + b"\x00"  # no tagged fields: LeaderRecoveryState 0 is the default
    )
    rec = r.PartitionRecord(
        partition_id=4,
        topic_id=TID,
        replicas=[1, 2],
        isr=[2],
        leader=1,
        leader_epoch=5,
        partition_epoch=9,
        directories=[d1, d2],
    )
    assert r.encode(rec) == want
    assert r.decode(want) == rec


def test_partition_change_record_tags_bytes() -> None:
    # Isr is tag 0, Leader tag 1, LeaderRecoveryState tag 5: written only when set.
    want = (
        b"\x01\x05\x01"
        + struct.pack(">i", 0)
        + TID.bytes
        + uv(3)  # three tagged fields, in tag order
        + uv(0)
        + uv(9)
        + int32s([3, 1])
        + uv(1)
        + uv(4)
        + struct.pack(">i", 3)
        + uv(5)
        + uv(1)
        + struct.pack(">b", 0)
    )
    rec = r.PartitionChangeRecord(
        partition_id=0, topic_id=TID, isr=[3, 1], leader=3, leader_recovery_state=0
    )
    assert r.encode(rec) == want
    got = r.decode(want)
    assert got == rec
    assert got.replicas is None and got.removing_replicas is None and got.directories is None
    # Nothing set: only the two fixed fields and an empty tag section.
    bare = r.decode(b"\x01\x05\x01" + struct.pack(">i", 2) + TID.bytes + b"\x00")
    assert bare.leader == -2 and bare.isr is None and bare.leader_recovery_state == -1


def test_config_record_null_value_bytes() -> None:
    want = b"\x01\x04\x00" + b"\x02" + cstr("t") + cstr("retention.ms") + cstr(None) + b"\x00"
    rec = r.ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value=None)
    assert r.encode(rec) == want
    assert r.decode(want) == rec


def test_register_broker_record_v3_bytes() -> None:
    inc, dir1 = uuid.UUID(int=99), uuid.UUID(int=5)
    want = (
        b"\x01\x00\x03"
        + struct.pack(">i", 3)
        + b"\x00"  # IsMigratingZkBroker (v2+)
        + inc.bytes
        + struct.pack(">q", 42)
        + uv(2)
        + cstr("PLAINTEXT")
        + cstr("h1")
        + struct.pack(">Hh", 9092, 0)
        + b"\x00"
        + uv(2)
        + cstr("metadata.version")
        + struct.pack(">hh", 7, 27)
        + b"\x00"
        + cstr("r1")
        + b"\x01"  # Fenced
        + b"\x00"  # InControlledShutdown (v1+)
        + uv(1)
        + uv(0)
        + uv(17)
        + uv(2)
        + dir1.bytes  # LogDirs, tag 0
    )
    rec = r.RegisterBrokerRecord(
        broker_id=3,
        incarnation_id=inc,
        broker_epoch=42,
        end_points=[r.BrokerEndpoint(name="PLAINTEXT", host="h1", port=9092, security_protocol=0)],
        features=[
            r.BrokerFeature(
                name="metadata.version", min_supported_version=7, max_supported_version=27
            )
        ],
        rack="r1",
        fenced=True,
        log_dirs=[dir1],
    )
    assert r.encode(rec) == want
    assert r.decode(want) == rec


def test_register_broker_record_v0_has_no_later_fields() -> None:
    rec = r.RegisterBrokerRecord(broker_id=1, broker_epoch=3, rack=None, fenced=False)
    data = r.encode(rec, version=0)
    assert data[:3] == b"\x01\x00\x00"
    # id, uuid, epoch, no endpoints, no features, null rack, fenced, tags
    assert len(data) == 3 + 4 + 16 + 8 + 1 + 1 + 1 + 1 + 1
    assert r.decode_with_version(data) == (rec, 0)


def test_fence_and_feature_and_producer_ids_bytes() -> None:
    assert (
        r.encode(r.FenceBrokerRecord(id=2, epoch=10))
        == b"\x01\x07\x00" + struct.pack(">iq", 2, 10) + b"\x00"
    )
    assert (
        r.encode(r.UnfenceBrokerRecord(id=2, epoch=10))
        == b"\x01\x08\x00" + struct.pack(">iq", 2, 10) + b"\x00"
    )
    assert r.encode(r.FeatureLevelRecord(name="metadata.version", feature_level=27)) == (
        b"\x01\x0c\x00" + cstr("metadata.version") + struct.pack(">h", 27) + b"\x00"
    )
    assert r.encode(r.ProducerIdsRecord(broker_id=1, broker_epoch=5, next_producer_id=2000)) == (
        b"\x01\x0f\x00" + struct.pack(">iqq", 1, 5, 2000) + b"\x00"
    )
    assert r.encode(r.NoOpRecord()) == b"\x01\x14\x00\x00"
    change = r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, fenced=-1)
    assert r.encode(change) == (
        b"\x01\x11\x02" + struct.pack(">iq", 1, 5) + uv(1) + uv(0) + uv(1) + b"\xff"
    )


def test_api_key_above_127_is_a_two_byte_varint() -> None:
    with pytest.raises(r.MetadataRecordError, match="unknown metadata record type 200"):
        r.decode(b"\x01" + uv(200) + b"\x00")


def test_a_header_of_longer_varints_reads_as_the_usual_one() -> None:
    """The one-byte header is read without the varint loop; a header whose numbers take more
    bytes (as the format allows) gives the same record and version."""
    rec = r.PartitionRecord(partition_id=3, topic_id=TID, replicas=[1, 2], isr=[1], leader=1)
    data = r.encode(rec)
    assert data[:3] == b"\x01\x03\x01"
    long_form = b"\x81\x00\x83\x00\x81\x00" + data[3:]  # 1, 3, 1 in two bytes each
    assert r.decode_with_version(data) == r.decode_with_version(long_form) == (rec, 1)
    assert r.decode(memoryview(bytearray(data))) == rec
    assert r.encode(rec, 1) == data and r.encode(rec) == data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "truncated in its frame version"),
        (b"\x00\x02\x00", "frame version 0"),
        (b"\x02\x02\x00", "unknown metadata record frame version 2"),
        (b"\x01", "truncated in its type"),
        (b"\x01\x02", "truncated in its version"),
        (b"\x01\x63\x00", "unknown metadata record type 99"),
        (b"\x01\x02\x01", "TopicRecord has no version 1"),
        (b"\x01\x02\x00" + cstr("orders") + TID.bytes[:5], "TopicRecord v0"),
        (b"\x01\x02\x00" + cstr("orders") + TID.bytes + b"\x00\x00", "1 byte\\(s\\) of garbage"),
        (b"\x01\xff\xff\xff\x0f\x00", "does not fit an int16"),
    ],
)
def test_bad_input_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(r.MetadataRecordError, match=message):
        r.decode(data)


def test_encode_refuses_what_is_not_a_metadata_record() -> None:
    with pytest.raises(r.MetadataRecordError):
        r.encode(object())  # type: ignore[arg-type]
    with pytest.raises(r.MetadataRecordError, match="no version 5"):
        r.encode(r.TopicRecord(name="a"), version=5)
    with pytest.raises(r.MetadataRecordError, match="cannot encode"):
        r.encode(r.TopicRecord(name=None))


def test_transaction_records_bytes() -> None:
    # KIP-868. Begin (23): Name is tag 0, a nullable compact string, default null. End (24): no
    # fields. Abort (25): Reason is tag 0, as Name. A tagged field is written only when set.
    cases = [
        (r.BeginTransactionRecord(), b"\x01\x17\x00" + b"\x00"),
        (
            r.BeginTransactionRecord(name="create topic t"),
            b"\x01\x17\x00"
            + uv(1)
            + uv(0)
            + uv(len(cstr("create topic t")))
            + cstr("create topic t"),
        ),
        (r.EndTransactionRecord(), b"\x01\x18\x00" + b"\x00"),
        (r.AbortTransactionRecord(), b"\x01\x19\x00" + b"\x00"),
        (
            r.AbortTransactionRecord(reason="Controller failover"),
            b"\x01\x19\x00\x01\x00\x14\x14Controller failover",  # 1 tag; tag 0, 20 bytes: len+1, text
        ),
    ]
    for rec, want in cases:
        assert r.encode(rec) == want, rec
        assert r.decode(want) == rec
    assert r.BeginTransactionRecord().name is None and r.AbortTransactionRecord().reason is None


# -- a round trip of every record type and version ------------------------------------------

_INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _scalar(f: Field) -> st.SearchStrategy[Any]:
    if f.type in _INTS:
        bits = _INTS[f.type]
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if f.type == "uint16":
        return st.integers(0, 2**16 - 1)
    if f.type == "bool":
        return st.booleans()
    if f.type == "uuid":
        return st.uuids()
    if f.type == "string":
        return st.text(max_size=10)
    if f.type == "bytes":
        return st.binary(max_size=10)
    if f.type == "float64":
        return st.floats(allow_nan=False)
    raise AssertionError(f.type)


def _struct(s: Struct, cls: Any, version: int) -> st.SearchStrategy[Any]:
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in s.fields:
        if version not in f.versions:
            continue
        element = (
            _struct(
                f.struct, getattr(cls, f.struct.name, None) or cls._structs[f.struct.name], version
            )
            if f.struct
            else _scalar(f)
        )
        value = st.lists(element, max_size=3) if f.array else element
        if version in f.nullable:
            value = st.one_of(st.none(), value)
        kwargs[f.name] = value
    return st.builds(cls, **kwargs)


_CASES = [
    (schema, v)
    for schema in record_schema.ALL
    for v in range(schema.message.versions.low, (schema.message.versions.high or 0) + 1)
]


def test_every_record_type_is_declared_once() -> None:
    assert sorted(s.api_key for s in record_schema.ALL) == [
        0,
        1,
        2,
        3,
        4,
        5,
        7,
        8,
        9,
        11,
        12,
        14,
        15,
        17,
        18,
        19,
        20,
        22,
        23,
        24,
        25,
    ]
    assert (
        len(_CASES) == 30
    )  # RegisterBroker 0-3, PartitionRecord, PartitionChange, BrokerRegistrationChange 0-2


@pytest.mark.parametrize(("schema", "version"), _CASES, ids=lambda c: getattr(c, "name", str(c)))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_round_trip(schema: record_schema.RecordSchema, version: int, data: st.DataObject) -> None:
    cls = r.record_class(schema.api_key)
    rec = data.draw(_struct(schema.message.root, cls, version))
    encoded = r.encode(rec, version)
    assert r.decode_with_version(encoded) == (rec, version)
    # Every prefix is refused, never misread.
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(r.MetadataRecordError):
        r.decode(encoded[:cut])


def test_compile_all_makes_every_record_codec_a_server_uses_before_it_serves() -> None:
    """A server's start makes them all (broker.py): the first CreateTopics then generates no
    code on the event loop."""
    n = r.compile_all()
    assert n == 2 * sum(
        t.schema.message.versions.high - t.schema.message.versions.low + 1  # type: ignore[operator]
        for t in r._BY_KEY.values()
    )
    for t in r._BY_KEY.values():
        versions = t.schema.message.versions
        made = set(range(versions.low, versions.high + 1))  # type: ignore[operator]
        assert set(t.codec._encoders) == made and set(t.codec._decoders) == made


@pytest.mark.parametrize(
    ("tail", "message"),
    [(TID.bytes[:5], "TopicRecord v0"), (TID.bytes + b"\x00\x00", "1 byte\\(s\\) of garbage")],
)
def test_a_record_of_a_type_met_before_is_refused_as_the_first_one_is(
    tail: bytes, message: str
) -> None:
    """`decode` reads a type already met straight with its decoder: what it cannot read is
    refused with the same words as the first time."""
    good = r.encode(r.TopicRecord(name="orders", topic_id=TID))
    assert r.decode(good) == r.TopicRecord(name="orders", topic_id=TID)  # the decoder is known
    with pytest.raises(r.MetadataRecordError, match=message):
        r.decode(b"\x01\x02\x00" + cstr("orders") + tail)
