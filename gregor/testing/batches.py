"""Record batches as a misbehaving client could send them, for tests and fuzzing: any record
bytes under a signed v2 header (`raw_batch`), records written field by field (`record`,
`fields`), and seeded mutations of valid batches (`mutate`) that keep the CRC valid unless the
mutation is a damaged CRC, so that what lies under it gets tested.
"""

from __future__ import annotations

import random
import struct
from typing import Any

from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records import compression
from gregor.protocol.records.records import build_batch, encode_record, encode_varint

TS = 1_700_000_000_000


def varint(value: int) -> bytes:
    out = bytearray()
    encode_varint(value, out)
    return bytes(out)


def record(fields: bytes) -> bytes:
    """A record: its length, then `fields` (attributes onwards) as given."""
    return varint(len(fields)) + fields


def fields(
    offset_delta: int = 0,
    key: bytes = varint(-1),
    value: bytes = varint(1) + b"v",
    headers: bytes = varint(0),
    ts_delta: bytes = varint(0),
) -> bytes:
    """A record's fields after its length, each given as the bytes it is written with."""
    return b"\x00" + ts_delta + varint(offset_delta) + key + value + headers


def good_records(n: int, start: int = 0) -> bytes:
    """`n` well-formed records (keys k<start>.., short values, one header), uncompressed."""
    out = bytearray()
    for i in range(n):
        encode_record(out, i, i, f"k{start + i}".encode(), b"v" * (i % 7), [("h", b"x")])
    return bytes(out)


def raw_batch(
    body: bytes, count: int, *, attributes: int = 0, last_offset_delta: int | None = None
) -> bytearray:
    """A signed v2 batch around `body` with these header counts, whatever the body holds."""
    out = bytearray(rb.HEADER_SIZE + len(body))
    delta = count - 1 if last_offset_delta is None else last_offset_delta
    struct.pack_into(
        ">qiibIhiqqqhii", out, 0, 0, len(out) - rb.LOG_OVERHEAD, -1, rb.MAGIC, 0, attributes,
        delta, TS, TS, -1, -1, -1, count,
    )  # fmt: skip
    out[rb.HEADER_SIZE :] = body
    rb.resign(out, 0, len(out))
    return out


def seed_batch(rng: random.Random) -> bytearray:
    """A valid batch of a random shape and codec, to mutate."""
    shape = rng.randrange(4)
    if shape == 0:
        n = rng.randint(1, 9)
        records: list[Any] = [(b"k%d" % i, b"v" * rng.randrange(200)) for i in range(n)]
    elif shape == 1:
        records = [(None, None, [("h", b"x"), ("g", None)])] * rng.randint(1, 5)
    elif shape == 2:
        records = [(None, b"y" * 150)] * rng.randint(60, 80)  # 2-byte offset deltas
    else:
        records = [(b"", b"")]
    return build_batch(records, base_timestamp=TS, compression_type=rng.randrange(5))


def mutate(rng: random.Random, batch: bytearray) -> bytearray:
    """One to three edits of a batch: most re-signed (else the CRC would refuse them all and
    the walk go untested), compressed again when they edit the decompressed records."""
    for _ in range(rng.randint(1, 3)):
        header = rb.read_header(batch)
        codec = header.compression
        body = bytes(batch[rb.HEADER_SIZE :])
        plain = _plain(codec, body)
        op = rng.randrange(9)
        if op == 5:  # counts off by a little, or anything
            count = rng.choice([header.records_count + rng.choice([-1, 1]), rng.randint(-2, 50)])
            batch = raw_batch(body, count, attributes=header.attributes)
            continue
        if op == 6:  # attributes: codecs 0-7, control, transactional, ...
            batch[rb.ATTRIBUTES_OFFSET + 1] = rng.randrange(0x80)
            rb.resign(batch, 0, len(batch))
            continue
        if op == 7:  # a damaged CRC
            batch[rng.randrange(rb.ATTRIBUTES_OFFSET, len(batch))] ^= 0x10
            continue
        if plain is None or (op == 0 and rng.random() < 0.3):
            edited = _flip_bits(rng, body)  # the compressed bytes themselves
        else:
            edited = _edit_records(rng, op, plain)
            if plain is not body:
                edited = compression.compress(codec, edited)
        batch = raw_batch(edited, header.records_count, attributes=header.attributes)
    return batch


def _plain(codec: int, body: bytes) -> bytes | None:
    """The records a compressed body holds; None when it holds none (an earlier edit)."""
    if not 0 < codec < 5:
        return body
    try:
        return compression.decompress(codec, body)
    except KafkaError:
        return None


def _flip_bits(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _edit_records(rng: random.Random, op: int, plain: bytes) -> bytes:
    if not plain or op == 8:  # other records, as many or not as the header says
        return good_records(rng.randint(1, 6))
    if op == 0:
        return _flip_bits(rng, plain)
    if op == 1:  # a varint's worst bytes
        out = bytearray(plain)
        out[rng.randrange(len(out))] = rng.choice([0x00, 0x01, 0x03, 0x7F, 0x80, 0xFF])
        return bytes(out)
    if op == 2:  # cut short
        return plain[: rng.randrange(len(plain))]
    if op == 3:  # bytes inserted
        at = rng.randrange(len(plain) + 1)
        return plain[:at] + rng.randbytes(rng.randint(1, 4)) + plain[at:]
    return plain + plain[: rng.randint(1, len(plain))]  # 4: a record, or part of one, repeated
