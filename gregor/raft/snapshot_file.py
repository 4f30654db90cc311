"""The bytes of a snapshot file, in Kafka's layout (KIP-630): record batches (v2), as in a log.

    batch (control)   one SnapshotHeader record: version 0, the last contained log timestamp
    batch ... batch   the state machine's records, no key, the record as value; a batch holds
                      at most `max_batch_bytes` of values (and at least one record)
    batch (control)   one SnapshotFooter record: version 0

Offsets inside the file count from 0, one per record, header and footer included; every batch
has partitionLeaderEpoch = the snapshot's epoch and the time of writing as its timestamps; no
producer, no compression. The control records' keys and values are control.py's.

The Raft core keeps treating a snapshot as opaque bytes (node.py, log.py): the state machine
encodes its records with `encode` and hands the result to `RaftNode.create_snapshot`, which
stores it as the `.checkpoint` file unchanged; FetchSnapshot sends those same bytes; loading
(`decode`) is the state machine's too. `check` says whether a file is whole (every batch's CRC,
a header first, a footer last, nothing after it), so a torn or damaged file can be skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch, read_batch_records
from gregor.raft.control import (
    SNAPSHOT_FOOTER,
    SNAPSHOT_FOOTER_KEY,
    SNAPSHOT_HEADER,
    SNAPSHOT_HEADER_KEY,
    control_type,
    decode_snapshot_footer,
    decode_snapshot_header,
    encode_snapshot_footer,
    encode_snapshot_header,
)

DEFAULT_MAX_BATCH_BYTES = 1024 * 1024


class SnapshotFormatError(ValueError):
    """Bytes that are not a whole snapshot file."""


@dataclass(frozen=True, slots=True)
class SnapshotContents:
    last_contained_log_timestamp: int
    records: list[bytes]


def encode(
    records: Sequence[bytes],
    epoch: int,
    last_contained_log_timestamp: int,
    now_ms: int,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
) -> bytes:
    out = bytearray()
    offset = 0

    def add(values: Sequence[tuple[bytes | None, bytes]], control: bool) -> None:
        nonlocal offset
        out.extend(
            build_batch(
                list(values),
                base_offset=offset,
                base_timestamp=now_ms,
                partition_leader_epoch=epoch,
                control=control,
            )
        )
        offset += len(values)

    add([(SNAPSHOT_HEADER_KEY, encode_snapshot_header(last_contained_log_timestamp))], True)
    group: list[tuple[bytes | None, bytes]] = []
    size = 0
    for record in records:
        if group and size + len(record) > max_batch_bytes:
            add(group, False)
            group, size = [], 0
        group.append((None, bytes(record)))
        size += len(record)
    if group:
        add(group, False)
    add([(SNAPSHOT_FOOTER_KEY, encode_snapshot_footer())], True)
    return bytes(out)


def decode(data: bytes | bytearray | memoryview) -> SnapshotContents:
    """The header's timestamp and the records; SnapshotFormatError if the file is not whole."""
    buf = bytes(data)
    pos = 0
    expected_offset = 0
    timestamp: int | None = None
    footer = False
    records: list[bytes] = []
    while pos < len(buf):
        if footer:
            raise SnapshotFormatError(f"{len(buf) - pos} byte(s) after the snapshot footer")
        try:
            header = rb.check_batch(buf, pos, len(buf))
        except KafkaError as exc:
            raise SnapshotFormatError(
                f"batch at position {pos}: {exc.name}: {exc.message}"
            ) from None
        _, recs = read_batch_records(buf, pos)
        if header.base_offset != expected_offset:
            raise SnapshotFormatError(
                f"batch at position {pos} starts at offset {header.base_offset}, expected {expected_offset}"
            )
        expected_offset += len(recs)
        if header.is_control:
            if len(recs) != 1:
                raise SnapshotFormatError(
                    f"control batch at position {pos} has {len(recs)} records"
                )
            kind = control_type(recs[0].key)
            value = recs[0].value or b""
            try:
                if kind == SNAPSHOT_HEADER and timestamp is None and pos == 0:
                    timestamp = decode_snapshot_header(value)[1]
                elif kind == SNAPSHOT_FOOTER and timestamp is not None:
                    decode_snapshot_footer(value)
                    footer = True
                else:
                    raise SnapshotFormatError(
                        f"unexpected control record type {kind} at position {pos}"
                    )
            except ValueError as exc:
                raise SnapshotFormatError(str(exc)) from None
        else:
            if timestamp is None:
                raise SnapshotFormatError("the snapshot does not start with a SnapshotHeader batch")
            records.extend(r.value if r.value is not None else b"" for r in recs)
        pos += header.size
    if timestamp is None:
        raise SnapshotFormatError("empty snapshot: no SnapshotHeader")
    if not footer:
        raise SnapshotFormatError("the snapshot ends without a SnapshotFooter (torn write?)")
    return SnapshotContents(timestamp, records)


def check(data: bytes | bytearray | memoryview) -> str | None:
    """None if `data` is a whole snapshot file, else what is wrong with it."""
    try:
        decode(data)
    except SnapshotFormatError as exc:
        return str(exc)
    return None
