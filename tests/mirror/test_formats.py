"""MirrorMaker 2's record formats: round trips, and vectors written by hand from the schemas.

How the vectors were derived: each key and value is a Kafka protocol Struct, its fields in
schema order with no framing: STRING is an int16 byte length then the UTF-8 bytes; INT16, INT32
and INT64 are big-endian two's complement. Heartbeat and Checkpoint values start with the
INT16 version 0. So Heartbeat("A", "B", 1700000000000) has the key 0001 41 | 0001 42 and the
value 0000 | 0000018bcfe56800 (1700000000000 = 0x18bcfe56800).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.mirror.formats import Checkpoint, FormatError, Heartbeat, OffsetSync

pytestmark = pytest.mark.unit

names = st.text(max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


def test_heartbeat_vector() -> None:
    hb = Heartbeat("A", "B", 1_700_000_000_000)
    assert hb.record_key() == bytes.fromhex("0001 41 0001 42")
    assert hb.record_value() == bytes.fromhex("0000 0000018bcfe56800")
    assert Heartbeat.from_record(hb.record_key(), hb.record_value()) == hb


def test_offset_sync_vector_has_no_version() -> None:
    sync = OffsetSync("orders", 3, 42, 7)
    assert sync.record_key() == bytes.fromhex("0006") + b"orders" + bytes.fromhex("00000003")
    assert sync.record_value() == bytes.fromhex("000000000000002a 0000000000000007")


def test_checkpoint_vector() -> None:
    cp = Checkpoint("g", "A.orders", 0, 42, 40, "m")
    key = (
        bytes.fromhex("0001")
        + b"g"
        + bytes.fromhex("0008")
        + b"A.orders"
        + bytes.fromhex("00000000")
    )
    value = bytes.fromhex("0000 000000000000002a 0000000000000028 0001") + b"m"
    assert cp.record_key() == key
    assert cp.record_value() == value
    assert Checkpoint.from_record(key, value) == cp


def test_strings_are_utf8_with_byte_lengths() -> None:
    sync = OffsetSync("é", 0, 0, 0)
    assert sync.record_key()[:4] == bytes.fromhex("0002c3a9")


@given(names, names, int64)
def test_heartbeat_round_trip(source: str, target: str, ts: int) -> None:
    hb = Heartbeat(source, target, ts)
    assert Heartbeat.from_record(hb.record_key(), hb.record_value()) == hb


@given(names, int32, int64, int64)
def test_offset_sync_round_trip(topic: str, partition: int, up: int, down: int) -> None:
    sync = OffsetSync(topic, partition, up, down)
    assert OffsetSync.from_record(sync.record_key(), sync.record_value()) == sync


@given(names, names, int32, int64, int64, names)
def test_checkpoint_round_trip(
    group: str, topic: str, p: int, up: int, down: int, meta: str
) -> None:
    cp = Checkpoint(group, topic, p, up, down, meta)
    assert Checkpoint.from_record(cp.record_key(), cp.record_value()) == cp


def test_a_newer_version_is_read_by_its_version_0_fields() -> None:
    value = bytes.fromhex("0001 0000000000000005") + b"extra fields"
    assert Heartbeat.from_record(Heartbeat("A", "B", 0).record_key(), value).timestamp == 5


@pytest.mark.parametrize(
    "key,value",
    [
        (bytes.fromhex("0001"), bytes.fromhex("0000 0000000000000001")),  # string cut short
        (bytes.fromhex("ffff"), bytes.fromhex("0000 0000000000000001")),  # negative length
        (bytes.fromhex("0001 41 0001 42"), bytes.fromhex("0000 00")),  # value cut short
        (bytes.fromhex("0001 ff 0001 42"), bytes.fromhex("0000 0000000000000001")),  # not UTF-8
    ],
)
def test_malformed_records_raise_format_error(key: bytes, value: bytes) -> None:
    with pytest.raises(FormatError):
        Heartbeat.from_record(key, value)


def test_overlong_string_is_refused() -> None:
    with pytest.raises(FormatError):
        OffsetSync("x" * 40_000, 0, 0, 0).record_key()


def test_missing_metadata_is_written_empty() -> None:
    cp = Checkpoint("g", "t", 0, 1, 1, None)  # type: ignore[arg-type]
    assert Checkpoint.from_record(cp.record_key(), cp.record_value()).metadata == ""
