"""`gregor dump-log --output json`: one JSON object per line (JSON Lines), a batch or an index
entry each, written as the file is read so a large segment streams. Field names are Kafka's dump
names in snake_case; every object names its file. Bytes that are not UTF-8 are given in base64,
with a `*_base64` flag set."""

from __future__ import annotations

import base64
from typing import Any

from gregor.cli import dump_log_metadata as md
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import read_batch_records, read_end_txn_marker

SHAPE = """
.log / .checkpoint: one object per batch
  {"file", "base_offset", "last_offset", "count", "base_sequence", "last_sequence",
   "producer_id", "producer_epoch", "partition_leader_epoch", "is_transactional",
   "is_control", "position", "create_time", "size", "magic", "compress_codec", "crc",
   "is_valid", "records": [...]}       ("records" with --print-data-log only)
  a record:  {"offset", "create_time", "key_size", "value_size", "sequence",
              "headers": [{"key", "value", "value_base64"}],
              "key", "key_base64", "value", "value_base64"}
             (key/value: text when UTF-8, else base64 and *_base64 true; null when absent)
  a transaction marker:  {"offset", "create_time", "end_txn_marker": "COMMIT"|"ABORT",
                          "coordinator_epoch"}
  with --cluster-metadata-decoder:  {"offset", "create_time",
      "payload": {"type", "version", "data"}}   or, in a control batch,
      "control_type": "LeaderChange"|..., "control": {...};
      a record that does not decode: {"offset", "error"}
.index:      {"file", "offset", "position"}
.timeindex:  {"file", "timestamp", "offset"}
.txnindex:   {"file", "version", "producer_id", "first_offset", "last_offset",
              "last_stable_offset"}
Errors (a corrupt batch or index) go to stderr, and the exit status is 1.
"""


def batch(path: str, header: Any, pos: int) -> dict[str, Any]:
    return {
        "file": path,
        "base_offset": header.base_offset,
        "last_offset": header.last_offset,
        "count": header.records_count,
        "base_sequence": header.base_sequence,
        "last_sequence": header.last_sequence,
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "partition_leader_epoch": header.partition_leader_epoch,
        "is_transactional": header.is_transactional,
        "is_control": header.is_control,
        "position": pos,
        "create_time": header.max_timestamp,
        "size": header.size,
        "magic": header.magic,
        "compress_codec": rb.COMPRESSION_NAMES[header.compression],
        "crc": header.crc,
        "is_valid": True,
    }


def records(data: bytes, pos: int, header: Any, metadata: bool) -> list[dict[str, Any]]:
    """The batch's records (checked by check_batch already)."""
    if metadata:
        _, recs = read_batch_records(data, pos)
        return [_metadata_record(r, header.is_control) for r in recs]
    if header.is_control:
        marker = read_end_txn_marker(data, pos)
        if marker is None:
            return []
        committed, coordinator_epoch = marker
        return [
            {
                "offset": header.base_offset,
                "create_time": header.max_timestamp,
                "end_txn_marker": "COMMIT" if committed else "ABORT",
                "coordinator_epoch": coordinator_epoch,
            }
        ]
    _, recs = read_batch_records(data, pos)
    return [_data_record(r, header) for r in recs]


def _sequence(header: Any, offset: int) -> int:
    """A record's sequence: its batch's base sequence plus its offset delta (wrapping at
    2^31 as Kafka's do), -1 when the producer is not idempotent."""
    if header.base_sequence < 0:
        return -1
    return (header.base_sequence + offset - header.base_offset) % (1 << 31)


def _data_record(r: Any, header: Any) -> dict[str, Any]:
    key, key_b64 = _text(r.key)
    value, value_b64 = _text(r.value)
    return {
        "offset": r.offset,
        "create_time": r.timestamp,
        "key_size": -1 if r.key is None else len(r.key),
        "value_size": -1 if r.value is None else len(r.value),
        "sequence": _sequence(header, r.offset),
        "headers": [_header(k, v) for k, v in r.headers],
        "key": key,
        "key_base64": key_b64,
        "value": value,
        "value_base64": value_b64,
    }


def _header(key: str, value: bytes | None) -> dict[str, Any]:
    text, b64 = _text(value)
    return {"key": key, "value": text, "value_base64": b64}


def _text(b: bytes | None) -> tuple[str | None, bool]:
    """Text when UTF-8, else base64 (and True)."""
    if b is None:
        return None, False
    try:
        return b.decode(), False
    except UnicodeDecodeError:
        return base64.b64encode(b).decode(), True


def _metadata_record(r: Any, is_control: bool) -> dict[str, Any]:
    try:
        if is_control:
            name, body = md.control_record(r.key, r.value)
            what: dict[str, Any] = {"control_type": name, "control": body}
        else:
            what = {"payload": md.payload(r.value)}
    except md.UndecodableRecord as exc:
        return {"offset": r.offset, "error": str(exc)}
    return {"offset": r.offset, "create_time": r.timestamp, **what}
