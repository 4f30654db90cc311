"""The transition table: the legal moves, and the refusals."""

from __future__ import annotations

import random

import pytest

from gregor.raft.config import RaftConfig
from gregor.raft.leader import LeaderState
from gregor.raft.quorum_state import CANDIDATE, FOLLOWER, IllegalTransition, Kind, QuorumState
from gregor.raft.store import ElectionState, MemoryQuorumStateStore


def quorum(election: ElectionState | None = None, local_id: int = 1) -> QuorumState:
    q = QuorumState(
        local_id, (1, 2, 3), MemoryQuorumStateStore(election), random.Random(0), RaftConfig()
    )
    q.initialize(0, 0)
    return q


def leader_state(q: QuorumState) -> LeaderState:
    return LeaderState(q.local_id, q.epoch, 0, q.voters, 0, RaftConfig())


def test_the_election_path():
    q = quorum()
    q.to_prospective(0)
    assert (q.kind, q.epoch) == (Kind.PROSPECTIVE, 0)
    q.to_candidate(0)
    assert (q.kind, q.election) == (CANDIDATE, ElectionState(1, None, 1))
    q.data.granted.add(2)
    q.to_leader(leader_state(q))
    assert (q.kind, q.election) == (Kind.LEADER, ElectionState(1, 1, 1))
    q.to_resigned(0, (2, 3))
    assert (q.kind, q.election) == (Kind.RESIGNED, ElectionState(1, 1, 1))
    assert q.store.writes == [ElectionState(0), ElectionState(1, None, 1), ElectionState(1, 1, 1)]


def test_no_leader_without_a_majority():
    q = quorum()
    q.to_prospective(0)
    q.to_candidate(0)
    with pytest.raises(IllegalTransition):
        q.to_leader(leader_state(q))


@pytest.mark.parametrize(
    "move",
    [
        lambda q: q.to_leader(leader_state(q)),  # Unattached -> Leader
        lambda q: q.to_candidate(0),  # Unattached -> Candidate, skipping the pre-vote
        lambda q: q.to_resigned(0, ()),
        lambda q: q.to_unattached(q.epoch, 0),  # same epoch, no vote granted
        lambda q: q.to_unattached(q.epoch - 1, 0),  # back in time
        lambda q: q.to_follower(q.epoch, 1, 0),  # following itself
    ],
)
def test_illegal_moves_from_unattached(move):
    q = quorum(ElectionState(4))
    with pytest.raises(IllegalTransition):
        move(q)
    assert (q.kind, q.election) == (Kind.UNATTACHED, ElectionState(4))


def test_a_vote_and_a_leader_never_change_within_an_epoch():
    q = quorum()
    q.to_voted(2, 3, 0)
    with pytest.raises(IllegalTransition):
        q.to_voted(2, 2, 0)
    q.to_follower(2, 3, 0)
    assert q.election == ElectionState(2, 3, 3)  # the vote stays with the epoch
    with pytest.raises(IllegalTransition):
        q.to_follower(2, 2, 0)
    q.to_prospective(0)
    with pytest.raises(IllegalTransition):
        q.to_follower(2, 2, 0)
    q.to_follower(2, 3, 0)  # a lost pre-vote goes back to the known leader
    assert (q.kind, q.election) == (FOLLOWER, ElectionState(2, 3, 3))


def test_granting_votes_by_state():
    q = quorum(ElectionState(3))
    assert q.can_grant_vote(2, True, pre_vote=False)
    assert not q.can_grant_vote(2, False, pre_vote=False)
    q.to_voted(3, 2, 0)
    assert q.can_grant_vote(2, False, pre_vote=False)  # the same candidate, again
    assert not q.can_grant_vote(3, True, pre_vote=False)
    assert q.can_grant_vote(3, True, pre_vote=True)  # a pre-vote is not the vote
    q.to_follower(3, 2, 0)
    assert q.can_grant_vote(3, True, pre_vote=True)  # not fetched yet
    q.data.has_fetched = True
    assert not q.can_grant_vote(3, True, pre_vote=True)
    assert not q.can_grant_vote(1, True, pre_vote=True)  # never to itself
