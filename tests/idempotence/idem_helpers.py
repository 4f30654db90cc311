"""Helpers for the idempotence tests: idempotent batches, a log in a temp dir, and the state a
log's batches imply, computed here from the batch headers alone (an oracle independent of
producer_state.py's replay: last 5 batches per producer, epoch bumps clear them)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.producer_state import BatchMetadata, ProducerStateEntry

INT32_MAX = (1 << 31) - 1


def idem_batch(
    pid: int,
    epoch: int,
    seq: int,
    n: int = 1,
    *,
    ts: int = 1_000,
    transactional: bool = False,
    payload: bytes = b"v",
) -> bytearray:
    """One batch of `n` records from producer `pid` at `epoch`, starting at sequence `seq`."""
    return build_batch(
        [(b"k%d" % i, payload + b"%d" % i) for i in range(n)],
        base_timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=transactional,
    )


def plain_batch(n: int = 1, ts: int = 1_000) -> bytearray:
    return build_batch([(b"k", b"v%d" % i) for i in range(n)], base_timestamp=ts)


def open_log(directory: str, config: LogConfig | None = None, **kw) -> Log:
    return Log.open(directory, config or LogConfig(), now_ms=0, **kw)


def log_batches(log: Log) -> list[rb.BatchHeader]:
    """Every batch header in the log, in order, read straight from the segment files."""
    out = []
    for seg in log.segments:
        with open(seg.log_path, "rb") as f:
            data = f.read()
        out.extend(h for _pos, h in rb.iter_headers(data))
    return out


def expected_state(headers: Iterable[rb.BatchHeader]) -> dict[int, ProducerStateEntry]:
    """The producer state the data batches `headers` imply (no markers, no expiry)."""
    state: dict[int, ProducerStateEntry] = {}
    for h in headers:
        if h.producer_id < 0:
            continue
        e = state.setdefault(h.producer_id, ProducerStateEntry(h.producer_id))
        if h.producer_epoch != e.producer_epoch:
            e.producer_epoch = h.producer_epoch
            e.batches = []
        e.batches = [
            *e.batches[-4:],
            BatchMetadata(
                h.base_sequence,
                h.last_sequence,
                h.last_offset,
                h.last_offset_delta,
                h.max_timestamp,
            ),
        ]
        e.last_timestamp = h.max_timestamp
        if h.is_transactional and e.current_txn_first_offset < 0:
            e.current_txn_first_offset = h.base_offset
    return state


def snapshot_files(directory: str) -> list[int]:
    return sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(".snapshot"))
