"""What a leader knows about its epoch: each replica's fetch position, the high watermark, and
whether a majority still fetches (check-quorum).

High watermark: the largest offset that a majority of voters have durably (the leader counts
with its flushed end offset, a follower with the fetch offset of its last valid fetch, which it
sends only after flushing). It moves only forwards, and only once it is above the epoch start
offset: the leader writes a control batch at that offset when it is elected, and until a
majority holds it an entry of an older epoch is not known to be safe (the Raft paper's
Figure 8; Kafka's LeaderState.maybeUpdateHighWatermark). With 5 voters whose end offsets are
[12, 12, 9, 7, 3], sorted descending the third (index 5 // 2 = 2) is 9: three voters hold
everything below 9, so the high watermark becomes 9 if 9 > epoch start offset.

Check-quorum: the leader resigns when, for `check_quorum_timeout_ms` (1.5 x the fetch timeout),
fewer than a majority of voters (itself included) fetched from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gregor.raft.config import RaftConfig
from gregor.raft.messages import ReplicaDescription

NEVER = 1 << 62  # a deadline that does not come


@dataclass(slots=True)
class ReplicaState:
    replica_id: int
    end_offset: int = -1  # the fetch offset of its last valid fetch in this epoch
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    leader_end_at_last_fetch: int = -1

    def describe(self) -> ReplicaDescription:
        return ReplicaDescription(
            self.replica_id, self.end_offset, self.last_fetch_ms, self.last_caught_up_ms
        )


class LeaderState:
    def __init__(
        self,
        local_id: int,
        epoch: int,
        epoch_start_offset: int,
        voters: Sequence[int],
        now_ms: int,
        config: RaftConfig,
    ) -> None:
        self.local_id = local_id
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset
        self.config = config
        self.voters = {v: ReplicaState(v) for v in voters}
        self.observers: dict[int, ReplicaState] = {}
        self.high_watermark: int | None = None
        self.majority = len(self.voters) // 2 + 1
        self._fetched_voters: set[int] = set()
        single = len(self.voters) == 1
        self.check_quorum_deadline_ms = NEVER if single else now_ms + config.check_quorum_timeout_ms
        self.begin_quorum_deadline_ms = now_ms  # BeginQuorumEpoch goes out at once, then repeats

    def update_local(self, flushed_end_offset: int, now_ms: int) -> bool:
        """The leader's own durable end offset moved; True if the high watermark moved."""
        me = self.voters[self.local_id]
        me.end_offset = max(me.end_offset, flushed_end_offset)
        me.last_fetch_ms = me.last_caught_up_ms = now_ms
        return self._maybe_update_high_watermark()

    def update_replica(
        self, replica_id: int, fetch_offset: int, leader_end_offset: int, now_ms: int
    ) -> bool:
        """A valid fetch at `fetch_offset`; True if the high watermark moved."""
        state = self.voters.get(replica_id)
        if state is None:
            state = self.observers.setdefault(replica_id, ReplicaState(replica_id))
        # caught up: at the leader's end now, or at least where the leader was at its last fetch
        if fetch_offset >= leader_end_offset:
            state.last_caught_up_ms = now_ms
        elif state.last_fetch_ms >= 0 and fetch_offset >= state.leader_end_at_last_fetch:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.end_offset = fetch_offset
        state.last_fetch_ms = now_ms
        state.leader_end_at_last_fetch = leader_end_offset
        return replica_id in self.voters and self._maybe_update_high_watermark()

    def _maybe_update_high_watermark(self) -> bool:
        ends = sorted([s.end_offset for s in self.voters.values()], reverse=True)
        candidate = ends[len(ends) // 2]
        if candidate <= self.epoch_start_offset:
            return False
        if self.high_watermark is not None and candidate <= self.high_watermark:
            return False
        self.high_watermark = candidate
        return True

    def record_voter_fetch(self, replica_id: int, now_ms: int) -> None:
        """A Fetch or FetchSnapshot from `replica_id` in this epoch (check-quorum)."""
        if replica_id not in self.voters or replica_id == self.local_id:
            return
        self._fetched_voters.add(replica_id)
        if len(self._fetched_voters) + 1 >= self.majority:
            self._fetched_voters.clear()
            self.check_quorum_deadline_ms = now_ms + self.config.check_quorum_timeout_ms

    def successors(self) -> tuple[int, ...]:
        """The other voters, most caught-up first (EndQuorumEpoch's preferred successors)."""
        others = [s for s in self.voters.values() if s.replica_id != self.local_id]
        others.sort(key=lambda s: (-s.end_offset, s.replica_id))
        return tuple(s.replica_id for s in others)

    def describe(
        self, now_ms: int
    ) -> tuple[tuple[ReplicaDescription, ...], tuple[ReplicaDescription, ...]]:
        """Voters and observers; the leader itself is fetching and caught up `now_ms` (as
        Kafka's DescribeQuorum reports its leader)."""
        me = self.voters[self.local_id]
        me.last_fetch_ms = me.last_caught_up_ms = max(me.last_fetch_ms, now_ms)
        voters = tuple(self.voters[v].describe() for v in sorted(self.voters))
        observers = tuple(self.observers[o].describe() for o in sorted(self.observers))
        return voters, observers
