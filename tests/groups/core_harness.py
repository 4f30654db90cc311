"""Drive a `GroupCoordinatorShard` by hand, as the runtime does: every operation's records are
kept in `log` (encoded and decoded again, as they would be on disk) and replayed, then the
completions are delivered. Time is whatever the test says it is.

    h = Harness(GroupConfig(initial_rebalance_delay_ms=0))
    p = h.join("g", member_id="")            # a JoinResult, or a Pending
    h.advance(1000)                           # move the clock and run due timers
"""

from __future__ import annotations

import random
from typing import Any

from gregor.coordinator.group.records import Record, decode, encode
from gregor.coordinator.group.results import (
    JoinRequest,
    JoinResult,
    OffsetCommitRequest,
    SyncRequest,
    SyncResult,
)
from gregor.coordinator.group.shard import GroupConfig, GroupCoordinatorShard
from gregor.replication.pending import Pending

PROTOCOLS = [
    ("range", b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff")
]  # consumer v0: topics ["t"]


class Harness:
    def __init__(
        self, config: GroupConfig | None = None, seed: int = 1, now_ms: int = 1_000_000
    ) -> None:
        self.config = config or GroupConfig(initial_rebalance_delay_ms=0)
        self.now = now_ms
        self.seed = seed
        self.shard = GroupCoordinatorShard(0, self.config, random.Random(seed))
        self.shard.on_loaded(self.now)
        self.log: list[Record] = []
        self.completed: list[tuple[Pending, Any]] = []

    # -- the runtime's part ---------------------------------------------------------------------

    def _commit(self, records: list[Record]) -> None:
        for r in records:
            key, value = encode(r)
            again = decode(key, value)
            assert again == r, f"record does not survive encoding: {r} != {again}"
            self.log.append(again)
            self.shard.replay(again)
        done = self.shard.take_completions()
        for pending, value in done:
            pending.complete(value)
        self.completed += done

    def _settle(self) -> None:
        while (d := self.shard.next_deadline_ms()) is not None and d <= self.now:
            self._commit(self.shard.poll(self.now))

    def run(self, step: tuple[list[Record], Any]) -> Any:
        records, result = step
        self._commit(records)
        self._settle()
        return result

    def advance(self, ms: int) -> None:
        """Move the clock forward, running every timer in order at its own deadline."""
        end = self.now + ms
        while (d := self.shard.next_deadline_ms()) is not None and d <= end:
            self.now = max(self.now, d)
            self._commit(self.shard.poll(self.now))
        self.now = end

    def reload(self) -> GroupCoordinatorShard:
        """A new shard made by replaying the log, as a broker restart does."""
        shard = GroupCoordinatorShard(0, self.config, random.Random(self.seed + 1))
        for r in self.log:
            shard.replay(r)
        shard.on_loaded(self.now)
        self.shard = shard
        return shard

    # -- requests -------------------------------------------------------------------------------

    def join(
        self,
        group: str,
        member_id: str = "",
        *,
        instance: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        version: int = 9,
        client_id: str = "client",
        protocol_type: str = "consumer",
    ) -> JoinResult | Pending:
        r = JoinRequest(
            group,
            member_id,
            instance,
            client_id,
            "/127.0.0.1",
            session_ms,
            rebalance_ms,
            protocol_type,
            protocols if protocols is not None else PROTOCOLS,
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )
        return self.run(self.shard.join_group(r, self.now))

    def join_new(self, group: str, **kw: Any) -> JoinResult | Pending:
        """A dynamic member's first JoinGroup pair: MEMBER_ID_REQUIRED, then with its id."""
        first = self.join(group, **kw)
        assert isinstance(first, JoinResult) and first.error == 79, first
        return self.join(group, first.member_id, **kw)

    def sync(
        self,
        group: str,
        generation: int,
        member_id: str,
        assignments: dict[str, bytes] | None = None,
        instance: str | None = None,
    ) -> SyncResult | Pending:
        r = SyncRequest(group, generation, member_id, instance, "consumer", None, assignments or {})
        return self.run(self.shard.sync_group(r, self.now))

    def heartbeat(
        self, group: str, generation: int, member_id: str, instance: str | None = None
    ) -> int:
        return self.run(self.shard.heartbeat(group, generation, member_id, instance, self.now))

    def leave(self, group: str, *members: tuple[str, str | None]) -> Any:
        return self.run(self.shard.leave_group(group, list(members), self.now))

    def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
        retention_ms: int = -1,
        version: int = 9,
        metadata: str | None = "",
    ) -> Any:
        r = OffsetCommitRequest(
            group,
            generation,
            member_id,
            instance,
            retention_ms,
            [(t, p, o, -1, metadata) for (t, p), o in offsets.items()],
            version,
        )
        return self.run(self.shard.commit_offsets(r, self.now))

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        res = self.shard.fetch_offsets(group, None)
        return {(o.topic, o.partition): o.offset for o in res.offsets}


def value(p: Any) -> Any:
    """The answer: itself, or a completed Pending's value (fails if still pending)."""
    if isinstance(p, Pending):
        assert p.done, f"{p} is still waiting"
        return p.value
    return p
