"""Malformed input: every failure is a CorruptFrameError naming where, never anything else."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.protocol import codec
from gregor.protocol.exceptions import CorruptFrameError, UnsupportedVersionError

from .strategies import all_cases, case_id, examples, random_value

CASES = all_cases()
_FAST = settings(max_examples=examples(20), deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_every_truncation_is_corrupt(case: tuple[int, str, int]) -> None:
    key, kind, version = case
    rng = random.Random(f"trunc-{key}-{kind}-{version}")
    for _ in range(examples(1)):
        value = random_value(key, kind, version, rng, max_list=2)
        raw = bytearray(codec.join(codec.encode_body(key, version, kind, value)))
        for cut in range(len(raw)):
            with pytest.raises(CorruptFrameError):
                codec.decode_body(key, version, kind, raw[:cut])
        # Trailing bytes are ignored.
        assert codec.decode_body(key, version, kind, raw + b"\x01\x02\x03") == value


KINDS = sorted({(k, kind) for k, kind, _ in CASES})


@pytest.mark.parametrize("key_kind", KINDS, ids=[f"{codec.APIS[k].name}{d}" for k, d in KINDS])
@_FAST
@given(data=st.data())
def test_garbage_decodes_or_is_corrupt(key_kind: tuple[int, str], data: st.DataObject) -> None:
    key, kind = key_kind
    api = codec.APIS[key]
    assert api.versions.high is not None
    version = data.draw(st.integers(api.versions.low, api.versions.high))
    raw = data.draw(st.binary(max_size=80))
    try:
        codec.decode_body(key, version, kind, bytearray(raw))
    except CorruptFrameError:
        pass


@pytest.mark.parametrize("key_kind", KINDS, ids=[f"{codec.APIS[k].name}{d}" for k, d in KINDS])
@_FAST
@given(data=st.data())
def test_mutated_messages_decode_or_are_corrupt(
    key_kind: tuple[int, str], data: st.DataObject
) -> None:
    """Valid encodings with a few bytes overwritten (lengths become huge, negative, ...)."""
    key, kind = key_kind
    api = codec.APIS[key]
    assert api.versions.high is not None
    version = data.draw(st.integers(api.versions.low, api.versions.high))
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    raw = bytearray(
        codec.join(codec.encode_body(key, version, kind, random_value(key, kind, version, rng)))
    )
    for _ in range(data.draw(st.integers(1, 4))):
        if raw:
            at = data.draw(st.integers(0, len(raw) - 1))
            raw[at] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0xFE]))
    try:
        codec.decode_body(key, version, kind, raw)
    except CorruptFrameError:
        pass


@_FAST
@given(
    frame=st.binary(max_size=120),
    key=st.sampled_from(sorted(codec.APIS)),
    version=st.integers(-1, 20),
)
def test_garbage_request_frames(frame: bytes, key: int, version: int) -> None:
    raw = bytearray(struct.pack(">hhi", key, version, 1) + frame)
    try:
        codec.decode_request(raw)
    except (CorruptFrameError, UnsupportedVersionError):
        pass


# ---------------------------------------------------------------------------------------------
# Specific shapes of damage, with the message they give.

METADATA, PRODUCE = 3, 0


def _corrupt(key: int, version: int, kind: str, raw: bytes) -> str:
    with pytest.raises(CorruptFrameError) as info:
        codec.decode_body(key, version, kind, bytearray(raw))
    return str(info.value)


def test_array_length_past_the_end() -> None:
    # MetadataRequest v1: topics array of 1_000_000 elements in a 4-byte body.
    message = _corrupt(METADATA, 1, "request", struct.pack(">i", 1_000_000))
    assert "MetadataRequest v1" in message and "topics[]" in message


def test_string_length_past_the_end() -> None:
    message = _corrupt(METADATA, 1, "request", struct.pack(">ih", 1, 50) + b"abc")
    assert "topics[].name" in message and "needs 50 bytes" in message


def test_negative_lengths_other_than_minus_one() -> None:
    # Nullable topics array (v1+) with length -2; nullable-in-10+ name with -1 in v1.
    assert "bad array length -2" in _corrupt(METADATA, 1, "request", struct.pack(">i", -2))
    assert "bad string length -1" in _corrupt(METADATA, 1, "request", struct.pack(">ih", 1, -1))
    # v0: the topics array is not nullable.
    assert "bad array length -1" in _corrupt(METADATA, 0, "request", struct.pack(">i", -1))


def test_null_in_a_non_nullable_compact_field() -> None:
    # MetadataRequest v9 (flexible): topics count 2 (one topic), name 0 = null, not nullable < 10.
    message = _corrupt(METADATA, 9, "request", bytes([2, 0, 0, 0, 0]))
    assert "null string in a non-nullable field" in message


def test_records_length_past_the_end() -> None:
    body = struct.pack(">hhi", -1, 1, 100) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", 10_000) + b"x" * 10
    message = _corrupt(PRODUCE, 3, "request", body)
    assert "records" in message and "needs 10000 bytes" in message


def test_overlong_varint() -> None:
    message = _corrupt(METADATA, 9, "request", b"\xff\xff\xff\xff\xff\x01")
    assert "varint longer than 5 bytes" in message


def test_invalid_utf8() -> None:
    message = _corrupt(METADATA, 1, "request", struct.pack(">ih", 1, 2) + b"\xff\xfe" + b"\x01")
    assert "MetadataRequest v1" in message


def test_tagged_field_size_past_the_end() -> None:
    # ApiVersionsRequest v3: two empty compact strings, then 1 tagged field of 100 bytes.
    message = _corrupt(18, 3, "request", bytes([1, 1, 1, 0, 100, 1, 2]))
    assert "_tagged_fields" in message


def test_unknown_tagged_fields_are_skipped() -> None:
    raw = bytes([2]) + b"a" + bytes([2]) + b"b" + bytes([2, 7, 3]) + b"xyz" + bytes([9, 0])
    body = codec.decode_body(18, 3, "request", bytearray(raw))
    assert (body.client_software_name, body.client_software_version) == ("a", "b")
