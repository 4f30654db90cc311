"""Helpers of the transaction storage tests: transactional batches and markers, and an oracle
that reads a log's segment files raw and says, from the batches alone, which transactions are
open and what every segment's .txnindex must hold (Kafka's rules, restated here independently of
producer_state.py)."""

from __future__ import annotations

import os
import struct

from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch, build_control_batch, read_batch_records
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.producer_state import AppendOrigin

KAFKA_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, LSO


def txn_batch(
    pid: int, seq: int, n: int = 1, *, epoch: int = 0, ts: int = 1_000, key: bytes = b"k"
) -> bytearray:
    return build_batch(
        [(key + b"%d" % i, b"v%d" % (seq + i)) for i in range(n)],
        base_timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def plain(n: int = 1, ts: int = 1_000) -> bytearray:
    return build_batch([(b"p%d" % i, b"x") for i in range(n)], base_timestamp=ts)


def end_txn(
    log: Log, pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0, ts: int = 1_000
) -> int:
    """Append a marker as a coordinator does; its offset."""
    info = log.append(
        build_control_batch(pid, epoch, coordinator_epoch, commit, ts),
        origin=AppendOrigin.COORDINATOR,
        now_ms=ts,
    )
    return info.first_offset


def open_log(directory: str, config: LogConfig | None = None, **kw) -> Log:
    return Log.open(directory, config or LogConfig(), now_ms=0, **kw)


def segment_file_batches(log: Log) -> list[tuple[int, list[tuple[rb.BatchHeader, bytes]]]]:
    """(segment base, its batches (header, bytes)) read from the files."""
    out = []
    for seg in log.segments:
        with open(seg.log_path, "rb") as f:
            data = f.read()
        out.append((seg.base_offset, [(h, data[p : p + h.size]) for p, h in rb.iter_headers(data)]))
    return out


def oracle(
    log: Log, start: int = 0
) -> tuple[dict[int, list[tuple[int, int, int, int]]], dict[int, int]]:
    """(segment base -> its .txnindex entries, producer id -> first offset of its open
    transaction), from the batches at or above `start` (below it, the log's start)."""
    open_txns: dict[int, int] = {}
    index: dict[int, list[tuple[int, int, int, int]]] = {}
    for base, batches in segment_file_batches(log):
        for header, data in batches:
            if header.last_offset < start or header.producer_id < 0:
                continue
            pid = header.producer_id
            if header.is_control:
                if header.records_count == 0:
                    continue
                _, recs = read_batch_records(data)
                kind = struct.unpack(">hh", recs[0].key)[1]
                if pid in open_txns:
                    first = open_txns.pop(pid)
                    if kind == 0:
                        others = [f for p, f in open_txns.items() if p != pid]
                        lso = min(others) if others else header.base_offset + 1
                        index.setdefault(base, []).append((pid, first, header.base_offset, lso))
            elif header.is_transactional and pid not in open_txns:
                open_txns[pid] = header.base_offset
    return index, open_txns


def index_files(log: Log) -> dict[int, bytes]:
    """segment base -> the bytes of its .txnindex (segments without one are left out)."""
    out = {}
    for seg in log.segments:
        path = seg.txn_index.path
        if os.path.exists(path):
            with open(path, "rb") as f:
                out[seg.base_offset] = f.read()
    return out


def kafka_index_bytes(entries: list[tuple[int, int, int, int]]) -> bytes:
    return b"".join(KAFKA_ENTRY.pack(0, *e) for e in entries)


def assert_txn_state(log: Log, start: int = 0) -> None:
    """The .txnindex files and the open transactions are what the log's batches say."""
    expected_index, expected_open = oracle(log, start)
    assert index_files(log) == {b: kafka_index_bytes(e) for b, e in expected_index.items()}
    assert dict(log.producer_state.ongoing) == {f: p for p, f in expected_open.items()}
    assert list(log.producer_state.ongoing) == sorted(log.producer_state.ongoing)
    for pid, entry in log.producer_state.producers.items():
        assert entry.current_txn_first_offset == expected_open.get(pid, -1)
