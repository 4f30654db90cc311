"""How the log cleaner reads the records of a batch and rewrites the batch with fewer of them.

Record layout (protocol/records/records.py has the full codec)::

    length: varint | attributes: int8 | timestampDelta: varlong | offsetDelta: varint
    keyLength: varint | key | valueLength: varint | value | headersCount: varint | headers

The cleaner needs, per record, its offset delta, key, whether its value is null (a tombstone)
and where its bytes are, and nothing else; `record_spans` finds exactly that, without building
Record objects (this is the cleaner's inner loop).

A rewritten batch keeps, as Kafka's MemoryRecords.filterTo does for magic 2, its base offset,
lastOffsetDelta (so its offset range and its producer's last sequence), partition leader epoch,
producer id, epoch and base sequence, attributes and compression codec; only recordsCount,
maxTimestamp (CreateTime: the largest kept record's) and the CRC change. The kept records are
copied byte for byte: their offset deltas are still relative to the same base offset. Only when
the batch first gets a delete horizon (a kept tombstone, see `rebuild_batch`) does the base
timestamp become that horizon and every kept record's timestampDelta get re-encoded against it.

    empty batch (kept for its producer's sequence): the original header with recordsCount 0,
    baseTimestamp -1, no compression and no records, as Kafka's writeEmptyHeader.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from gregor.protocol.records import batch as rb
from gregor.protocol.records import compression

# The whole 61-byte header: baseOffset, batchLength, partitionLeaderEpoch, magic, crc,
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordsCount.
HEADER = struct.Struct(">qiibIhiqqqhii")
BASE_OFFSET, LENGTH, LEADER_EPOCH, MAGIC, CRC, ATTRIBUTES = range(6)
LAST_OFFSET_DELTA, BASE_TIMESTAMP, MAX_TIMESTAMP, PRODUCER_ID = range(6, 10)
PRODUCER_EPOCH, BASE_SEQUENCE, RECORDS_COUNT = range(10, 13)

# (start, end, timestampDelta, offsetDelta, key, has_value, end of the timestampDelta field)
Span = tuple[int, int, int, int, bytes | None, bool, int]


class BadRecords(ValueError):
    """The records of a batch do not parse: the segment is damaged."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos`: (value, next position)."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise BadRecords("varint longer than 10 bytes")


def _encode_varint(value: int, out: bytearray) -> None:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def records_data(batch: bytes, fields: tuple[int, ...]) -> bytes:
    """The uncompressed record bytes of a batch."""
    codec = fields[ATTRIBUTES] & rb.COMPRESSION_MASK
    body = batch[rb.HEADER_SIZE :]
    if codec == rb.COMPRESSION_NONE:
        return body
    return compression.decompress(codec, body)


def record_spans(data: bytes, count: int) -> list[Span]:
    """Every record of uncompressed record bytes, as a `Span`.

    The cleaner's inner loop: a one-byte varint (most of them: attributes-relative deltas,
    short keys) is decoded in line, longer ones by `_varint`; this halves the time per record.
    """
    out: list[Span] = []
    append = out.append
    pos = 0
    end_of_data = len(data)
    varint = _varint
    try:
        for _ in range(count):
            start = pos
            b = data[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                length, pos = varint(data, pos)
            end = pos + length
            if length < 0 or end > end_of_data:
                raise BadRecords("a record runs past the end of its batch")
            pos += 1  # attributes
            b = data[pos]
            if b < 0x80:
                ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                ts_delta, pos = varint(data, pos)
            ts_end = pos
            b = data[pos]
            if b < 0x80:
                off_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                off_delta, pos = varint(data, pos)
            b = data[pos]
            if b < 0x80:
                key_len, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                key_len, pos = varint(data, pos)
            if key_len >= 0:
                key: bytes | None = data[pos : pos + key_len]
                pos += key_len
            else:
                key = None
            # valueLength: only its sign matters (a tombstone is -1, encoded as the byte 0x01).
            has_value = data[pos] != 0x01
            if pos >= end:
                raise BadRecords("a record's fields run past its length")
            append((start, end, ts_delta, off_delta, key, has_value, ts_end))
            pos = end
    except IndexError:
        raise BadRecords("a record is cut short") from None
    return out


def empty_batch(fields: tuple[int, ...]) -> bytes:
    """The header-only batch Kafka keeps when every record went but the batch must stay."""
    attributes = fields[ATTRIBUTES] & (
        rb.TIMESTAMP_TYPE_MASK | rb.TRANSACTIONAL_FLAG | rb.CONTROL_FLAG
    )
    out = bytearray(rb.HEADER_SIZE)
    HEADER.pack_into(
        out,
        0,
        fields[BASE_OFFSET],
        rb.HEADER_SIZE - rb.LOG_OVERHEAD,
        fields[LEADER_EPOCH],
        rb.MAGIC,
        0,
        attributes,
        fields[LAST_OFFSET_DELTA],
        rb.NO_TIMESTAMP,
        fields[MAX_TIMESTAMP],
        fields[PRODUCER_ID],
        fields[PRODUCER_EPOCH],
        fields[BASE_SEQUENCE],
        0,
    )
    rb.resign(out, 0, len(out))
    return bytes(out)


def rebuild_batch(
    fields: tuple[int, ...],
    data: bytes,
    kept: Sequence[Span],
    delete_horizon_ms: int | None,
) -> tuple[bytes, int]:
    """The batch with only the `kept` records of its record bytes `data`; (bytes, maxTimestamp).

    `delete_horizon_ms`: None keeps the batch's base timestamp (and its delete horizon, if it
    has one); a value sets the horizon: attribute bit 6 and baseTimestamp = the horizon.
    """
    attributes = fields[ATTRIBUTES]
    base_ts = fields[BASE_TIMESTAMP]
    if attributes & rb.TIMESTAMP_TYPE_MASK:
        max_ts = fields[MAX_TIMESTAMP]
    else:
        max_ts = base_ts + max(s[2] for s in kept)
    if delete_horizon_ms is None:
        body = b"".join([data[s[0] : s[1]] for s in kept])
    else:
        out = bytearray()
        for _start, end, ts_delta, _off, _key, _has_value, ts_end in kept:
            rec = bytearray(b"\x00")  # attributes: unused, 0 in v2 (Kafka writes 0 too)
            _encode_varint(base_ts + ts_delta - delete_horizon_ms, rec)
            rec += data[ts_end:end]
            _encode_varint(len(rec), out)
            out += rec
        body = bytes(out)
        attributes |= rb.DELETE_HORIZON_FLAG
        base_ts = delete_horizon_ms
    codec = attributes & rb.COMPRESSION_MASK
    if codec != rb.COMPRESSION_NONE:
        body = compression.compress(codec, body)
    total = rb.HEADER_SIZE + len(body)
    batch = bytearray(total)
    HEADER.pack_into(
        batch,
        0,
        fields[BASE_OFFSET],
        total - rb.LOG_OVERHEAD,
        fields[LEADER_EPOCH],
        rb.MAGIC,
        0,
        attributes,
        fields[LAST_OFFSET_DELTA],
        base_ts,
        max_ts,
        fields[PRODUCER_ID],
        fields[PRODUCER_EPOCH],
        fields[BASE_SEQUENCE],
        len(kept),
    )
    batch[rb.HEADER_SIZE :] = body
    rb.resign(batch, 0, total)
    return bytes(batch), max_ts
