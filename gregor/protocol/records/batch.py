"""RecordBatch v2 (magic 2): the header, read, validated and patched in place.

Byte layout (big-endian), as Kafka writes it on the wire and on disk::

    RecordBatch =>
      offset  size  field
      0       8     baseOffset: int64
      8       4     batchLength: int32          bytes after this field (total size - 12)
      12      4     partitionLeaderEpoch: int32
      16      1     magic: int8                 = 2
      17      4     crc: uint32                 CRC-32C (Castagnoli) of bytes 21 .. end
      21      2     attributes: int16
      23      4     lastOffsetDelta: int32
      27      8     baseTimestamp: int64
      35      8     maxTimestamp: int64
      43      8     producerId: int64
      51      2     producerEpoch: int16
      53      4     baseSequence: int32
      57      4     recordsCount: int32
      61      ...   records (compressed as a whole when attributes say so)

    attributes bits:
      0-2  compression (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)
      3    timestampType (0 CreateTime, 1 LogAppendTime)
      4    isTransactional
      5    isControlBatch
      6    hasDeleteHorizonMs (compaction)

The CRC does not cover baseOffset, batchLength, partitionLeaderEpoch or magic, so the broker
assigns offsets and stamps the leader epoch without touching it; only a LogAppendTime stamp
(maxTimestamp, attributes) needs the CRC recomputed.

This module never looks at individual records; see `records.py` for those.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part not counted by batchLength
MAGIC = 2
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD = range(5)
COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

# Everything after the CRC in one unpack: attributes .. recordsCount.
_TAIL = struct.Struct(">hiqqqhii")
_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, leaderEpoch, magic, crc
_FULL = struct.Struct(">qiibIhiqqqhii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_PREFIX16 = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf: memoryview | bytes | bytearray, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at `pos`; the caller has checked that 61 bytes are there."""
    return BatchHeader._make(_FULL.unpack_from(buf, pos))


def peek_offset_and_size(buf: memoryview | bytes | bytearray, pos: int = 0) -> tuple[int, int]:
    """(baseOffset, total size) from the first 12 bytes: all a scan over a log needs."""
    base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
    return base_offset, length + LOG_OVERHEAD


def compute_crc(buf: memoryview | bytes | bytearray, pos: int, size: int) -> int:
    view = memoryview(buf)
    return crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size])


_new_header = tuple.__new__  # a BatchHeader from the 13 unpacked fields, as _make does


def check_batch(
    buf: memoryview | bytes | bytearray, pos: int, end: int, max_size: int | None = None
) -> BatchHeader:
    """Validate the batch at `pos` (which must end by `end`) and return its header.

    Raises KafkaError with the code Kafka answers: CORRUPT_MESSAGE for anything that means the
    bytes are damaged (short, bad length, wrong magic, CRC mismatch), INVALID_RECORD for a
    well-formed batch whose counts disagree, MESSAGE_TOO_LARGE above `max_size`.
    """
    # Every produce request comes here once per batch: a good batch passes all the checks
    # below in one expression; anything else goes through them one by one for its error.
    if end - pos >= HEADER_SIZE:
        fields = _FULL.unpack_from(buf, pos)
        size = fields[1] + LOG_OVERHEAD
        count = fields[12]
        if (
            size >= HEADER_SIZE
            and size <= end - pos
            and fields[3] == MAGIC
            and (max_size is None or size <= max_size)
            and count > 0
            and fields[6] + 1 == count
            and crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size]) == fields[4]
        ):
            return _new_header(BatchHeader, fields)
    return _check_batch_slowly(buf, pos, end, max_size)


def _check_batch_slowly(
    buf: memoryview | bytes | bytearray, pos: int, end: int, max_size: int | None
) -> BatchHeader:
    left = end - pos
    if left < HEADER_SIZE:
        raise KafkaError(
            errors.CORRUPT_MESSAGE, f"{left} bytes at position {pos} are too few for a batch header"
        )
    header = read_header(buf, pos)
    size = header.batch_length + LOG_OVERHEAD
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise KafkaError(
            errors.CORRUPT_MESSAGE,
            f"batch at position {pos} has length {header.batch_length}, below the header size",
        )
    if size > left:
        raise KafkaError(
            errors.CORRUPT_MESSAGE,
            f"batch at position {pos} claims {size} bytes but only {left} remain",
        )
    if header.magic != MAGIC:
        raise KafkaError(
            errors.CORRUPT_MESSAGE,
            f"batch at position {pos} has magic {header.magic}; only magic 2 is supported",
        )
    if max_size is not None and size > max_size:
        raise KafkaError(
            errors.MESSAGE_TOO_LARGE,
            f"batch at position {pos} is {size} bytes, above max.message.bytes {max_size}",
        )
    actual = compute_crc(buf, pos, size)
    if actual != header.crc:
        raise KafkaError(
            errors.CORRUPT_MESSAGE,
            f"batch at position {pos}: CRC {actual:#010x} does not match stored {header.crc:#010x}",
        )
    if header.records_count <= 0:
        raise KafkaError(
            errors.INVALID_RECORD,
            f"batch at position {pos} reports {header.records_count} records",
        )
    if header.last_offset_delta < 0 or header.last_offset_delta + 1 != header.records_count:
        raise KafkaError(
            errors.INVALID_RECORD,
            f"batch at position {pos}: lastOffsetDelta {header.last_offset_delta} does not match "
            f"record count {header.records_count}",
        )
    return header


def patch_base_offset(buf: memoryview | bytearray, pos: int, base_offset: int) -> None:
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def patch_partition_leader_epoch(buf: memoryview | bytearray, pos: int, epoch: int) -> None:
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def patch_base_offset_and_epoch(
    buf: memoryview | bytearray, header: BatchHeader, pos: int, base_offset: int, epoch: int
) -> None:
    """`patch_base_offset` and `patch_partition_leader_epoch` in one write of the first 16
    bytes (the batchLength between them written back as `header` has it)."""
    _PREFIX16.pack_into(buf, pos, base_offset, header.batch_length, epoch)


def patch_log_append_time(buf: memoryview | bytearray, pos: int, size: int, now_ms: int) -> None:
    """Stamp LogAppendTime: set the timestamp-type bit and maxTimestamp, then re-sign the CRC."""
    (attributes,) = _INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))


def resign(buf: memoryview | bytearray, pos: int, size: int) -> None:
    """Recompute and store the CRC after a change to the covered bytes."""
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, size))


def iter_headers(buf: memoryview | bytes | bytearray, pos: int = 0, end: int | None = None):
    """Yield (position, header) of each whole batch in buf[pos:end], unvalidated.

    Stops at the first incomplete batch, as a consumer does with the partial batch that may end
    a fetch response.
    """
    if end is None:
        end = len(buf)
    while end - pos >= HEADER_SIZE:
        header = read_header(buf, pos)
        size = header.batch_length + LOG_OVERHEAD
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
            return
        yield pos, header
        pos += size
