"""Records inside a v2 batch: decode them, and build whole batches.

The broker's produce and fetch paths never come here (principle 1: bytes stay bytes). Tools,
tests, recompression, compaction and control batches do.

Byte layout of one record (varints are zigzag-encoded, as protobuf's sint)::

    Record =>
      length: varint            bytes after this field
      attributes: int8          unused, 0
      timestampDelta: varlong   from the batch's baseTimestamp
      offsetDelta: varint       from the batch's baseOffset
      keyLength: varint         -1 for a null key
      key: byte[keyLength]
      valueLength: varint       -1 for a null value (a tombstone)
      value: byte[valueLength]
      headersCount: varint
      Header =>
        headerKeyLength: varint
        headerKey: utf-8 bytes
        headerValueLength: varint   -1 for null
        headerValue: byte[headerValueLength]
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as b
from gregor.protocol.records import compression

Header = tuple[str, bytes | None]


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


def encode_varint(value: int, out: bytearray) -> None:
    """Zigzag varint (covers varlong too: Python ints are unbounded)."""
    v = (value << 1) ^ (value >> 63)
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Return (value, next position); CORRUPT_MESSAGE if the varint runs off the end."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise KafkaError(errors.CORRUPT_MESSAGE, "varint runs past the end of the record")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise KafkaError(errors.CORRUPT_MESSAGE, "varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def _read_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise KafkaError(errors.CORRUPT_MESSAGE, "record field runs past the end of the record")
    return bytes(buf[pos : pos + length]), pos + length


def decode_records(
    data: bytes | bytearray | memoryview, base_offset: int, base_timestamp: int, count: int
) -> list[Record]:
    """Decode `count` records from uncompressed record bytes."""
    view = memoryview(data)
    pos = 0
    out: list[Record] = []
    for _ in range(count):
        length, pos = decode_varint(view, pos)
        end = pos + length
        if length < 0 or end > len(view):
            raise KafkaError(errors.CORRUPT_MESSAGE, "record length runs past the end of the batch")
        rec = view[:end]
        pos += 1  # attributes
        ts_delta, pos = decode_varint(rec, pos)
        off_delta, pos = decode_varint(rec, pos)
        key, pos = _read_bytes(rec, pos)
        value, pos = _read_bytes(rec, pos)
        n_headers, pos = decode_varint(rec, pos)
        headers: list[Header] = []
        for _ in range(n_headers):
            hkey, pos = _read_bytes(rec, pos)
            hval, pos = _read_bytes(rec, pos)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hval))
        if pos != end:
            raise KafkaError(errors.CORRUPT_MESSAGE, "record length disagrees with its fields")
        out.append(Record(base_offset + off_delta, base_timestamp + ts_delta, key, value, headers))
    return out


def record_values(
    buf: bytes | bytearray | memoryview, pos: int, header: b.BatchHeader, null: Any = None
) -> tuple[Any, ...] | None:
    """Just the values of the batch at `pos` (whose header is read), `null` for a null one:
    the lean walk for what a Raft follower keeps of each record (its value), without a Record
    per record. None for a batch it leaves to `read_batch_records`: compressed, with headers,
    or malformed in any way (which that function then reports as it always did)."""
    if header.compression != b.COMPRESSION_NONE:
        return None
    data = memoryview(buf)[pos + b.HEADER_SIZE : pos + header.size]
    end = len(data)
    p = 0
    out = []
    try:
        for _ in range(header.records_count):
            length, p = _zigzag(data, p)
            record_end = p + length
            if length < 0 or record_end > end:
                return None
            p = _skip_varint(data, _skip_varint(data, p + 1))  # attributes, timestamp, offset
            key_length, p = _zigzag(data, p)
            if key_length > 0:
                p += key_length
            value_length, p = _zigzag(data, p)
            if value_length < 0:
                value = null
            else:
                value = bytes(data[p : p + value_length])
                p += value_length
            if p >= record_end or data[p] != 0 or p + 1 != record_end:  # no headers, the end
                return None
            p = record_end
            out.append(value)
    except (IndexError, KafkaError):
        return None
    return tuple(out)


def _skip_varint(data: memoryview, p: int) -> int:
    """The position after the varint at p (IndexError past the end, as for one too long)."""
    start = p
    while data[p] & 0x80:
        p += 1
    if p - start >= 10:
        raise IndexError("varint longer than 10 bytes")
    return p + 1


def _zigzag(data: memoryview, p: int) -> tuple[int, int]:
    byte = data[p]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), p + 1
    second = data[p + 1]
    if second < 0x80:  # up to 8191: most lengths in a record
        value = (byte & 0x7F) | (second << 7)
        return (value >> 1) ^ -(value & 1), p + 2
    return decode_varint(data, p)


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> None:
    body = bytearray(b"\x00")
    encode_varint(timestamp_delta, body)
    encode_varint(offset_delta, body)
    for part in (key, value):
        if part is None:
            encode_varint(-1, body)
        else:
            encode_varint(len(part), body)
            body += part
    encode_varint(len(headers), body)
    for hkey, hval in headers:
        kb = hkey.encode()
        encode_varint(len(kb), body)
        body += kb
        if hval is None:
            encode_varint(-1, body)
        else:
            encode_varint(len(hval), body)
            body += hval
    encode_varint(len(body), out)
    out += body


def build_batch(
    records: Sequence[tuple[Any, ...]],
    *,
    base_offset: int = 0,
    base_timestamp: int = 0,
    timestamps: Sequence[int] | None = None,
    compression_type: int = b.COMPRESSION_NONE,
    producer_id: int = b.NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = b.NO_PARTITION_LEADER_EPOCH,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
) -> bytearray:
    """Build one signed v2 batch from (key, value) or (key, value, headers) tuples."""
    if not records:
        raise ValueError("a batch holds at least one record")
    body = bytearray()
    stamps = list(timestamps) if timestamps is not None else [base_timestamp] * len(records)
    first_ts = stamps[0]
    for i, rec in enumerate(records):
        key, value = rec[0], rec[1]
        headers: Sequence[Header] = rec[2] if len(rec) > 2 else ()
        encode_record(body, i, stamps[i] - first_ts, key, value, headers)
    if compression_type != b.COMPRESSION_NONE:
        body = bytearray(compression.compress(compression_type, bytes(body)))
    attributes = compression_type
    if log_append_time:
        attributes |= b.TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= b.TRANSACTIONAL_FLAG
    if control:
        attributes |= b.CONTROL_FLAG
    total = b.HEADER_SIZE + len(body)
    out = bytearray(total)
    struct.pack_into(
        ">qiibIhiqqqhii",
        out,
        0,
        base_offset,
        total - b.LOG_OVERHEAD,
        partition_leader_epoch,
        b.MAGIC,
        0,
        attributes,
        len(records) - 1,
        first_ts,
        max(stamps),
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    out[b.HEADER_SIZE :] = body
    b.resign(out, 0, total)
    return out


# A transaction marker's control record (Kafka's ControlRecordType key and EndTransactionMarker
# value): key = version int16 (0), type int16 (0 ABORT, 1 COMMIT; 2-6 are KRaft's);
# value = version int16 (0), coordinatorEpoch int32.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


def build_control_batch(
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    committed: bool,
    timestamp_ms: int,
) -> bytearray:
    """The COMMIT or ABORT marker a transaction coordinator writes to a partition: a transactional
    control batch of one record, no sequence (-1), base offset 0 until the log assigns one."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if committed else CONTROL_ABORT)
    value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [(key, value)],
        base_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        transactional=True,
        control=True,
    )


def parse_end_txn_marker(key: bytes | None, value: bytes | None) -> tuple[bool, int]:
    """(is_commit, coordinator_epoch) of a control record; INVALID_RECORD unless it is a well
    formed COMMIT or ABORT marker (as Kafka's ControlRecordType and EndTransactionMarker parse)."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise KafkaError(
            errors.INVALID_RECORD, f"a control record key of {len(key or b'')} bytes, not 4"
        )
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise KafkaError(errors.INVALID_RECORD, f"control record key version {version}")
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise KafkaError(
            errors.INVALID_RECORD, f"control record type {kind} is not a transaction marker"
        )
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise KafkaError(
            errors.INVALID_RECORD, f"a transaction marker value of {len(value or b'')} bytes, not 6"
        )
    version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if version < 0:
        raise KafkaError(errors.INVALID_RECORD, f"transaction marker version {version}")
    return kind == CONTROL_COMMIT, coordinator_epoch


def read_end_txn_marker(
    buf: bytes | bytearray | memoryview, pos: int = 0
) -> tuple[bool, int] | None:
    """(is_commit, coordinator_epoch) of the control batch at `pos`, from its first record; None
    for a batch with no records (the log cleaner empties markers it keeps only for their
    producer). CORRUPT_MESSAGE if its records do not decode, INVALID_RECORD if the first is no
    transaction marker."""
    header = b.read_header(buf, pos)
    if header.records_count <= 0:
        return None
    try:
        _header, records = read_batch_records(buf, pos)
    except KafkaError:
        raise
    except Exception as exc:  # a codec's own error: the bytes are damaged
        raise KafkaError(
            errors.CORRUPT_MESSAGE, f"a control batch that does not decompress: {exc}"
        ) from exc
    rec = records[0]
    return parse_end_txn_marker(rec.key, rec.value)


def read_batch_records(
    buf: bytes | bytearray | memoryview, pos: int = 0
) -> tuple[b.BatchHeader, list[Record]]:
    """Decode the batch at `pos` into its header and records (decompressing if needed)."""
    header = b.read_header(buf, pos)
    size = header.size
    data = memoryview(buf)[pos + b.HEADER_SIZE : pos + size]
    if header.compression != b.COMPRESSION_NONE:
        data = memoryview(compression.decompress(header.compression, bytes(data)))
    return header, decode_records(
        data, header.base_offset, header.base_timestamp, header.records_count
    )


def iter_records(buf: bytes | bytearray | memoryview) -> Iterator[tuple[b.BatchHeader, Record]]:
    """Every record of every whole batch in buf, in order."""
    for pos, _header in b.iter_headers(buf):
        header, records = read_batch_records(buf, pos)
        for rec in records:
            yield header, rec


CODEC_BY_NAME = {"uncompressed": 0, "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def recompress(buf: bytes | bytearray | memoryview, codec: int) -> bytearray:
    """Rewrite every batch in `buf` whose codec is not `codec`, keeping its producer fields,
    sequence, flags, timestamps and records (a topic's `compression.type` other than
    `producer`). Batches already in `codec` are copied as they are."""
    out = bytearray()
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        header = b.check_batch(view, pos, len(view))
        start, pos = pos, pos + header.size
        if header.compression == codec or header.is_control:
            out += view[start:pos]
            continue
        _, recs = read_batch_records(view, start)
        out += build_batch(
            [(r.key, r.value, r.headers) for r in recs],
            base_offset=header.base_offset,
            timestamps=[r.timestamp for r in recs],
            compression_type=codec,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=header.partition_leader_epoch,
            transactional=header.is_transactional,
            log_append_time=header.is_log_append_time,
        )
    return out
