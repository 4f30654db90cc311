"""A classic consumer group: its members, its generation, and its state machine.

States and what each answers (Kafka's ClassicGroupState)::

    Empty                no members; the group lingers for its committed offsets.
                         JoinGroup: starts a rebalance. SyncGroup/Heartbeat: UNKNOWN_MEMBER_ID.
                         OffsetCommit: only with generation -1 (admin tools, standalone consumers).
    PreparingRebalance   waiting for every member to (re)join; JoinGroup requests are parked.
                         Heartbeat/SyncGroup: REBALANCE_IN_PROGRESS.
    CompletingRebalance  the new generation is made; waiting for the leader's assignment.
                         Followers' SyncGroup requests are parked; OffsetCommit:
                         REBALANCE_IN_PROGRESS.
    Stable               every member has its assignment. SyncGroup returns it again;
                         Heartbeat answers NONE.
    Dead                 the group is being removed (its tombstone is replayed).

Transitions (to <- from; anything else is a bug and raises)::

    Empty               <- PreparingRebalance             (every member left or timed out)
    PreparingRebalance  <- Empty                          (a first member joins)
                        <- CompletingRebalance, Stable    (a member joins, leaves, changes its
                                                           protocols, or misses its session)
    CompletingRebalance <- PreparingRebalance             (all members rejoined, or the rebalance
                                                           timeout passed)
    Stable              <- CompletingRebalance            (the leader's assignment is written)
    Dead                <- any                            (the group is deleted)

`ClassicGroup.transition_to` is the one place a state changes. A group rebuilt from its
GroupMetadataValue record (loading) is created directly in Empty or Stable, as Kafka does.

This module holds data and the rules that only look at one group; what happens in response to
requests and timers is `shard.py`.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass

from gregor.coordinator.group import codes
from gregor.coordinator.group.records import GroupMetadataValue, subscribed_topics
from gregor.coordinator.group.results import JoinedMember
from gregor.replication.pending import Pending

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# state -> the states it may be entered from
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({EMPTY, COMPLETING_REBALANCE, STABLE}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset(GroupState),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's order of preference
    assignment: bytes = b""
    join: Pending | None = None  # a parked JoinGroup
    sync: Pending | None = None  # a parked SyncGroup
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync is not None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        """Whether a session expiry should spare this member: a new member never is; one parked
        in a JoinGroup or SyncGroup is (it cannot heartbeat meanwhile)."""
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync


class ClassicGroup:
    def __init__(self, group_id: str, now_ms: int, state: GroupState = EMPTY) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state: GroupState | None = None
        self.current_state_timestamp_ms: int | None = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_members: set[str] = set()  # ids handed out with MEMBER_ID_REQUIRED
        self.pending_sync: set[str] = set()  # members yet to send SyncGroup this generation
        self.supported_protocols: Counter[str] = Counter()
        self.awaiting_join_count = 0
        self.new_member_added = False  # extends the initial rebalance delay
        self.subscribed: set[str] | None = None  # the consumer protocol's topics, when known

    # -- the state machine ----------------------------------------------------------------------

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"group {self.group_id}: {self.state} -> {state} is not allowed"
            )
        self.previous_state = self.state
        self.state = state
        self.current_state_timestamp_ms = now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[PREPARING_REBALANCE]

    # -- members --------------------------------------------------------------------------------

    def add(self, member: Member, join: Pending | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(
                    f"static member {member.group_instance_id} is already in {self.group_id}"
                )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(name for name, _ in member.protocols)
        member.join = join
        if join is not None:
            self.awaiting_join_count += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(name for name, _ in member.protocols)
            if member.awaiting_join:
                self.awaiting_join_count -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)
        return member

    def update_member(
        self,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join: Pending | None,
    ) -> Pending | None:
        """Take the member's new protocols and timeouts and park its JoinGroup; returns a
        JoinGroup it had parked before (the caller answers it), if any."""
        self.supported_protocols.subtract(name for name, _ in member.protocols)
        member.protocols = protocols
        self.supported_protocols.update(name for name, _ in protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        previous = member.join
        if join is not None and previous is None:
            self.awaiting_join_count += 1
        elif join is None and previous is not None:
            self.awaiting_join_count -= 1
        member.join = join
        return previous

    def take_join(self, member: Member) -> Pending | None:
        """The member's parked JoinGroup, no longer parked."""
        pending, member.join = member.join, None
        if pending is not None:
            self.awaiting_join_count -= 1
        return pending

    def take_sync(self, member: Member) -> Pending | None:
        pending, member.sync = member.sync, None
        return pending

    def replace_static_member(
        self, instance_id: str, old_id: str, new_id: str
    ) -> tuple[Member, Member]:
        """A static member restarted: the same member (protocols, assignment) under a new id.
        Returns (old, new); the caller fences what the old one had parked."""
        old = self.members.pop(old_id)
        if old.awaiting_join:
            self.awaiting_join_count -= 1
        new = Member(
            new_id,
            old.group_instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type,
            list(old.protocols),
            old.assignment,
        )
        self.members[new_id] = new
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return old, new

    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        """NONE, or the error for a request naming this member (KIP-345 fencing first)."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return codes.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return codes.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return codes.UNKNOWN_MEMBER_ID
        return codes.NONE

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.awaiting_join_count and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False if none did."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join:
            return True
        for m in self.members.values():
            if m.awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    # -- protocols ------------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state is EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(name, 0) == n for name in names
        )

    def select_protocol(self) -> str:
        """The protocol every member supports with the most first-choice votes (ties: the first
        one voted for, in member order)."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda name: votes[name])

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            t = subscribed_topics(m.metadata(self.protocol_name))
            if t is None:
                return None
            topics |= t
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        if self.subscribed is None:
            return self.uses_consumer_protocol()
        return topic in self.subscribed

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed = self.compute_subscribed_topics()
            self.transition_to(EMPTY, now_ms)
        self.pending_sync.clear()

    def joined_members(self) -> list[JoinedMember]:
        """What the leader's JoinGroup response lists: every member and its metadata for the
        selected protocol."""
        return [
            (m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        ]

    def assignments(self) -> dict[str, bytes]:
        return {mid: m.assignment for mid, m in self.members.items()}

    # -- records --------------------------------------------------------------------------------

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        """The group as its GroupMetadataValue describes it: Stable with its members, or Empty."""
        ts = value.current_state_timestamp_ms if value.current_state_timestamp_ms >= 0 else None
        group = cls(group_id, 0, STABLE if value.members else EMPTY)
        group.current_state_timestamp_ms = ts
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        for m in value.members:
            group.add(
                Member(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    value.protocol_type,
                    [(value.protocol or "", m.subscription)],
                    m.assignment,
                )
            )
        group.protocol_type = value.protocol_type or None
        group.leader_id = (
            value.leader if value.leader in group.members else next(iter(group.members), None)
        )
        group.subscribed = group.compute_subscribed_topics()
        return group
