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

Writes go to `<file>.tmp`, are fsynced, then renamed over the file and the directory fsynced;
or, for files a broker rewrites per partition on the event loop (the leader-epoch checkpoint),
written in place when they do not shrink and fsynced later on a worker thread
(`overwrite_lines`).
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable, Iterable
from typing import cast

VERSION = 0


class CheckpointError(Exception):
    pass


def _text(entries: Iterable[str]) -> str:
    lines = list(entries)
    return f"{VERSION}\n{len(lines)}\n" + "".join(line + "\n" for line in lines)


def write_lines(path: str, entries: Iterable[str], sync: bool = True) -> None:
    """Replace the file atomically (a temporary file renamed over it); with `sync`, the file
    and its directory are fsynced before this returns, else the caller syncs them later
    (`sync_file`): a crash of the process loses nothing either way, a crash of the machine may
    leave the previous version."""
    text = _text(entries)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def overwrite_lines(path: str, entries: Iterable[str], known_size: int | None) -> int:
    """Write the file without a rename and without fsync (the caller syncs it later), and
    return its new size. A text at least as long as the file (`known_size`, or None: stat it)
    is written over it in place with one `pwrite`, which a killed process either made or did
    not: about 6 us, where a rename over the old file costs ext4 ~130 us (it starts the new
    file's writeback) and now and then milliseconds. A shorter text takes `write_lines`. A
    file that does not exist yet (a new partition's) is created with the text in one `write`:
    no temporary file and no rename, one metadata change instead of three."""
    data = _text(entries).encode()
    if known_size is None:
        try:
            known_size = os.stat(path).st_size
        except FileNotFoundError:
            if _create(path, data):
                return len(data)
            known_size = 0
    if len(data) < known_size or known_size == 0:
        _replace(path, data)
        return len(data)
    fd = os.open(path, os.O_WRONLY)
    try:
        written = os.pwrite(fd, data, 0)
        if written != len(data):
            raise OSError(errno.EIO, f"short write of {path}")
    finally:
        os.close(fd)
    return len(data)


def create_lines(path: str, entries: Iterable[str]) -> int | None:
    """Create the file holding the entries in one write, not fsynced (the caller syncs it or
    its directory later); its size, or None if it exists already (left as it is)."""
    data = _text(entries).encode()
    return len(data) if _create(path, data) else None


def _create(path: str, data: bytes) -> bool:
    """Create `path` holding `data` (one write: a killed process made it whole or left it
    empty); False if it exists after all."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(errno.EIO, f"short write of {path}")
    finally:
        os.close(fd)
    return True


def _replace(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def load_syncfs() -> Callable[[int], int] | None:
    """libc's syncfs(2) (one call writes back every file of a file system), or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return cast(Callable[[int], int], libc.syncfs)
    except (OSError, AttributeError):
        return None


_syncfs = load_syncfs()


def syncfs(directory: str) -> bool:
    """Sync the whole file system holding `directory` (OSError if that fails); False, with
    nothing done, where there is no syncfs."""
    if _syncfs is None:
        return False
    fd = os.open(directory, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs of {directory}: {os.strerror(err)}")
    finally:
        os.close(fd)
    return True


def sync_file(path: str) -> None:
    """fsync a file written with `sync=False`, then its directory (a missing file: nothing)."""
    if fsync_if_exists(path):
        fsync_dir(os.path.dirname(path) or ".")


def fsync_if_exists(path: str) -> bool:
    """fsync a file or directory; False (nothing done) if it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


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


def write_epochs(path: str, entries: list[tuple[int, int]], sync: bool = True) -> None:
    write_lines(path, (f"{e} {o}" for e, o in entries), sync)


def overwrite_epochs(path: str, entries: list[tuple[int, int]], known_size: int | None) -> int:
    return overwrite_lines(path, (f"{e} {o}" for e, o in entries), known_size)


def read_epochs(path: str) -> list[tuple[int, int]]:
    out = []
    for parts in read_lines(path):
        if len(parts) != 2:
            raise CheckpointError(f"{path}: malformed line {' '.join(parts)!r}")
        out.append((int(parts[0]), int(parts[1])))
    return out
