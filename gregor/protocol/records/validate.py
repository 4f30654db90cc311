"""What a leader checks in a client's batch beyond its header and CRC (`batch.check_batch`), as
Kafka's LogValidator and DefaultRecord do: a lean walk of its records, over integers and
positions only (no object per record), decompressing first when the batch is compressed.

    checked                                                   refused with
    codec 5-7 (attributes bits 0-2)                           UNSUPPORTED_COMPRESSION_TYPE
    the control flag (a client may not write control batches) INVALID_RECORD
    records that do not decompress (codecs 1-4)               CORRUPT_MESSAGE
    records that decompress to more than `max_uncompressed`   MESSAGE_TOO_LARGE
    a walk that runs past the end, leaves bytes over, or      INVALID_RECORD
      finds other than recordsCount records
    a record whose fields do not end at its length, whose     INVALID_RECORD
      offset delta is not its index (0 .. n-1), a negative
      length other than -1 (null key/value/header value), a
      null or negative header key, a varint longer than 5
      bytes (10 for the timestamp delta)
    more than one batch in a partition's Produce records      INVALID_RECORD
    records without a key in a compacted topic; records whose INVALID_RECORD; INVALID_TIMESTAMP
      timestamps are out of `timestamp_bounds` (a CreateTime    if any timestamp is out
      topic's message.timestamp.*.max.ms, judged by the         (KIP-467: `record_errors`)
      partition)

The last row is Kafka's RecordValidationException (KIP-467): the batch is refused whole, and the
error names each bad record (its index in the batch and why), so a client fails exactly those
and the others as collateral. The walk collects the indexes of keyless records (a list that
stays empty for a good batch); the timestamps are read only when bounds are given.

Where we differ from Kafka (4.x), on purpose: it takes any negative length as null, never reads
the offset deltas of an uncompressed batch (a batch with deltas [0, 0, 1] was stored and
consumers saw repeated offsets) and rewrites a compressed batch whose deltas are not 0 .. n-1:
all refused here. Codecs 5-7 and records that do not decompress reach Kafka's catch-all
(IllegalArgumentException, KafkaException: UNKNOWN_SERVER_ERROR); we name them. Not done
here: Kafka's check that a client's baseOffset is 0 (we overwrite it). Record layout:
`records.py`.

Decompression is bounded: codecs write into a buffer of at most `max_uncompressed` bytes and
stop when it is full (cramjam's `decompress_into`; snappy's raw framing states its length
first), so a small batch that inflates to gigabytes costs no more memory than the bound.

Cost (bench/results/validation-2026-12-01.md): the walk reads a record in some 40 bytecodes,
about 1 us; records laid out byte for byte as the one before them (the same key and value
sizes, as many producers' are) are compared in strides, C loops, about 50 ns each.
"""

from __future__ import annotations

import struct
from typing import Any

import cramjam

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb

MiB = 1024 * 1024
# The bound on one batch's decompressed records: `uncompressed_limit(max.message.bytes)`.
UNCOMPRESSED_FLOOR = 64 * MiB
UNCOMPRESSED_RATIO = 64

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic (8) + version (4) + compatible version (4)
_FULL_BUFFER = "failed to write whole buffer"  # cramjam's words when an `_into` buffer is full
_CODECS = {1: cramjam.gzip, 3: cramjam.lz4, 4: cramjam.zstd}
_COPY_LIMIT = 64 * 1024  # a batch's records up to this size are walked in a copy (see below)
_BATCH_LENGTH = struct.Struct(">i").unpack_from


def uncompressed_limit(max_message_bytes: int) -> int:
    """The most one batch's records may decompress to: 64 times max.message.bytes, at least
    64 MiB (64 MiB at the default 1 MiB). Kafka streams records out of the codec and sets no
    bound; we hold them whole, so the bound keeps a compression bomb from taking the memory."""
    return max(UNCOMPRESSED_FLOOR, UNCOMPRESSED_RATIO * max_message_bytes)


class Malformed(Exception):
    """A walk's refusal: what is wrong, the record's index and its position in the records."""

    def __init__(self, reason: str, index: int, position: int) -> None:
        super().__init__(reason)
        self.reason, self.index, self.position = reason, index, position


class RecordValidationError(KafkaError):
    """A batch refused for some of its records (Kafka's RecordValidationException):
    `record_errors` holds (batch index, message) for each, in index order."""

    def __init__(self, code: int, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


def check_single_batch(records: memoryview | bytes | bytearray, where: str) -> None:
    """INVALID_RECORD unless `records` holds one batch and nothing after it (Kafka's
    ProduceRequest.validateRecords for magic 2). A batch claiming more bytes than there are is
    left to `check_batch` (CORRUPT_MESSAGE)."""
    if len(records) >= rb.LOG_OVERHEAD:
        size = _BATCH_LENGTH(records, rb.LENGTH_OFFSET)[0] + rb.LOG_OVERHEAD  # (one call less)
        if rb.HEADER_SIZE <= size < len(records):
            raise KafkaError(
                errors.INVALID_RECORD,
                f"{where}: Produce requests with version 3 and above may hold exactly one record "
                f"batch per partition; {len(records) - size} bytes follow the first batch "
                f"of {size} bytes",
            )


def check_client_records(
    records: memoryview | bytes | bytearray,
    where: str,
    *,
    max_size: int,
    compacted: bool = False,
    max_uncompressed: int = UNCOMPRESSED_FLOOR,
    timestamp_bounds: tuple[int, int] | None = None,
) -> None:
    """`check_batch` and `check_client_batch` for every batch in `records`: for a leader that
    must know the records are sound before it decodes them (recompression), or that judges
    each record's timestamp."""
    view = memoryview(records)
    pos, end = 0, len(view)
    while pos < end:
        header = rb.check_batch(view, pos, end, max_size)
        check_client_batch(
            view,
            pos,
            header,
            where,
            compacted=compacted,
            max_uncompressed=max_uncompressed,
            timestamp_bounds=timestamp_bounds,
        )
        pos += header.batch_length + rb.LOG_OVERHEAD


def check_client_batch(
    buf: memoryview | bytes | bytearray,
    pos: int,
    header: rb.BatchHeader,
    where: str,
    *,
    compacted: bool = False,
    max_uncompressed: int = UNCOMPRESSED_FLOOR,
    timestamp_bounds: tuple[int, int] | None = None,
) -> None:
    """Validate the records of the batch at `pos` whose header `check_batch` returned (CRC
    checked); raise KafkaError as the table above says. `where` is the topic-partition;
    `timestamp_bounds` the (lowest, highest) record timestamp allowed, if any."""
    attributes = header.attributes
    codec = attributes & rb.COMPRESSION_MASK
    if codec > rb.COMPRESSION_ZSTD:
        raise KafkaError(
            errors.UNSUPPORTED_COMPRESSION_TYPE,
            f"{where}: batch at position {pos} has compression codec {codec}, not one of 0-4",
        )
    if attributes & rb.CONTROL_FLAG:
        raise KafkaError(
            errors.INVALID_RECORD,
            f"{where}: batch at position {pos}: clients are not allowed to write control records",
        )
    start, end = pos + rb.HEADER_SIZE, pos + header.batch_length + rb.LOG_OVERHEAD
    data: memoryview | bytes | bytearray = buf
    if codec != rb.COMPRESSION_NONE:
        data, end = _decompress(codec, memoryview(buf)[start:end], max_uncompressed, where, pos)
        start = 0
    elif isinstance(buf, memoryview):
        # Bytes and bytearrays index 8% faster than a memoryview and slice in strides 7 times
        # faster (a uniform run). A view of a whole buffer is walked in the buffer under it; a
        # view of part of one (a batch inside a Produce request) is copied when small (a few
        # KiB, less than one strided slice of a view costs), walked in the view when large (a
        # copy would cost a fresh megabyte's page faults, more than the walk of it).
        if isinstance(buf.obj, bytearray | bytes) and buf.nbytes == len(buf.obj):
            data = buf.obj
        elif end - start <= _COPY_LIMIT:
            data, start, end = bytes(buf[start:end]), 0, end - start
    keyless: list[int] | None = [] if compacted else None
    try:
        walk_records(data, start, end, header.records_count, keyless)
    except Malformed as exc:
        at = f"batch at position {pos}, record {exc.index}"
        kind = "decompressed records" if codec else "records"
        message = f"{where}: {at} (byte {exc.position - start} of its {kind}): {exc.reason}"
        raise KafkaError(errors.INVALID_RECORD, message) from None
    late = None
    if timestamp_bounds is not None:
        late = _out_of_bounds(data, start, header, *timestamp_bounds)
    if keyless or late:
        raise _record_errors(where, keyless or [], late or {})


def _out_of_bounds(
    data: memoryview | bytes | bytearray, pos: int, header: rb.BatchHeader, low: int, high: int
) -> dict[int, str]:
    """Kafka's words for each walked record whose timestamp is outside [low, high], by index.
    The walk has checked the framing: every length here is sound."""
    base_ts, base_offset = header.base_timestamp, header.base_offset
    late: dict[int, str] = {}
    for index in range(header.records_count):
        z, p = _uvarint(data, pos, 5)  # the record's length
        delta, _ = _uvarint(data, p + 1, 10)  # after the attributes: the timestamp delta
        ts = base_ts + _zigzag(delta)
        if ts != rb.NO_TIMESTAMP and not low <= ts <= high:
            late[index] = (
                f"Timestamp {ts} of message with offset {base_offset + index} is out of range. "
                f"The timestamp should be within [{low}, {high}]"
            )
        pos = p + (z >> 1)
    return late


def _record_errors(where: str, keyless: list[int], late: dict[int, str]) -> RecordValidationError:
    """Kafka's answer to a batch refused for some records: a record without a key is named for
    that (the key is judged first), others for their timestamp; INVALID_TIMESTAMP if any is."""
    found = dict(late)
    for index in keyless:
        found[index] = (
            f"Compacted topic cannot accept message without key in topic partition {where}"
        )
    record_errors = sorted(found.items())
    if any(index not in keyless for index in late):
        message = "One or more records have been rejected due to invalid timestamp"
        return RecordValidationError(errors.INVALID_TIMESTAMP, message, record_errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in record_errors[:3])
    message = (
        f"One or more records have been rejected due to {len(record_errors)} record errors in "
        f"total, and only showing the first three errors at most: [{shown}]"
    )
    return RecordValidationError(errors.INVALID_RECORD, message, record_errors)


def _decompress(
    codec: int, data: memoryview, limit: int, where: str, pos: int
) -> tuple[bytearray, int]:
    """The decompressed records (a buffer, and how much of it they fill). CORRUPT_MESSAGE when
    they do not decompress, MESSAGE_TOO_LARGE when they would exceed `limit` bytes."""
    name = rb.COMPRESSION_NAMES[codec]
    try:
        if codec == rb.COMPRESSION_SNAPPY:
            out = _snappy_into(bytes(data), limit)
        else:
            out = _bounded_into(_CODECS[codec], data, limit)
    except KafkaError:
        raise
    except Exception as exc:  # the codecs raise their own types for damaged input
        raise KafkaError(
            errors.CORRUPT_MESSAGE, f"{where}: batch at position {pos}: cannot decompress its "
            f"{name} records: {exc}"
        ) from exc  # fmt: skip
    if out is None:
        raise KafkaError(
            errors.MESSAGE_TOO_LARGE,
            f"{where}: batch at position {pos} ({name}) decompresses to more than {limit} bytes",
        )
    return out


def _bounded_into(codec: Any, data: memoryview, limit: int) -> tuple[bytearray, int] | None:
    # Start at 8 times the compressed size (a typical batch decompresses in one pass) and grow
    # 8-fold when the buffer fills: at most log8(limit / 64 KiB) = 4 restarts at 64 MiB, which
    # cost about as much again as the last pass (1/8 + 1/64 + ...).
    size = min(limit, max(64 * 1024, 8 * len(data)))
    while True:
        out = bytearray(size)
        try:
            n = codec.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _FULL_BUFFER not in str(exc):
                raise
            if size >= limit:
                return None
            size = min(limit, size * 8)
            continue
        return out, n


def _snappy_into(data: bytes, limit: int) -> tuple[bytearray, int] | None:
    """Raw snappy (librdkafka) states its length first; the xerial framing (the Java client's)
    is a list of length-prefixed raw blocks, each stating its own."""
    if not data.startswith(_XERIAL_MAGIC):
        n = _snappy_length(data)
        if n > limit:
            return None
        out = bytearray(n)
        return out, cramjam.snappy.decompress_raw_into(data, out)
    blocks = []
    pos, total = _XERIAL_HEADER, 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        block = data[pos + 4 : pos + 4 + length]
        if pos + 4 > len(data) or length < 0 or len(block) != length:
            raise ValueError(f"a xerial snappy block at byte {pos} runs past the end")
        total += _snappy_length(block)
        if total > limit:
            return None
        blocks.append(block)
        pos += 4 + length
    out = bytearray(total)
    view, at = memoryview(out), 0
    for block in blocks:
        at += cramjam.snappy.decompress_raw_into(block, view[at:])
    return out, at


def _snappy_length(block: bytes) -> int:
    """The length a raw snappy block states. Its best element, a 3-byte copy of 64 bytes,
    expands 21-fold: a block stating more than 22 times its size is damaged, not large."""
    n: int = cramjam.snappy.decompress_raw_len(block)
    if n > 22 * len(block) + 32:
        raise ValueError(f"{len(block)} bytes of snappy cannot hold the {n} they state")
    return n


def walk_records(
    data: memoryview | bytes | bytearray,
    pos: int,
    end: int,
    count: int,
    keyless: list[int] | None = None,
) -> None:
    """Walk the uncompressed records in data[pos:end]; raise Malformed unless there are exactly
    `count` well-formed records ending exactly at `end` with offset deltas 0 .. count-1. With
    a `keyless` list (a compacted topic), the index of each record without a key is added to
    it. Reads lengths and skips bytes; builds nothing per record."""
    # Records are walked one by one (`_walk`, the reference); after each stretch, the records
    # that follow laid out byte for byte as the last one walked are taken in bulk
    # (`_uniform_run`). A stretch is 1 record after a run, doubling to 128 while none is found.
    # Fewer than _RUN_FLOOR records left are walked in one stretch: a run's set-up (some 3 us)
    # costs more than walking them (some 0.5 us each: a batch of 5 records, as librdkafka
    # sends over many partitions, is walked in 2.7 us rather than 4.5).
    index, step = 0, 1 if count > _RUN_FLOOR else count
    while index < count:
        stop = index + step if index + step < count else count
        template, pos = _walk(data, pos, end, index, stop, count, keyless)
        index = stop
        run = 0
        # A run copies its template's layout: after a keyless template, walk on one by one.
        if count - index >= _RUN_FLOOR and not (keyless and keyless[-1] == stop - 1):
            run = _uniform_run(data, template, pos, end, index, count)
        if run:
            pos += run * (pos - template)
            index += run
            step = 1
        elif count - index < _RUN_FLOOR:
            step = count - index
        else:
            step = 2 * step if step < 64 else 128
    if pos != end:
        raise Malformed(f"bytes remain after the {count} records declared", count, pos)


def _walk(
    data: memoryview | bytes | bytearray,
    pos: int,
    end: int,
    first: int,
    stop: int,
    count: int,
    keyless: list[int] | None,
) -> tuple[int, int]:
    """Walk records `first` .. `stop`-1 one by one from `pos`; (where the last one starts,
    where it ends)."""
    # The hot path of every produce but uniform runs, some 40 bytecodes a record. Varints are
    # read inline in their common forms (1 byte; 2 for a record or value length of 64 to 8191
    # bytes) and in `_uvarint` / `_length` otherwise. Lengths stay zigzag-encoded: odd is
    # negative, 1 is -1 (null), and `not b & 0x81` is "a 1-byte length >= 0". The offset delta
    # is compared encoded (`delta` is twice the index). `pos` stays at the record's start; `p`
    # moves through it. Reading past the data raises IndexError (a Malformed below); a field
    # running into the next record is caught by the record's end check.
    delta, template = first << 1, pos
    try:
        for delta in range(first << 1, stop << 1, 2):
            if pos >= end:
                raise Malformed(f"{delta >> 1} records where the header declares {count}", -1, pos)
            b = data[pos]
            if b < 0x80:
                p = pos + 1
            elif data[pos + 1] < 0x80:
                b, p = (b & 0x7F) | data[pos + 1] << 7, pos + 2
            else:
                b, p = _uvarint(data, pos, 5)
            rec_end = p + (b >> 1)
            if b & 1 or rec_end > end:
                raise Malformed(f"record length {_zigzag(b)} runs past the batch", -1, pos)
            if data[p + 1] > 0x7F:  # after the attributes (unused in v2): the timestamp delta
                p = _skip_varlong(data, p + 1) - 1
            b = data[p + 2]  # the offset delta
            if b < 0x80:
                p += 3
            elif data[p + 3] < 0x80:
                b, p = (b & 0x7F) | data[p + 3] << 7, p + 4
            else:
                b, p = _uvarint(data, p + 2, 5)
            if b != delta:
                raise Malformed(f"offset delta {_zigzag(b)}, expected {delta >> 1}", -1, pos)
            b = data[p]  # the key
            if not b & 0x81:
                p += 1 + (b >> 1)
            elif b == 1:
                p += 1
                if keyless is not None:
                    keyless.append(delta >> 1)
            else:
                p = _length(data, p, "key", keyless, delta >> 1)
            b = data[p]  # the value
            if not b & 0x81:
                p += 1 + (b >> 1)
            elif b == 1:
                p += 1
            elif b & 0x81 == 0x80 and data[p + 1] < 0x80:
                p += 2 + ((b & 0x7F | data[p + 1] << 7) >> 1)
            else:
                p = _length(data, p, "value")
            if p + 1 != rec_end or data[p]:  # not the usual 0 headers closing the record
                p = _skip_headers(data, p, rec_end) if data[p] else p + 1
                if p != rec_end:
                    raise Malformed(f"fields end {p - rec_end:+d} bytes from its length", -1, pos)
            template, pos = pos, rec_end
    except IndexError:
        raise Malformed("the record runs past the end of the batch", delta >> 1, pos) from None
    except Malformed as exc:
        if exc.index < 0:
            exc.index = delta >> 1
        raise
    return template, pos


# Offset deltas as a run compares them, byte by byte: `_DELTAS[w][j][i]` is byte j of the
# w-byte varint of record index i (zigzag 2i), for every i written in w bytes below 2**17.
_RUN_LIMIT = 1 << 17
_LOW7 = bytes(((2 * i) & 0x7F) | 0x80 for i in range(64))  # byte 0 of 2i, i >= 64: i mod 64
_DELTAS = {
    1: (bytes(range(0, 128, 2)),),
    2: (_LOW7 * 128, b"".join(bytes((j,)) * 64 for j in range(128))),
    3: (
        _LOW7 * (_RUN_LIMIT // 64),
        b"".join(bytes((j | 0x80,)) * 64 for j in range(128)) * (_RUN_LIMIT // 8192),
        b"".join(bytes((j,)) * 8192 for j in range(_RUN_LIMIT // 8192)),
    ),
}
_WIDTH_ENDS = {1: 64, 2: 8192, 3: _RUN_LIMIT}  # the first index written in more bytes
_BYTE = [bytes((i,)) for i in range(256)]
_HIGH = bytes(range(0x80, 0x100))
_LOW = bytes(range(0x80))
_RUN_WINDOW = 1024  # records a run looks at, at most
_RUN_FLOOR = 8  # records a run is looked for among, at least (`walk_records`)


def _uniform_run(
    data: memoryview | bytes | bytearray, template: int, pos: int, end: int, index: int, count: int
) -> int:
    """How many records from `pos` (index `index` on) are laid out byte for byte as the walked
    record at `template` just before: the same length, timestamp-delta width, key and value
    lengths and no headers, each with its own offset delta. Each is then as well formed as the
    template, whatever its key, value and timestamp delta hold (the walk reads nothing else);
    they are compared in strides over the data, C loops rather than bytecodes."""
    size = pos - template
    b = data[template]
    if pos + 2 * size > end or data[pos] != b or index >= _RUN_LIMIT:
        return 0  # no room for a run, or the next record's length differs (the usual end)
    t = template + 2 if b < 0x80 else template + 3  # the timestamp delta, after the attributes
    if b > 0x7F and data[template + 1] > 0x7F:
        return 0  # a length of 3 bytes or more
    o = t
    while data[o] > 0x7F:
        o += 1
    width = 1 if index <= 64 else 2 if index <= 8192 else 3  # the template's, index - 1
    k = o + 1 + width  # the key length
    z, k_end = _short_uvarint(data, k)
    v = k_end + (0 if z & 1 else z >> 1)  # the value length
    z, v_end = _short_uvarint(data, v)
    h = v_end + (0 if z & 1 else z >> 1)  # the header count
    n = min(count - index, _RUN_WINDOW, (end - pos) // size, _WIDTH_ENDS[width] - index)
    if h != pos - 1 or n < 2:
        return 0  # headers (a run takes none), or no room
    stop, run, shift = pos + n * size, n, pos - template
    # Usually every record in the window is alike: a count per byte column says so; a column
    # that differs is measured (how many records from the first share the template's byte).
    for q in (*range(template, t - 1), *range(k, k_end), *range(v, v_end), h):
        strided = bytes(data[q + shift : stop : size])  # the length, key and value lengths,
        like = _BYTE[data[q]]  # the header count
        if strided.count(like) != n:
            same = len(strided) - len(strided.lstrip(like))
            if same < run:
                run = same
    for q in range(t, o + 1):  # the same timestamp-delta width: continuation bits but the last
        strided = bytes(data[q + shift : stop : size])
        if q == o and strided.isascii():
            continue  # the usual 1-byte delta: every last byte below 0x80
        same = len(strided) - len(strided.lstrip(_HIGH if q < o else _LOW))
        if same < run:
            run = same
    tables = _DELTAS[width]
    for j in range(width):
        if bytes(data[o + 1 + j + shift : stop : size][:run]) != tables[j][index : index + run]:
            return 0  # an offset delta out of order: the walk will say which
    return run


def _short_uvarint(data: memoryview | bytes | bytearray, p: int) -> tuple[int, int]:
    """`_uvarint` for a walked record's key or value length, inline in its 1- and 2-byte forms."""
    b = data[p]
    if b < 0x80:
        return b, p + 1
    if data[p + 1] < 0x80:
        return b & 0x7F | data[p + 1] << 7, p + 2
    return _uvarint(data, p, 5)


def _length(
    data: memoryview | bytes | bytearray,
    p: int,
    field: str,
    keyless: list[int] | None = None,
    index: int = -1,
) -> int:
    """The position after the key or value at `p` whose length is not a 1-byte one; a null
    key's record `index` is added to `keyless`, if given."""
    z, p = _uvarint(data, p, 5)
    if not z & 1:
        return p + (z >> 1)
    if z != 1:
        raise Malformed(f"a {field} length of {_zigzag(z)}", -1, p)
    if keyless is not None:
        keyless.append(index)
    return p


def _skip_varlong(data: memoryview | bytes | bytearray, p: int) -> int:
    """The position of the last byte of the varlong at `p` (at most 10 bytes)."""
    for q in range(p, p + 10):
        if data[q] < 0x80:
            return q
    raise Malformed("a timestamp delta longer than 10 bytes", -1, p)


def _skip_headers(data: memoryview | bytes | bytearray, p: int, rec_end: int) -> int:
    """Skip a record's headers (count, then key and value of each); the position after them."""
    n, p = _uvarint(data, p, 5)
    if n & 1 or n >> 1 > rec_end - p:
        raise Malformed(f"a header count of {_zigzag(n)}", -1, p)
    for _ in range(n >> 1):
        z, p = _uvarint(data, p, 5)
        if z & 1:
            raise Malformed(f"a header key length of {_zigzag(z)} (keys cannot be null)", -1, p)
        z, p = _uvarint(data, p + (z >> 1), 5)
        if not z & 1:
            p += z >> 1
        elif z != 1:
            raise Malformed(f"a header value length of {_zigzag(z)}", -1, p)
    return p


def _uvarint(data: memoryview | bytes | bytearray, pos: int, most: int) -> tuple[int, int]:
    """The unsigned (still zigzag-encoded) varint at `pos` of at most `most` bytes, and the
    position after it; the walk's slow path, for values of 3 bytes and more."""
    value = shift = 0
    for p in range(pos, pos + most):
        byte = data[p]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, p + 1
        shift += 7
    raise Malformed(f"a varint longer than {most} bytes", -1, pos)


def _zigzag(z: int) -> int:
    return (z >> 1) ^ -(z & 1)
