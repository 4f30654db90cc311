"""`__transaction_state` record formats: bytes laid out by hand from Kafka's message definitions
(TransactionLogKey v0, TransactionLogValue v0 and v1 with its tagged fields), every version we
read, and a round trip of anything we write."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.coordinator.txn.records import (
    RecordFormatError,
    TransactionMetadata,
    TxnRecord,
    decode,
    encode,
)
from gregor.coordinator.txn.state import ALL_STATES, EMPTY, ONGOING, PREPARE_COMMIT


def s16(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def cs(s: str) -> bytes:
    b = s.encode()
    return bytes([len(b) + 1]) + b


KEY = struct.pack(">h", 0) + s16("my-txn")


def test_key_bytes_and_tombstone() -> None:
    assert encode(TxnRecord("my-txn", None)) == (KEY, None)
    assert decode(KEY, None) == TxnRecord("my-txn", None)
    # A key of another version is not ours (Kafka warns and skips it).
    assert decode(struct.pack(">h", 1) + s16("x"), b"") is None


def test_value_v1_bytes() -> None:
    m = TransactionMetadata(
        producer_id=42,
        producer_epoch=3,
        timeout_ms=60_000,
        state=PREPARE_COMMIT,
        partitions=frozenset({("b", 0), ("a", 2), ("a", 1)}),
        last_update_ms=1_700_000_000_123,
        start_ms=1_700_000_000_000,
    )
    key, value = encode(TxnRecord("my-txn", m))
    assert key == KEY
    partitions = (
        b"\x03"  # 2 topics
        + cs("a")
        + b"\x03"
        + struct.pack(">ii", 1, 2)
        + b"\x00"
        + cs("b")
        + b"\x02"
        + struct.pack(">i", 0)
        + b"\x00"
    )
    expected = (
        struct.pack(">hqhib", 1, 42, 3, 60_000, 2)
        + partitions
        + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_000)
        + b"\x00"
    )
    assert value == expected
    assert decode(key, value) == TxnRecord("my-txn", m)


def test_value_v1_tagged_fields_written_only_when_set() -> None:
    m = TransactionMetadata(
        7,
        0,
        1000,
        EMPTY,
        last_update_ms=5,
        previous_producer_id=6,
        next_producer_id=8,
        client_version=2,
    )
    _, value = encode(TxnRecord("t", m))
    assert value is not None
    head = (
        struct.pack(">hqhib", 1, 7, 0, 1000, 0) + b"\x00" + struct.pack(">qq", 5, -1)
    )  # Empty: null partitions
    tags = (
        b"\x03"
        + b"\x00\x08"
        + struct.pack(">q", 6)
        + b"\x01\x08"
        + struct.pack(">q", 8)
        + b"\x02\x02"
        + struct.pack(">h", 2)
    )
    assert value == head + tags
    assert decode(b"\x00\x00" + s16("t"), value) == TxnRecord("t", m)


def test_value_v0_as_older_kafka_writes_it() -> None:
    v0 = (
        struct.pack(">hqhib", 0, 42, 3, 60_000, 1)
        + struct.pack(">i", 1)
        + s16("topic")
        + struct.pack(">iii", 2, 0, 5)
        + struct.pack(">qq", 2000, 1000)
    )
    r = decode(KEY, v0)
    assert r is not None and r.value is not None
    assert (r.value.producer_id, r.value.producer_epoch, r.value.timeout_ms, r.value.state) == (
        42,
        3,
        60_000,
        ONGOING,
    )
    assert r.value.partitions == frozenset({("topic", 0), ("topic", 5)})
    assert (r.value.last_update_ms, r.value.start_ms) == (2000, 1000)
    assert (r.value.previous_producer_id, r.value.next_producer_id, r.value.client_version) == (
        -1,
        -1,
        0,
    )
    # Empty with a null partition list.
    empty = (
        struct.pack(">hqhib", 0, 42, 0, 60_000, 0)
        + struct.pack(">i", -1)
        + struct.pack(">qq", 9, -1)
    )
    r = decode(KEY, empty)
    assert (
        r is not None
        and r.value is not None
        and r.value.state is EMPTY
        and r.value.partitions == frozenset()
    )


def test_unknown_tags_are_skipped_and_damage_is_reported() -> None:
    base = struct.pack(">hqhib", 1, 1, 0, 1000, 0) + b"\x00" + struct.pack(">qq", 5, -1)
    with_unknown = base + b"\x01" + b"\x09\x03abc"
    r = decode(KEY, with_unknown)
    assert r is not None and r.value is not None and r.value.producer_id == 1
    with pytest.raises(RecordFormatError):
        decode(KEY, struct.pack(">h", 2) + base[2:] + b"\x00")  # value version 2
    with pytest.raises(RecordFormatError):
        decode(
            KEY,
            struct.pack(">hqhib", 1, 1, 0, 1000, 9) + b"\x00" + struct.pack(">qq", 5, -1) + b"\x00",
        )  # status 9
    with pytest.raises(RecordFormatError):
        decode(KEY, base[:-3])


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)


@given(
    tid=names,
    pid=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 32767),
    timeout=st.integers(1, 2**31 - 1),
    state=st.sampled_from(ALL_STATES),
    partitions=st.frozensets(st.tuples(names, st.integers(0, 2**31 - 1)), max_size=8),
    times=st.tuples(st.integers(-1, 2**62), st.integers(-1, 2**62)),
    prev=st.integers(-1, 2**62),
    nxt=st.integers(-1, 2**62),
    version=st.integers(0, 32767),
)
def test_round_trip(
    tid: str,
    pid: int,
    epoch: int,
    timeout: int,
    state: object,
    partitions: frozenset[tuple[str, int]],
    times: tuple[int, int],
    prev: int,
    nxt: int,
    version: int,
) -> None:
    m = TransactionMetadata(
        pid,
        epoch,
        timeout,
        state,
        frozenset() if state is EMPTY else partitions,  # type: ignore[arg-type]
        times[0],
        times[1],
        prev,
        nxt,
        version,
    )
    assert decode(*encode(TxnRecord(tid, m))) == TxnRecord(tid, m)
