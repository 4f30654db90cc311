"""`gregor dump-log`: print the batches of segment files and the entries of their indexes
(`.index`, `.timeindex`, `.txnindex`), as `kafka-dump-log.sh --files` does; a transaction
marker's record prints as `endTxnMarker: COMMIT|ABORT coordinatorEpoch: N`.

`--cluster-metadata-decoder` (Kafka's flag; implies --print-data-log) reads the records as those
of `__cluster_metadata`: each prints on one line as
`payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"orders","topicId":"..."}}`
(record type as Kafka's MetadataRecordType names it, fields in camelCase, uuids in Kafka's
base64 form), and a control record by its ControlRecordType: `LeaderChange: {...}`,
`SnapshotHeader: {...}`, `SnapshotFooter: {...}`. A record that does not decode prints
`Error at offset N, skipping. <why>`. Snapshot files (`<offset>-<epoch>.checkpoint`, record
batches like a segment's) are dumped as `.log` files are.

`--output json` prints the same as JSON Lines (gregor/cli/dump_log_json.py); the plain text is the
default, also on a terminal."""

from __future__ import annotations

import argparse
import os
import struct
import sys
from typing import Any

from gregor.cli import dump_log_json, output
from gregor.cli import dump_log_metadata as md
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import read_batch_records, read_end_txn_marker
from gregor.storage.txn_index import CorruptIndexError, parse_entries


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dump-log", help="print the batches of .log files and the entries of indexes"
    )
    p.add_argument(
        "files", nargs="+", help=".log, .checkpoint, .index, .timeindex or .txnindex files"
    )
    p.add_argument("--print-data-log", action="store_true", help="print every record too")
    p.add_argument(
        "--cluster-metadata-decoder",
        action="store_true",
        help="decode the records as KRaft metadata records (__cluster_metadata); implies --print-data-log",
    )
    output.add_lines_output_arg(p, dump_log_json.SHAPE)
    p.set_defaults(func=run)


KINDS = ".log, .checkpoint, .index, .timeindex or .txnindex"


class NotReadable(Exception):
    """A file that is not what its name says (a segment, an index): one line, exit status 1."""


def run(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            status |= _dump_file(path, args)
        except NotReadable as exc:
            print(f"gregor: {path}: {exc}", file=sys.stderr)
            status = 1
    return status


def _dump_file(path: str, args: argparse.Namespace) -> int:
    as_json = args.output == "json"
    if not path.endswith((".log", ".checkpoint", ".index", ".timeindex", ".txnindex")):
        raise NotReadable(f"not a {KINDS} file")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise NotReadable(exc.strerror or str(exc)) from None
    if path.endswith((".index", ".timeindex")):
        base = _base_offset(path)
    if not as_json:
        print(f"Dumping {path}")
    if path.endswith((".log", ".checkpoint")):
        decoder = args.cluster_metadata_decoder
        return _dump_log(data, args.print_data_log or decoder, decoder, path if as_json else None)
    if path.endswith(".index"):
        entries = _index_entries(data, base, ">ii", ("offset", "position"))
    elif path.endswith(".timeindex"):
        entries = _index_entries(data, base, ">qi", ("timestamp", "offset"))
    else:
        return _dump_txn_index(data, path, as_json)
    for entry in entries:
        if as_json:
            output.print_json_line({"file": path, **entry})
        else:
            print(" ".join(f"{name}: {value}" for name, value in entry.items()))
    return 0


def _base_offset(path: str) -> int:
    """An index's base offset, from its name (00000000000000000042.index)."""
    stem = os.path.basename(path).split(".")[0]
    if not stem.isdigit():
        raise NotReadable(
            "not a log index: its name must be its segment's base offset, as in "
            "00000000000000000000.index"
        )
    return int(stem)


def _dump_log(data: bytes, records: bool, metadata: bool, json_path: str | None) -> int:
    """Every batch, plain or (json_path given) as JSON Lines; 1 at a corrupt batch."""
    pos = 0
    while pos < len(data):
        try:
            header = rb.check_batch(data, pos, len(data))
        except KafkaError as exc:
            if pos == 0 and not (len(data) > rb.MAGIC_OFFSET and data[rb.MAGIC_OFFSET] == rb.MAGIC):
                # Not a corrupt batch: no batch at all (a file of something else).
                raise NotReadable(
                    f"not a log segment (no record batch at position 0: {exc.message})"
                ) from None
            if json_path is not None:  # stdout keeps to batch objects
                print(
                    f"gregor: {json_path}: position {pos}: {exc.name}: {exc.message}",
                    file=sys.stderr,
                )
            else:
                print(f"position {pos}: {exc.name}: {exc.message}")
            return 1
        if json_path is not None:
            doc = dump_log_json.batch(json_path, header, pos)
            if records:
                doc["records"] = dump_log_json.records(data, pos, header, metadata)
            output.print_json_line(doc)
        else:
            _print_batch(header, pos)
            if records:
                _print_records(data, pos, header, metadata)
        pos += header.size
    return 0


def _print_batch(header: Any, pos: int) -> None:
    print(
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.records_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} partitionLeaderEpoch: "
        f"{header.partition_leader_epoch} isTransactional: {header.is_transactional} "
        f"isControl: {header.is_control} position: {pos} "
        f"CreateTime: {header.max_timestamp} size: {header.size} magic: {header.magic} "
        f"compresscodec: {rb.COMPRESSION_NAMES[header.compression]} crc: {header.crc} "
        f"isvalid: true"
    )


def _print_records(data: bytes, pos: int, header: Any, metadata: bool) -> None:
    if metadata:
        _, recs = read_batch_records(data, pos)
        for rec in recs:
            try:
                if header.is_control:
                    name, body = md.control_record(rec.key, rec.value)
                    what = f"{name}: {md.dumps(body)}"
                else:
                    what = f"payload: {md.dumps(md.payload(rec.value))}"
            except md.UndecodableRecord as exc:
                print(f"| Error at offset {rec.offset}, skipping. {exc}")
                continue
            print(f"| offset: {rec.offset} CreateTime: {rec.timestamp} {what}")
    elif header.is_control:
        marker = read_end_txn_marker(data, pos)
        if marker is not None:
            committed, coordinator_epoch = marker
            print(
                f"| offset: {header.base_offset} CreateTime: {header.max_timestamp} "
                f"endTxnMarker: {'COMMIT' if committed else 'ABORT'} coordinatorEpoch: {coordinator_epoch}"
            )
    else:
        _, recs = read_batch_records(data, pos)
        for r in recs:
            print(
                f"| offset: {r.offset} CreateTime: {r.timestamp} keySize: "
                f"{-1 if r.key is None else len(r.key)} valueSize: "
                f"{-1 if r.value is None else len(r.value)} headerKeys: "
                f"[{','.join(k for k, _ in r.headers)}] key: {r.key!r} payload: {r.value!r}"
            )


def _index_entries(
    data: bytes, base: int, fmt: str, names: tuple[str, str]
) -> list[dict[str, int]]:
    entry = struct.Struct(fmt)
    out = []
    for i in range(len(data) // entry.size):
        a, b = entry.unpack_from(data, i * entry.size)
        if names[0] == "offset":
            a += base
        else:
            b += base
        if (a, b) == (base, 0) and i > 0:
            break  # the zeroed tail of a preallocated, untrimmed index
        out.append({names[0]: a, names[1]: b})
    return out


def _dump_txn_index(data: bytes, path: str, as_json: bool) -> int:
    try:
        entries = parse_entries(data, path)
    except CorruptIndexError as exc:
        print(f"gregor: {exc}" if as_json else str(exc), file=sys.stderr if as_json else sys.stdout)
        return 1
    for e in entries:
        if as_json:
            output.print_json_line(
                {
                    "file": path,
                    "version": 0,
                    "producer_id": e.producer_id,
                    "first_offset": e.first_offset,
                    "last_offset": e.last_offset,
                    "last_stable_offset": e.last_stable_offset,
                }
            )
            continue
        print(
            f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} "
            f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}"
        )
    return 0
