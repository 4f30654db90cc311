"""What the group and the transaction coordinator do alike over their `CoordinatorRuntime`
(as Kafka's GroupCoordinatorService and TransactionCoordinatorService both front one runtime):
the wakeup, where a key lives, and the config kept in step with the broker's.

Invariant: the adapter and every shard hold the same config, the last `_read_config` returned
that differed from the one before (`refresh_config`, called at each poll).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from gregor.coordinator.common.runtime import CoordinatorRuntime, CoordinatorShard

C = TypeVar("C")


class ConfiguredShard(CoordinatorShard[Any], Protocol):
    """A shard that reads its coordinator's config."""

    config: Any


class ConfiguredAdapter(Protocol[C]):
    """The part of a `ShardAdapter` that holds the config it gives new shards."""

    config: C


S = TypeVar("S", bound=ConfiguredShard)
R = TypeVar("R")


class CoordinatorService(Generic[S, R, C]):
    """The base of a coordinator's API: subclasses set `runtime` and `adapter` and say how to
    read their config."""

    runtime: CoordinatorRuntime[S, R]
    adapter: ConfiguredAdapter[C]

    def _read_config(self) -> C:
        raise NotImplementedError

    @property
    def wakeup(self) -> Callable[[], None] | None:
        """Called when the next poll must come sooner than the deadline `poll` returned, or
        work arrives outside an operation (a late marker answer)."""
        return self.runtime.wakeup

    @wakeup.setter
    def wakeup(self, wakeup: Callable[[], None] | None) -> None:
        self.runtime.wakeup = wakeup

    @property
    def config(self) -> C:
        return self.adapter.config

    def refresh_config(self) -> None:
        config = self._read_config()
        if config != self.adapter.config:
            self.adapter.config = config
            for ctx in self.runtime.contexts.values():
                ctx.shard.config = config

    @property
    def num_partitions(self) -> int | None:
        return self.runtime.num_partitions

    def partition_for(self, key: str) -> int:
        return self.runtime.partition_for(key)

    def coordinator_error(self, key: str) -> int:
        """NONE if this broker coordinates `key` and has loaded its partition."""
        return self.runtime.locate(key)[0]

    def is_leader_for(self, key: str) -> bool:
        return self.runtime.is_leader_for(key)


def same(code: int) -> int:
    """An error code answered as it is (the `failed` of an operation whose answer is a code)."""
    return code
