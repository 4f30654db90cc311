"""`gregor dump-log`: print the batches of segment files and the entries of their indexes
(`.index`, `.timeindex`, `.txnindex`), as `kafka-dump-log.sh --files` does; a transaction
marker's record prints as `endTxnMarker: COMMIT|ABORT coordinatorEpoch: N`."""

from __future__ import annotations

import argparse
import os
import struct
import sys

from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import read_batch_records, read_end_txn_marker
from gregor.storage.txn_index import CorruptIndexError, parse_entries


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dump-log", help="print the batches of .log files and the entries of indexes")
    p.add_argument("files", nargs="+", help=".log, .index, .timeindex or .txnindex files")
    p.add_argument("--print-data-log", action="store_true", help="print every record too")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        print(f"Dumping {path}")
        if path.endswith(".log"):
            status |= _dump_log(path, args.print_data_log)
        elif path.endswith(".index"):
            _dump_index(path, ">ii", ("offset", "position"))
        elif path.endswith(".timeindex"):
            _dump_index(path, ">qi", ("timestamp", "offset"))
        elif path.endswith(".txnindex"):
            status |= _dump_txn_index(path)
        else:
            print(f"{path}: not a .log, .index, .timeindex or .txnindex file", file=sys.stderr)
            status = 1
    return status


def _dump_log(path: str, records: bool) -> int:
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        try:
            header = rb.check_batch(data, pos, len(data))
        except KafkaError as exc:
            print(f"position {pos}: {exc.name}: {exc.message}")
            return 1
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
        if records and header.is_control:
            marker = read_end_txn_marker(data, pos)
            if marker is not None:
                committed, coordinator_epoch = marker
                print(
                    f"| offset: {header.base_offset} CreateTime: {header.max_timestamp} "
                    f"endTxnMarker: {'COMMIT' if committed else 'ABORT'} coordinatorEpoch: {coordinator_epoch}"
                )
        elif records:
            _, recs = read_batch_records(data, pos)
            for r in recs:
                print(
                    f"| offset: {r.offset} CreateTime: {r.timestamp} keySize: "
                    f"{-1 if r.key is None else len(r.key)} valueSize: "
                    f"{-1 if r.value is None else len(r.value)} headerKeys: "
                    f"[{','.join(k for k, _ in r.headers)}] key: {r.key!r} payload: {r.value!r}"
                )
        pos += header.size
    return 0


def _dump_index(path: str, fmt: str, names: tuple[str, str]) -> None:
    base = int(os.path.basename(path).split(".")[0])
    entry = struct.Struct(fmt)
    with open(path, "rb") as f:
        data = f.read()
    for i in range(len(data) // entry.size):
        a, b = entry.unpack_from(data, i * entry.size)
        if names[0] == "offset":
            a += base
        else:
            b += base
        if (a, b) == (base, 0) and i > 0:
            break  # the zeroed tail of a preallocated, untrimmed index
        print(f"{names[0]}: {a} {names[1]}: {b}")


def _dump_txn_index(path: str) -> int:
    with open(path, "rb") as f:
        data = f.read()
    try:
        entries = parse_entries(data, path)
    except CorruptIndexError as exc:
        print(str(exc))
        return 1
    for e in entries:
        print(
            f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} "
            f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}"
        )
    return 0
