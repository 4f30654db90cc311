"""`bootstrap.checkpoint`: metadata records a new cluster's log starts with, written by
`gregor storage format` beside meta.properties (Kafka's BootstrapMetadata file, a snapshot-file
layout of metadata records), committed by the first active controller with metadata.version.

What it carries here: the UserScramCredentialRecords of `storage format --add-scram`, so that
a cluster whose listeners take only SCRAM (its brokers and admins included) has users before
anyone can connect. Other records in the file are ignored (metadata.version is the
controller's own). A file that does not decode is an error naming it: a node must not start
without the users it was formatted with.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from gregor.metadata import records as r
from gregor.metadata.raft_store import MetadataLogError
from gregor.raft import snapshot_file
from gregor.storage.checkpoints import fsync_dir

FILE_NAME = "bootstrap.checkpoint"


class BootstrapError(MetadataLogError):
    """A bootstrap.checkpoint that cannot be read: the node does not start (one line)."""


def write(log_dir: str, records: Sequence[Any], metadata_version: int, now_ms: int) -> str:
    """Write `records` (after a metadata.version FeatureLevelRecord, as Kafka's file has) as
    `<log_dir>/bootstrap.checkpoint`, durably; its path."""
    first = r.FeatureLevelRecord(name="metadata.version", feature_level=metadata_version)
    data = snapshot_file.encode([r.encode(rec) for rec in [first, *records]], 0, now_ms, now_ms)
    path = os.path.join(log_dir, FILE_NAME)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(log_dir)
    return path


def read(log_dir: str) -> list[Any]:
    """The SCRAM credential records of `<log_dir>/bootstrap.checkpoint`; [] without the file."""
    path = os.path.join(log_dir, FILE_NAME)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    try:
        records = [r.decode(d) for d in snapshot_file.decode(data).records]
    except ValueError as exc:
        raise BootstrapError(f"{path}: {exc}") from None
    return [rec for rec in records if isinstance(rec, r.UserScramCredentialRecord)]
