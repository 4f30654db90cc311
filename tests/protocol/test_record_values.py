"""`record_values`: the lean walk a Raft follower uses, read against `read_batch_records`."""

from __future__ import annotations

import random
import struct

import pytest

from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch, read_batch_records, record_values

BATCHES = [
    [(None, b"t" * 180), (None, b"p" * 90)],
    [(None, b"")],
    [(None, None), (None, b"x")],
    [(b"key", b"v" * 20000), (b"k" * 300, b"w")],
    [(None, bytes(range(256)) * 3) for _ in range(40)],
]


def _values(buf: bytes, pos: int = 0) -> tuple[bytes | None, ...]:
    _header, records = read_batch_records(buf, pos)
    return tuple(r.value for r in records)


@pytest.mark.parametrize("records", BATCHES)
def test_the_values_read_batch_records_reads(records: list[tuple[bytes | None, ...]]) -> None:
    buf = bytes(
        build_batch(
            records,
            base_offset=1 << 40,
            base_timestamp=1_700_000_000_000,
            timestamps=[1_700_000_000_000 + 1000 * i for i in range(len(records))],
            partition_leader_epoch=7,
        )
    )
    prefix = b"\x00" * 17  # a batch that does not start the buffer
    header = rb.read_header(prefix + buf, 17)
    assert record_values(prefix + buf, 17, header) == _values(buf)
    assert record_values(buf, 0, header, b"") == tuple(v or b"" for v in _values(buf))


def test_batches_it_leaves_to_read_batch_records() -> None:
    with_headers = bytes(build_batch([(None, b"v", [("h", b"1")])]))
    gzip = bytes(build_batch([(None, b"v")], compression_type=1))
    for buf in (with_headers, gzip):
        assert record_values(buf, 0, rb.read_header(buf, 0)) is None
        assert _values(buf) == (b"v",)


def test_damaged_batches_read_the_same_or_are_left_to_read_batch_records() -> None:
    """A damaged batch: the lean walk gives what read_batch_records gives, or leaves it (None)
    to read_batch_records, which reads or refuses it as before. The header is kept (a batch's
    length and count are checked before its records are read)."""
    rng = random.Random(5)
    buf = bytes(build_batch([(None, b"a" * 150), (b"k", b"b"), (None, None)], base_offset=9))
    header = rb.read_header(buf, 0)
    read = 0
    for _ in range(3000):
        damaged = bytearray(buf)
        for _ in range(rng.choice((1, 1, 2))):
            damaged[rng.randrange(rb.HEADER_SIZE, len(buf))] = rng.choice(
                (0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256))
            )
        lean = record_values(bytes(damaged), 0, header)
        if lean is not None:
            read += 1
            assert lean == _values(bytes(damaged))
    assert read > 300


def test_a_varint_longer_than_ten_bytes_is_left_to_read_batch_records() -> None:
    """Its record's length agrees with its fields; read_batch_records refuses it all the same."""
    good = bytes(build_batch([(None, b"v")]))
    record = b"\x00" + b"\x80" * 10 + b"\x00" + b"\x00\x01\x02v\x00"  # attributes .. headers
    buf = bytearray(good[: rb.HEADER_SIZE] + bytes([len(record) << 1]) + record)
    struct.pack_into(">i", buf, 8, len(buf) - rb.LOG_OVERHEAD)
    with pytest.raises(KafkaError):
        read_batch_records(bytes(buf))
    assert record_values(bytes(buf), 0, rb.read_header(buf, 0)) is None
