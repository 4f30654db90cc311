"""The simulated disk of one node: its Raft log and its quorum-state store, which outlive the
node's crashes.

A crash keeps everything flushed and, of the batches written since the last flush, only what
the disk happened to write: nothing (half the time), or a random prefix of them; a write torn
inside a batch loses that batch and every later one, as recovery cuts the log at the first bad
batch. Truncation, snapshots and quorum-state writes are durable when they return (the store
fsyncs; a snapshot is renamed into place after an fsync).
"""

from __future__ import annotations

import random

from gregor.raft.log import MemoryLog
from gregor.raft.store import MemoryQuorumStateStore


class SimLog(MemoryLog):
    def crash(self, rng: random.Random, torn_rate: float) -> int:
        """Lose what a crash loses; return how many unflushed batches were dropped."""
        first_unflushed = len(self.batches)
        for i, batch in enumerate(self.batches):
            if batch.next_offset > self.flushed_offset:
                first_unflushed = i
                break
        unflushed = len(self.batches) - first_unflushed
        keep = 0
        if unflushed and rng.random() < torn_rate:
            keep = rng.randrange(unflushed + 1)
        cut = first_unflushed + keep
        if cut < len(self.batches):
            self.truncate_to(self.batches[cut].base_offset)
        self.flush()
        return unflushed - keep


class SimStore(MemoryQuorumStateStore):
    """Writes are durable at once (they are small and fsynced before the node goes on)."""
