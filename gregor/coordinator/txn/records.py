"""The records of `__transaction_state`, in Kafka's formats: one key per transactional id, its
value the whole state of the id after the operation that wrote it (a null value, a tombstone,
removes the id).

    TransactionLogKey v0 (not flexible):
      version:int16 (0)  transactionalId:string

    TransactionLogValue v0 (read) and v1 (read and written, flexible):
      version:int16
      producerId:int64
      producerEpoch:int16
      transactionTimeoutMs:int32
      transactionStatus:int8            the state's id (state.py)
      transactionPartitions:[PartitionsSchema]?   null for Empty
        topic:string  partitionIds:[int32]
      transactionLastUpdateTimestampMs:int64
      transactionStartTimestampMs:int64  -1 while no transaction has started
      tagged fields (v1):  0 PreviousProducerId:int64 (default -1)
                           1 NextProducerId:int64     (default -1)
                           2 ClientTransactionVersion:int16 (default 0)

v0: string = int16 length + UTF-8, array = int32 count (-1 null). v1: lengths and counts are
unsigned varints of n+1 (0 null), and the value and each PartitionsSchema end with a
tagged-field section (varint count, then tag, size, data, in tag order). A tagged field is
written only when it differs from its default, as Kafka's generated code does; unknown tags are
skipped. We write v1, the version a Kafka 4.x cluster with transaction.version >= 1 (the default
for new clusters) writes. Kafka 4.0-4.2 never fill PreviousProducerId/NextProducerId (KAFKA-20310
fixed that later); we do when they are set, so a new producer id survives a failover.

The last producer epoch (KIP-360: a retried InitProducerId naming the epoch it replaced) is not
in the format: it travels with a record we wrote ourselves and is -1 after loading, as in Kafka.

The same layouts, versions and field names as Kafka's `TransactionLogKey.json` and
`TransactionLogValue.json`; the encoding is our own.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from gregor.coordinator.record_reader import RecordFormatError, RecordReader
from gregor.coordinator.txn.state import BY_ID, EMPTY, TxnState

KEY_VERSION = 0
VALUE_VERSION = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """A transactional id's durable state: what a record says, and all the coordinator keeps."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_version: int = 0  # the client's transaction.version (2: an epoch bump per transaction)
    # Not in the format (see the module docstring), so not part of equality.
    last_producer_epoch: int = field(default=NO_PRODUCER_EPOCH, compare=False)


@dataclass(frozen=True, slots=True)
class TxnRecord:
    transactional_id: str
    value: TransactionMetadata | None  # None: tombstone, the id is removed


# -- encoding ------------------------------------------------------------------------------------


def _uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _compact_str(out: bytearray, s: str) -> None:
    b = s.encode()
    _uvarint(out, len(b) + 1)
    out += b


def encode_key(transactional_id: str) -> bytes:
    b = transactional_id.encode()
    return struct.pack(">hh", KEY_VERSION, len(b)) + b


def _grouped(partitions: frozenset[TopicPartition]) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        by_topic.setdefault(topic, []).append(index)
    return list(by_topic.items())


def encode_value(m: TransactionMetadata) -> bytes:
    out = bytearray(
        struct.pack(
            ">hqhib", VALUE_VERSION, m.producer_id, m.producer_epoch, m.timeout_ms, m.state.id
        )
    )
    if m.state is EMPTY:
        out.append(0)  # null: an Empty id has no partitions
    else:
        grouped = _grouped(m.partitions)
        _uvarint(out, len(grouped) + 1)
        for topic, indexes in grouped:
            _compact_str(out, topic)
            _uvarint(out, len(indexes) + 1)
            for i in indexes:
                out += struct.pack(">i", i)
            out.append(0)  # PartitionsSchema's tagged fields: none
    out += struct.pack(">qq", m.last_update_ms, m.start_ms)
    tags: list[tuple[int, bytes]] = []
    if m.previous_producer_id != NO_PRODUCER_ID:
        tags.append((0, struct.pack(">q", m.previous_producer_id)))
    if m.next_producer_id != NO_PRODUCER_ID:
        tags.append((1, struct.pack(">q", m.next_producer_id)))
    if m.client_version != 0:
        tags.append((2, struct.pack(">h", m.client_version)))
    _uvarint(out, len(tags))
    for tag, data in tags:
        _uvarint(out, tag)
        _uvarint(out, len(data))
        out += data
    return bytes(out)


def encode(record: TxnRecord) -> tuple[bytes, bytes | None]:
    key = encode_key(record.transactional_id)
    return key, None if record.value is None else encode_value(record.value)


# -- decoding ------------------------------------------------------------------------------------


def decode_key(key: bytes) -> str | None:
    """The transactional id of a key; None for a key version we do not know (Kafka skips those:
    "a left over from an aborted upgrade")."""
    r = RecordReader(key)
    if r.int16() != KEY_VERSION:
        return None
    return r.string()


def decode_value(value: bytes) -> TransactionMetadata:
    r = RecordReader(value)
    version = r.int16()
    if version not in (0, 1):
        raise RecordFormatError(f"TransactionLogValue version {version} is not 0 or 1")
    r.flexible = version >= 1
    producer_id, epoch, timeout, status = r.int64(), r.int16(), r.int32(), r.int8()
    state = BY_ID.get(status)
    if state is None:
        raise RecordFormatError(f"unknown transaction status {status}")
    partitions: set[TopicPartition] = set()
    for _ in range(max(r.nullable_array_len(), 0)):
        topic = r.string()
        count = r.nullable_array_len()
        if count < 0:
            raise RecordFormatError("null partition list")
        for _ in range(count):
            partitions.add((topic, r.int32()))
        r.tags()
    last_update, start = r.int64(), r.int64()
    tags = r.tags()
    return TransactionMetadata(
        producer_id=producer_id,
        producer_epoch=epoch,
        timeout_ms=timeout,
        state=state,
        partitions=frozenset() if state is EMPTY else frozenset(partitions),
        last_update_ms=last_update,
        start_ms=start,
        previous_producer_id=_tag_int(tags, 0, ">q", NO_PRODUCER_ID),
        next_producer_id=_tag_int(tags, 1, ">q", NO_PRODUCER_ID),
        client_version=_tag_int(tags, 2, ">h", 0),
    )


def _tag_int(tags: dict[int, bytes], tag: int, fmt: str, default: int) -> int:
    data = tags.get(tag)
    if data is None:
        return default
    if len(data) != struct.calcsize(fmt):
        raise RecordFormatError(f"tagged field {tag} has {len(data)} bytes")
    return int(struct.unpack(fmt, data)[0])


def decode(key: bytes, value: bytes | None) -> TxnRecord | None:
    """The record for a key and value of `__transaction_state`; None for keys of another
    version. RecordFormatError if damaged."""
    transactional_id = decode_key(key)
    if transactional_id is None:
        return None
    return TxnRecord(transactional_id, None if value is None else decode_value(value))
