"""Producer ids, handed out from blocks reserved in the metadata (as Kafka's controller does with
AllocateProducerIds: a ProducerIdsRecord), so an id is never given twice, even across a crash: a
block is committed before its first id is used, and a restart starts a fresh block."""

from __future__ import annotations

from typing import Protocol


class ProducerIdAllocator(Protocol):
    def allocate_producer_ids(self, count: int) -> int:
        """Reserve `count` ids durably; the first."""
        ...


BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, store: ProducerIdAllocator, block_size: int = BLOCK_SIZE) -> None:
        self.store = store
        self.block_size = block_size
        self._next = 0
        self._end = 0

    def next_id(self) -> int:
        if self._next >= self._end:
            self._next = self.store.allocate_producer_ids(self.block_size)
            self._end = self._next + self.block_size
        pid = self._next
        self._next += 1
        return pid
