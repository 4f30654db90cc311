"""Which role this node plays in which epoch, and the one place that changes it.

States (entering Prospective or Resigned never changes the persisted election; the others may)::

    Unattached   epoch known, leader not. A voter waits a random election timeout, then turns
                 Prospective. "Voted" is Unattached with `voted_for` set: it has granted its one
                 vote of the epoch. An observer fetches from any voter to find the leader.
    Prospective  (KIP-996) asks the voters for pre-votes without bumping the epoch; it keeps the
                 leader and vote it had. A majority of pre-votes makes it a Candidate.
    Candidate    epoch + 1, voted for itself, asks for votes. A majority makes it the Leader.
    Leader       appends, serves Fetch, advances the high watermark (leader.py).
    Follower     fetches from the leader of its epoch.
    Resigned     was the leader of this epoch and stepped down (gracefully, after failing
                 check-quorum, or on restart); sends EndQuorumEpoch, never leads this epoch again.

Transitions (to <- from: why). Anything else raises IllegalTransition::

    Unattached  <- any            a higher epoch with no known leader
                <- Unattached     (same epoch) granting a vote: Unattached -> Voted
                <- Prospective    (same epoch) lost or timed out the pre-vote with no known
                                  leader, or granted a vote
                <- Follower       (same epoch) an observer whose fetch timed out
    Prospective <- Unattached     election timeout
                <- Follower       fetch timeout (or the EndQuorumEpoch backoff) expired
                <- Candidate      lost or timed out the election, after the backoff
                <- Resigned       election timeout
    Candidate   <- Prospective    a majority of pre-votes (epoch + 1)
    Leader      <- Candidate      a majority of votes
    Follower    <- any but Leader and Resigned: the leader of the same epoch is discovered
                <- any            the leader of a higher epoch is discovered
                <- Prospective    (same epoch) lost the pre-vote while a leader is known, or
                                  a voter's refusal named that leader as alive
    Resigned    <- Leader         resign() or check-quorum failure

Rules every transition keeps: the epoch never decreases; within one epoch `voted_for` and
`leader_id` are set at most once and never change. A change of the persisted `ElectionState`
is written to the store before the new state exists (`_transition`), so nothing is sent on its
behalf before it is durable.

An observer (not a voter) is only ever Unattached or Follower.

On start (`initialize`), as Kafka's QuorumState: the leader of the stored epoch restarts
Resigned (a lost unflushed tail must not be rewritten under the same epoch), a node that voted
for itself restarts Candidate, one that voted for another Unattached(voted), one that knew a
leader Follower; a log with a newer epoch than the store wins (Unattached in that epoch).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gregor.raft.config import RaftConfig
from gregor.raft.leader import NEVER, LeaderState
from gregor.raft.log import SnapshotId
from gregor.raft.store import ElectionState, QuorumStateStore

if TYPE_CHECKING:
    import random  # the type of the injected generator; the core never seeds or draws its own


class Kind(enum.Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"

    def __str__(self) -> str:
        return self.value


UNATTACHED = Kind.UNATTACHED
PROSPECTIVE = Kind.PROSPECTIVE
CANDIDATE = Kind.CANDIDATE
LEADER = Kind.LEADER
FOLLOWER = Kind.FOLLOWER
RESIGNED = Kind.RESIGNED

# state -> the states it may be entered from (any epoch); the epoch rules are in _check
VALID_PREVIOUS: dict[Kind, frozenset[Kind]] = {
    UNATTACHED: frozenset(Kind),
    PROSPECTIVE: frozenset({UNATTACHED, FOLLOWER, CANDIDATE, RESIGNED}),
    CANDIDATE: frozenset({PROSPECTIVE}),
    LEADER: frozenset({CANDIDATE}),
    FOLLOWER: frozenset(Kind),
    RESIGNED: frozenset({LEADER}),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass(slots=True)
class UnattachedState:
    election_deadline_ms: int


@dataclass(slots=True)
class ProspectiveState:
    election_deadline_ms: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)


@dataclass(slots=True)
class CandidateState:
    election_deadline_ms: int
    retries: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    backoff_until_ms: int | None = None  # set once the election is lost


@dataclass(slots=True)
class SnapshotDownload:
    snapshot_id: SnapshotId
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True)
class FollowerState:
    fetch_deadline_ms: int
    # A successful fetch from the leader since this state began, and the leader has not resigned:
    # such a follower refuses pre-votes (it has heard from a live leader within the fetch timeout).
    has_fetched: bool = False
    download: SnapshotDownload | None = None


@dataclass(slots=True)
class ResignedState:
    election_deadline_ms: int
    unacked: set[int]
    preferred_successors: tuple[int, ...]


StateData = (
    UnattachedState
    | ProspectiveState
    | CandidateState
    | FollowerState
    | ResignedState
    | LeaderState
)


class QuorumState:
    def __init__(
        self,
        local_id: int,
        voters: Sequence[int],
        store: QuorumStateStore,
        rng: random.Random,
        config: RaftConfig,
    ) -> None:
        self.local_id = local_id
        self.voters = tuple(sorted(set(voters)))
        self.store = store
        self.rng = rng
        self.config = config
        self.is_voter = local_id in self.voters
        self.kind = UNATTACHED
        self.election = ElectionState(0)
        self.data: StateData = UnattachedState(NEVER)
        self.transitions = 0  # counts state changes (the node resets its connections on each)

    # -- reading --------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.election.epoch

    @property
    def leader_id(self) -> int | None:
        return self.election.leader_id

    @property
    def voted_for(self) -> int | None:
        return self.election.voted_for

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def remote_voters(self) -> tuple[int, ...]:
        return tuple(v for v in self.voters if v != self.local_id)

    def random_election_timeout_ms(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self.rng.randrange(timeout) if timeout > 0 else 0

    def __repr__(self) -> str:
        e = self.election
        return f"{self.kind}(epoch={e.epoch}, leader={e.leader_id}, voted={e.voted_for})"

    # -- start ----------------------------------------------------------------------------------

    def initialize(self, log_last_epoch: int, now_ms: int) -> None:
        stored = self.store.read()
        election = stored if stored is not None else ElectionState(0)
        me = self.local_id
        timeout = now_ms + self.random_election_timeout_ms()
        kind: Kind
        data: StateData
        if election.epoch < log_last_epoch:
            kind, election, data = (
                UNATTACHED,
                ElectionState(log_last_epoch),
                UnattachedState(timeout),
            )
        elif self.is_voter and election.leader_id == me:
            kind, data = RESIGNED, ResignedState(timeout, set(self.remote_voters), ())
        elif self.is_voter and election.voted_for == me:
            kind, data = CANDIDATE, CandidateState(timeout, retries=1, granted={me})
        elif election.leader_id is not None and election.leader_id != me:
            kind, data = FOLLOWER, FollowerState(now_ms + self.config.fetch_timeout_ms)
        else:
            kind, data = UNATTACHED, UnattachedState(timeout)
        if not self.is_voter and kind is UNATTACHED:
            data = UnattachedState(NEVER)
        if election != stored:
            self.store.write(election)
        self.kind, self.election, self.data = kind, election, data

    # -- transitions ----------------------------------------------------------------------------

    def _check(self, kind: Kind, election: ElectionState) -> None:
        old, new = self.election, election
        if self.kind not in VALID_PREVIOUS[kind]:
            raise IllegalTransition(f"{self!r} -> {kind}")
        if new.epoch < old.epoch:
            raise IllegalTransition(f"{self!r} -> {kind} in older epoch {new.epoch}")
        if kind is CANDIDATE and new.epoch != old.epoch + 1:
            raise IllegalTransition(f"{self!r} -> Candidate must bump the epoch by one")
        if new.epoch > old.epoch:
            if kind not in (UNATTACHED, FOLLOWER, CANDIDATE):
                raise IllegalTransition(f"{self!r} -> {kind} cannot change the epoch")
            return
        if kind in (LEADER, RESIGNED, PROSPECTIVE):
            pass  # same epoch by construction
        elif kind is FOLLOWER:
            if self.kind in (LEADER, RESIGNED) or (
                self.kind is FOLLOWER and old.leader_id == new.leader_id
            ):
                raise IllegalTransition(
                    f"{self!r} -> Follower of {new.leader_id} in the same epoch"
                )
        elif kind is UNATTACHED:
            voting = self.kind is UNATTACHED and old.voted_for is None and new.voted_for is not None
            observer_timeout = self.kind is FOLLOWER and not self.is_voter
            if not (voting or observer_timeout or self.kind is PROSPECTIVE):
                raise IllegalTransition(f"{self!r} -> Unattached in the same epoch")
        # Within an epoch a vote and a leader, once known, stay (observers may forget a leader).
        if old.voted_for is not None and new.voted_for != old.voted_for:
            raise IllegalTransition(f"{self!r}: the vote of epoch {old.epoch} cannot change")
        if old.leader_id is not None and new.leader_id != old.leader_id and self.is_voter:
            raise IllegalTransition(f"{self!r}: the leader of epoch {old.epoch} cannot change")

    def _transition(self, kind: Kind, election: ElectionState, data: StateData) -> None:
        """The one place the state changes: check, persist if the election changed, switch."""
        self._check(kind, election)
        if election != self.election:
            self.store.write(election)
        self.kind, self.election, self.data = kind, election, data
        self.transitions += 1

    def to_unattached(self, epoch: int, now_ms: int) -> None:
        """A higher epoch whose leader is unknown."""
        deadline = now_ms + self.random_election_timeout_ms() if self.is_voter else NEVER
        self._transition(UNATTACHED, ElectionState(epoch), UnattachedState(deadline))

    def to_voted(self, epoch: int, candidate: int, now_ms: int) -> None:
        """Grant this epoch's vote to `candidate` (the election timer restarts, as Kafka's)."""
        if candidate == self.local_id or not self.is_voter:
            raise IllegalTransition(f"{self!r}: cannot vote for {candidate}")
        base = self.election if epoch == self.epoch else ElectionState(epoch)
        election = ElectionState(epoch, base.leader_id, candidate)
        self._transition(
            UNATTACHED, election, UnattachedState(now_ms + self.random_election_timeout_ms())
        )

    def to_unattached_same_epoch(self, now_ms: int) -> None:
        """A lost pre-vote with no known leader, or an observer that lost its leader."""
        election = (
            self.election if self.is_voter else ElectionState(self.epoch, None, self.voted_for)
        )
        deadline = now_ms + self.random_election_timeout_ms() if self.is_voter else NEVER
        self._transition(UNATTACHED, election, UnattachedState(deadline))

    def to_prospective(self, now_ms: int) -> None:
        deadline = now_ms + self.random_election_timeout_ms()
        self._transition(
            PROSPECTIVE, self.election, ProspectiveState(deadline, granted={self.local_id})
        )

    def to_candidate(self, now_ms: int, retries: int = 1) -> None:
        """`retries`: elections lost in a row before this one (it sizes the backoff)."""
        election = ElectionState(self.epoch + 1, None, self.local_id)
        deadline = now_ms + self.random_election_timeout_ms()
        self._transition(
            CANDIDATE, election, CandidateState(deadline, retries, granted={self.local_id})
        )

    def to_leader(self, leader_state: LeaderState) -> None:
        if not isinstance(self.data, CandidateState) or len(self.data.granted) < self.majority:
            raise IllegalTransition(f"{self!r} -> Leader without a majority of votes")
        election = ElectionState(self.epoch, self.local_id, self.local_id)
        self._transition(LEADER, election, leader_state)

    def to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        if leader_id == self.local_id:
            raise IllegalTransition(f"{self!r}: cannot follow itself")
        voted = self.voted_for if epoch == self.epoch else None
        election = ElectionState(epoch, leader_id, voted)
        self._transition(FOLLOWER, election, FollowerState(now_ms + self.config.fetch_timeout_ms))

    def to_resigned(self, now_ms: int, preferred_successors: tuple[int, ...]) -> None:
        deadline = now_ms + self.random_election_timeout_ms()
        data = ResignedState(deadline, set(self.remote_voters), preferred_successors)
        self._transition(RESIGNED, self.election, data)

    # -- votes ----------------------------------------------------------------------------------

    def can_grant_vote(self, candidate: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        """Whether this node, in its current state and epoch, grants `candidate` a (pre-)vote.

        The request's epoch is not older than ours; a standard vote from a newer epoch has
        already moved us to Unattached in that epoch. `log_up_to_date`: the candidate's (last
        epoch, end offset) is at least ours.

          standard vote  only Unattached or Prospective, with no vote in this epoch (or one for
                         this same candidate, granted again) and no known leader, to an
                         up-to-date log;
          pre-vote       to an up-to-date log, in any state but Leader; a Follower only while
                         it has not fetched from its leader since it began following (a live
                         leader answered it within the fetch timeout; EndQuorumEpoch resets it).
        """
        if not self.is_voter or candidate == self.local_id:
            return False
        kind = self.kind
        if pre_vote:
            if kind is LEADER:
                return False
            if kind is FOLLOWER:
                assert isinstance(self.data, FollowerState)
                return not self.data.has_fetched and log_up_to_date
            return log_up_to_date
        if kind in (UNATTACHED, PROSPECTIVE):
            if self.voted_for is not None:
                return self.voted_for == candidate
            if self.leader_id is not None:
                return False
            return log_up_to_date
        return False  # Candidate and Leader voted for themselves; a Follower has a leader
