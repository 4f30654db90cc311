"""Kafka's checkpoint files, in its text format, written so a crash never leaves half a file.

    recovery-point-offset-checkpoint    (one per log dir)
    log-start-offset-checkpoint         (one per log dir)
    replication-offset-checkpoint       (one per log dir: high watermarks)
    cleaner-offset-checkpoint           (one per log dir)
    leader-epoch-checkpoint             (one per partition dir)

Format::

    0                      version
    2                      number of entries
    my-topic 0 1234        topic partition offset      (offset checkpoints)
    my-topic 1 98
or, for the leader-epoch checkpoint, `epoch startOffset` per line.

Writes go to `<file>.tmp`, are fsynced, then renamed over the file and the directory fsynced.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

VERSION = 0


class CheckpointError(Exception):
    pass


def write_lines(path: str, entries: Iterable[str]) -> None:
    lines = list(entries)
    text = f"{VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_lines(path: str) -> list[list[str]]:
    """The entries of a checkpoint as split lines; [] if the file does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read().splitlines()
    except FileNotFoundError:
        return []
    if len(raw) < 2:
        raise CheckpointError(f"{path}: missing version or count line")
    if raw[0].strip() != str(VERSION):
        raise CheckpointError(f"{path}: unknown version {raw[0]!r}")
    try:
        count = int(raw[1])
    except ValueError as exc:
        raise CheckpointError(f"{path}: bad entry count {raw[1]!r}") from exc
    entries = [line.split() for line in raw[2:] if line.strip()]
    if len(entries) != count:
        raise CheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def write_offsets(path: str, offsets: dict[tuple[str, int], int]) -> None:
    write_lines(path, (f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())))


def read_offsets(path: str) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for parts in read_lines(path):
        if len(parts) != 3:
            raise CheckpointError(f"{path}: malformed line {' '.join(parts)!r}")
        out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


def write_epochs(path: str, entries: list[tuple[int, int]]) -> None:
    write_lines(path, (f"{e} {o}" for e, o in entries))


def read_epochs(path: str) -> list[tuple[int, int]]:
    out = []
    for parts in read_lines(path):
        if len(parts) != 2:
            raise CheckpointError(f"{path}: malformed line {' '.join(parts)!r}")
        out.append((int(parts[0]), int(parts[1])))
    return out
