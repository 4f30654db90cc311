"""Producer state snapshots: `<20-digit offset>.snapshot` in a partition directory, in Kafka's
format (ProducerSnapshot v1), so Kafka's tools and brokers read ours and we read theirs.

Byte layout (big-endian)::

    ProducerSnapshot =>
      offset  size  field
      0       2     version: int16                  = 1
      2       4     crc: uint32                     CRC-32C of bytes 6 .. end
      6       4     entries count: int32
      10      46*n  ProducerEntry =>
                      producerId: int64
                      epoch: int16
                      lastSequence: int32           -1 when the entry holds no batch
                      lastOffset: int64             -1 when the entry holds no batch
                      offsetDelta: int32            lastOffset - the batch's first offset
                      timestamp: int64              the batch's max timestamp
                      coordinatorEpoch: int32
                      currentTxnFirstOffset: int64  -1 when no transaction is open

The file named N holds the producer state after every batch below offset N: loading it and
replaying the batches from N on gives the state at any later offset.

Kafka writes one entry per producer, for its last batch; a restart therefore remembers one batch
per producer, and a retry of any of the four before it after a clean restart is refused as out of
order. We write one entry per remembered batch (up to 5 per producer, oldest first, the final
one carrying the producer's own timestamp). Kafka's reader keeps the last entry it reads for a
producer id, so it reads our files as its own; ours merges the entries back into the 5 batches,
so a restart remembers what the running broker did.

Written to `<name>.tmp`, fsynced, renamed over the name, the directory fsynced: a crash leaves
the old file or the new one. A snapshot whose fsync is left to a later flush (`sync=False`: at a
roll, after a recovery) is written straight to its name, as Kafka writes every snapshot: a
rename would not make it durable before that flush anyway, and it costs ext4 ~0.2 ms per file
(10,000 partitions recovered at once). A file whose CRC does not match (torn by a crash) is
refused (`CorruptSnapshotError`) and the caller falls back to an older snapshot or the log
itself.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

from crc32c import crc32c

from gregor.storage.checkpoints import fsync_dir

VERSION = 1
SUFFIX = ".snapshot"
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
CRC_START = 6  # the CRC covers everything after the crc field
ENTRY_SIZE = _ENTRY.size  # 46


class CorruptSnapshotError(Exception):
    pass


class SnapshotEntry(NamedTuple):
    """One ProducerEntry, as stored."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def file_name(offset: int) -> str:
    return f"{offset:020d}{SUFFIX}"


def offset_of(name: str) -> int | None:
    """The offset a snapshot file name stands for; None for any other name."""
    if len(name) == 20 + len(SUFFIX) and name.endswith(SUFFIX) and name[:20].isdigit():
        return int(name[:20])
    return None


def list_offsets(directory: str) -> list[int]:
    """Offsets of the snapshot files in `directory`, ascending."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(o for o in map(offset_of, names) if o is not None)


def encode(entries: Iterable[SnapshotEntry]) -> bytes:
    body = bytearray()
    count = 0
    pack = _ENTRY.pack
    for e in entries:
        body += pack(*e)
        count += 1
    head = bytearray(_HEAD.pack(VERSION, 0, count))
    crc = crc32c(bytes(head[CRC_START:]) + bytes(body))
    struct.pack_into(">I", head, 2, crc)
    return bytes(head + body)


def decode(data: bytes) -> list[SnapshotEntry]:
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes are too few for a snapshot header")
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if count < 0 or len(data) != _HEAD.size + count * ENTRY_SIZE:
        raise CorruptSnapshotError(f"{len(data)} bytes do not hold {count} entries")
    actual = crc32c(data[CRC_START:])
    if actual != crc:
        raise CorruptSnapshotError(f"CRC {actual:#010x} does not match stored {crc:#010x}")
    return [
        SnapshotEntry._make(_ENTRY.unpack_from(data, _HEAD.size + i * ENTRY_SIZE))
        for i in range(count)
    ]


def write(directory: str, offset: int, entries: Iterable[SnapshotEntry], sync: bool = True) -> str:
    """Write the snapshot for `offset`; returns its path. `sync`: crash-safely (a temp file,
    fsynced, renamed); else straight to its name, for an fsync later (see above)."""
    path = os.path.join(directory, file_name(offset))
    target = path + ".tmp" if sync else path
    data = encode(entries)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if sync:
        os.replace(target, path)
        fsync_dir(directory)
    return path


def read(path: str) -> list[SnapshotEntry]:
    with open(path, "rb") as f:
        return decode(f.read())


def delete(directory: str, offset: int) -> None:
    try:
        os.unlink(os.path.join(directory, file_name(offset)))
    except FileNotFoundError:
        pass
