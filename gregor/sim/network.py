"""The simulated network: per-message delay, drops, duplicates (which with random delays also
reorder), partitions that cut links both ways, and slow nodes whose links are slower.

Messages belong to connections: a message is delivered only if neither end has restarted since
it was sent (a restart closes its connections, so no answer reaches a request's new incarnation
and no old request reaches a restarted node), and only if the link is not cut when it arrives.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace


@dataclass
class NetworkConfig:
    min_delay_ms: int = 1
    max_delay_ms: int = 10
    drop_rate: float = 0.0
    duplicate_rate: float = 0.0
    slow_extra_ms: tuple[int, int] = (50, 400)


@dataclass
class Partition:
    partition_id: int
    blocked: frozenset[tuple[int, int]]
    description: str


@dataclass
class Network:
    rng: random.Random
    config: NetworkConfig
    partitions: dict[int, Partition] = field(default_factory=dict)
    slow: dict[int, int] = field(default_factory=dict)  # node -> slowness token
    _next_partition: int = 0

    def blocked(self, src: int, dst: int) -> bool:
        if not self.partitions:  # (most of a run: checked for every message)
            return False
        link = (src, dst)
        return any(link in p.blocked for p in self.partitions.values())

    def cut(self, groups: list[list[int]], description: str) -> Partition:
        """Cut every link between different groups (nodes in no group keep all links)."""
        blocked = set()
        for i, a in enumerate(groups):
            for b in groups[i + 1 :]:
                for x in a:
                    for y in b:
                        blocked.add((x, y))
                        blocked.add((y, x))
        self._next_partition += 1
        part = Partition(self._next_partition, frozenset(blocked), description)
        self.partitions[part.partition_id] = part
        return part

    def heal(self, partition_id: int | None = None) -> None:
        if partition_id is None:
            self.partitions.clear()
        else:
            self.partitions.pop(partition_id, None)

    def calm(self) -> None:
        """The end of the faults: every cut healed, no slow node, no message lost or doubled."""
        self.heal()
        self.slow.clear()
        self.config = replace(self.config, drop_rate=0.0, duplicate_rate=0.0)

    def delays(self, src: int, dst: int) -> list[int]:
        """Delivery delays for one message: [] if dropped, two if duplicated."""
        rng, config = self.rng, self.config
        if self.blocked(src, dst) or rng.random() < config.drop_rate:
            return []
        copies = 2 if rng.random() < config.duplicate_rate else 1
        lo, hi = config.min_delay_ms, config.max_delay_ms
        slow = bool(self.slow) and (src in self.slow or dst in self.slow)
        if copies == 1 and not slow:
            return [rng.randint(lo, hi)]
        out = []
        for _ in range(copies):
            delay = rng.randint(lo, hi)
            if slow:
                delay += rng.randint(*config.slow_extra_ms)
            out.append(delay)
        return out
