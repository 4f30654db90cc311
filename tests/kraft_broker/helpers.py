"""Helpers for the KRaft broker tests: read `__cluster_metadata-0` back with the storage Log and
the metadata record decoder, and a raw-protocol connection for the APIs confluent-kafka lacks."""

from __future__ import annotations

import os
from typing import Any

from gregor.metadata import records
from gregor.protocol.records.batch import iter_headers
from gregor.protocol.records.records import iter_records
from gregor.raft.storage_log import DIR_NAME
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.testing.raw_client import RawClient


def _read(log_dir: str) -> bytes:
    log = Log.open(
        os.path.join(log_dir, DIR_NAME), LogConfig(max_message_bytes=8 << 20), clean_shutdown=False
    )
    try:
        return log.read_bytes(0, 1 << 30)
    finally:
        log.close()


def metadata_batches(log_dir: str) -> list[tuple[int, int]]:
    """(base offset, record count) of every data batch of the metadata log."""
    data = _read(log_dir)
    return [
        (h.base_offset, h.last_offset_delta + 1) for _, h in iter_headers(data) if not h.is_control
    ]


def metadata_records(log_dir: str) -> list[tuple[int, Any]]:
    """(offset, record) of every metadata record in `<log_dir>/__cluster_metadata-0` (control
    batches left out), read with the storage Log, decoded with gregor.metadata.records."""
    data = _read(log_dir)
    out = []
    for header, rec in iter_records(data):
        if header.is_control:
            continue
        assert rec.value is not None
        out.append((rec.offset, records.decode(rec.value)))
    return out


def names(recs: list[tuple[int, Any]]) -> list[str]:
    return [type(rec).__name__ for _, rec in recs]


class Raw(RawClient):
    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap, client_id="kraft-test", timeout_s=15)
