"""The simulated disk under a broker's real log files: which bytes of each segment file a crash
keeps.

The logs write through the OS (page cache): on a real machine everything written survives a
process crash, and only a power loss or a kernel crash drops what was not fsynced. The
simulation takes the harsher case for every crash: the bytes of a `.log` file past its durable
size are lost, or (a torn write, `torn_rate`) a random prefix of them is kept, which may end
inside a batch; recovery (the real loader, at the next start) then cuts the log at the first
bad batch.

Durable sizes come from the driver: after each flush of the logs it calls `mark_durable`, which
records every segment file's size. A truncation makes the file shorter at once (a truncate is
metadata the file system journals); bytes written after it are new, so the durable size of a
truncated log's files drops to what they hold then (`on_truncation`). Checkpoint files, the
leader-epoch checkpoint and producer snapshots are written whole and fsynced by the storage
code itself: a crash keeps them as they are.
"""

from __future__ import annotations

import os
import random

from gregor.storage.log_manager import LogManager


def _segment_files(logs: LogManager) -> list[str]:
    out = []
    for _tp, log_ in logs.partitions():
        out += [seg.log_path for seg in log_.segments]
    return out


class FileDisk:
    def __init__(self, root: str) -> None:
        self.root = root
        self.durable: dict[str, int] = {}  # segment file -> bytes that survive a crash

    def mark_durable(self, logs: LogManager) -> None:
        """Everything in the logs' segment files now is durable (they were just flushed)."""
        for path in _segment_files(logs):
            self.durable[path] = _size(path)

    def on_truncation(self, logs: LogManager, topic: str, index: int) -> None:
        log_ = logs.get(topic, index)
        if log_ is None:
            return
        directory = log_.directory
        for path, size in list(self.durable.items()):
            if os.path.dirname(path) == directory:
                self.durable[path] = min(size, _size(path))

    def crash(self, rng: random.Random, torn_rate: float) -> int:
        """Cut every segment file under the root to what a crash keeps; the bytes lost."""
        lost = 0
        for directory, _dirs, files in sorted(os.walk(self.root)):
            for name in sorted(files):
                if not name.endswith(".log"):
                    continue
                path = os.path.join(directory, name)
                size = _size(path)
                keep = self.durable.get(path, 0)
                if size <= keep:
                    continue
                if rng.random() < torn_rate:
                    keep += rng.randrange(size - keep + 1)
                if keep < size:
                    os.truncate(path, keep)
                    lost += size - keep
        return lost


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0
