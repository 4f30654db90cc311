"""Elections: pre-vote, votes, the vote granting rules, persistence before acting, restarts."""

from __future__ import annotations

import pytest

from gregor.protocol import errors
from gregor.raft import messages as m
from gregor.raft.quorum_state import Kind
from gregor.raft.store import ElectionState, MemoryQuorumStateStore

from .context import MAX_ELECTION_MS, Context, log_with


def test_unattached_voter_asks_for_pre_votes_after_the_election_timeout():
    ctx = Context()
    assert ctx.store.writes == [ElectionState(0)]  # a fresh node starts Unattached in epoch 0
    ctx.poll()
    ctx.assert_nothing_sent()
    ctx.advance(MAX_ELECTION_MS)
    ctx.assert_state(Kind.PROSPECTIVE, 0)
    sent = ctx.sent_of(m.VoteRequest)
    assert sorted(dest for dest, _ in sent) == [2, 3]
    for dest, req in sent:
        assert (req.pre_vote, req.replica_id, req.replica_epoch, req.voter_id) == (True, 1, 0, dest)
        assert (req.last_offset_epoch, req.last_offset) == (0, 0)
    assert ctx.store.writes == [ElectionState(0)]  # a pre-vote changes nothing durable


def test_pre_vote_majority_starts_the_real_election_in_the_next_epoch():
    ctx = Context()
    ctx.advance(MAX_ELECTION_MS)
    req = ctx.one_sent(m.VoteRequest, 2)
    ctx.drain()
    ctx.deliver(2, ctx.vote_response(req, True))
    ctx.assert_state(Kind.CANDIDATE, 1, voted=1)
    assert ctx.store.state == ElectionState(1, None, 1)
    sent = ctx.sent_of(m.VoteRequest)
    assert sorted(dest for dest, _ in sent) == [2, 3]
    assert all(not r.pre_vote and r.replica_epoch == 1 for _, r in sent)


def test_vote_majority_makes_a_leader_that_writes_its_epoch_marker_and_announces_itself():
    ctx = Context()
    ctx.advance(MAX_ELECTION_MS)
    ctx.deliver(2, ctx.vote_response(ctx.one_sent(m.VoteRequest, 2), True))
    req = ctx.one_sent(m.VoteRequest, 3)
    ctx.drain()
    ctx.deliver(3, ctx.vote_response(req, True))
    ctx.assert_state(Kind.LEADER, 1, leader=1, voted=1)
    assert ctx.store.state == ElectionState(1, 1, 1)
    assert [(b.base_offset, b.epoch, b.control) for b in ctx.log.batches] == [(0, 1, True)]
    assert ctx.log.flushed_offset == 1
    begins = ctx.sent_of(m.BeginQuorumEpochRequest)
    assert sorted(d for d, _ in begins) == [2, 3]
    assert all((b.leader_id, b.leader_epoch) == (1, 1) for _, b in begins)


def test_a_single_voter_leads_at_once():
    ctx = Context(voters=(1,))
    ctx.poll()
    ctx.assert_state(Kind.LEADER, 1, leader=1, voted=1)
    assert ctx.node.high_watermark == 1  # its own flushed epoch marker is a majority
    assert [e.control for e in ctx.committed] == [True]


def test_rejected_pre_votes_leave_the_epoch_alone():
    ctx = Context()
    ctx.advance(MAX_ELECTION_MS)
    for dest, req in ctx.sent_of(m.VoteRequest):
        ctx.deliver(dest, ctx.vote_response(req, False))
    ctx.assert_state(Kind.UNATTACHED, 0)  # lost the pre-vote, no leader known: wait again
    for _ in range(5):
        ctx.advance(MAX_ELECTION_MS)
        ctx.assert_state(Kind.PROSPECTIVE, 0)
        ctx.advance(MAX_ELECTION_MS)  # nobody answers
    assert ctx.node.epoch == 0 and ctx.store.writes == [ElectionState(0)]


# -- granting votes ------------------------------------------------------------------------------


def test_grants_a_vote_to_an_up_to_date_candidate_and_persists_it_first():
    ctx = Context(log=log_with(1, 1))
    ctx.deliver(2, ctx.vote_request(2, epoch=2, last_epoch=1, last_offset=2))
    resp = ctx.one_sent(m.VoteResponse, 2)
    assert (resp.error_code, resp.vote_granted, resp.leader_epoch) == (errors.NONE, True, 2)
    ctx.assert_state(Kind.UNATTACHED, 2, voted=2)
    assert ctx.store.writes[-1] == ElectionState(2, None, 2)


class FailingStore(MemoryQuorumStateStore):
    def write(self, state: ElectionState) -> None:
        raise OSError("disk full")


def test_no_grant_leaves_the_node_if_the_vote_cannot_be_persisted():
    ctx = Context(store=FailingStore(ElectionState(2)))
    with pytest.raises(OSError):
        ctx.deliver(2, ctx.vote_request(2, epoch=2, last_epoch=0, last_offset=0))
    assert ctx.sent == []
    ctx.assert_state(Kind.UNATTACHED, 2)


@pytest.mark.parametrize(
    ("last_epoch", "last_offset", "granted"),
    [
        (2, 3, True),  # same last epoch, same end offset
        (2, 4, True),  # longer
        (3, 1, True),  # newer last epoch, even if shorter
        (2, 2, False),  # shorter in the same last epoch
        (1, 9, False),  # older last epoch, even if longer
    ],
)
def test_vote_needs_a_log_at_least_as_up_to_date(last_epoch, last_offset, granted):
    ctx = Context(log=log_with(1, 2, 2))  # last epoch 2, end offset 3
    ctx.deliver(2, ctx.vote_request(2, epoch=4, last_epoch=last_epoch, last_offset=last_offset))
    assert ctx.one_sent(m.VoteResponse, 2).vote_granted is granted
    ctx.assert_state(Kind.UNATTACHED, 4, voted=2 if granted else None)


def test_one_vote_per_epoch():
    ctx = Context()
    ctx.deliver(2, ctx.vote_request(2, epoch=1, last_epoch=0, last_offset=0))
    assert ctx.one_sent(m.VoteResponse, 2).vote_granted
    ctx.deliver(3, ctx.vote_request(3, epoch=1, last_epoch=0, last_offset=5))
    assert not ctx.one_sent(m.VoteResponse, 3).vote_granted
    ctx.deliver(2, ctx.vote_request(2, epoch=1, last_epoch=0, last_offset=0))  # a retry
    assert ctx.one_sent(m.VoteResponse, 2).vote_granted
    assert ctx.store.writes == [ElectionState(0), ElectionState(1), ElectionState(1, None, 2)]


def test_the_vote_survives_a_restart():
    ctx = Context()
    ctx.deliver(2, ctx.vote_request(2, epoch=1, last_epoch=0, last_offset=0))
    ctx.restart()
    ctx.assert_state(Kind.UNATTACHED, 1, voted=2)
    ctx.deliver(3, ctx.vote_request(3, epoch=1, last_epoch=0, last_offset=0))
    assert not ctx.one_sent(m.VoteResponse, 3).vote_granted


def test_vote_from_an_older_epoch_is_fenced():
    ctx = Context(election=ElectionState(5))
    ctx.deliver(2, ctx.vote_request(2, epoch=4, last_epoch=0, last_offset=0))
    resp = ctx.one_sent(m.VoteResponse, 2)
    assert (resp.error_code, resp.vote_granted, resp.leader_epoch) == (
        errors.FENCED_LEADER_EPOCH,
        False,
        5,
    )


def test_a_follower_refuses_votes_in_its_epoch():
    ctx = Context()
    ctx.become_follower(leader=2, epoch=3)
    ctx.deliver(3, ctx.vote_request(3, epoch=3, last_epoch=0, last_offset=0))
    resp = ctx.one_sent(m.VoteResponse, 3)
    assert (resp.vote_granted, resp.leader_id) == (False, 2)


def test_a_vote_in_a_newer_epoch_moves_a_leader_to_unattached():
    ctx = Context()
    ctx.become_leader()
    ctx.deliver(2, ctx.vote_request(2, epoch=2, last_epoch=1, last_offset=1))
    assert ctx.one_sent(m.VoteResponse, 2).vote_granted
    ctx.assert_state(Kind.UNATTACHED, 2, voted=2)


# -- pre-vote ------------------------------------------------------------------------------------


def test_a_pre_vote_neither_bumps_the_epoch_nor_spends_the_vote():
    ctx = Context(election=ElectionState(3))
    ctx.deliver(2, ctx.vote_request(2, epoch=5, last_epoch=0, last_offset=0, pre_vote=True))
    resp = ctx.one_sent(m.VoteResponse, 2)
    assert (resp.vote_granted, resp.leader_epoch) == (True, 3)
    ctx.assert_state(Kind.UNATTACHED, 3)
    assert ctx.store.writes == []
    ctx.deliver(3, ctx.vote_request(3, epoch=4, last_epoch=0, last_offset=0))  # a real vote
    assert ctx.one_sent(m.VoteResponse, 3).vote_granted


def test_pre_vote_still_needs_an_up_to_date_log():
    ctx = Context(log=log_with(1, 1))
    ctx.deliver(2, ctx.vote_request(2, epoch=1, last_epoch=1, last_offset=1, pre_vote=True))
    assert not ctx.one_sent(m.VoteResponse, 2).vote_granted


def test_a_follower_that_heard_from_its_leader_refuses_pre_votes():
    ctx = Context()
    fetch = ctx.become_follower(leader=2, epoch=1)
    # not fetched yet: it cannot tell whether the leader is alive, so it grants (KIP-996)
    ctx.deliver(3, ctx.vote_request(3, epoch=1, last_epoch=0, last_offset=0, pre_vote=True))
    assert ctx.one_sent(m.VoteResponse, 3).vote_granted
    ctx.deliver(2, ctx.fetch_response(fetch, leader=2, hw=0))
    ctx.deliver(3, ctx.vote_request(3, epoch=1, last_epoch=0, last_offset=0, pre_vote=True))
    resp = ctx.one_sent(m.VoteResponse, 3)
    assert (resp.vote_granted, resp.leader_id, resp.leader_epoch) == (False, 2, 1)
    ctx.assert_state(Kind.FOLLOWER, 1, leader=2)


def test_a_leader_refuses_pre_votes():
    ctx = Context()
    ctx.become_leader()
    ctx.deliver(2, ctx.vote_request(2, epoch=1, last_epoch=1, last_offset=1, pre_vote=True))
    resp = ctx.one_sent(m.VoteResponse, 2)
    assert (resp.vote_granted, resp.leader_id) == (False, 1)
    ctx.assert_state(Kind.LEADER, 1, leader=1, voted=1)


def test_a_partitioned_follower_keeps_its_epoch_and_goes_back_to_its_leader():
    ctx = Context()
    ctx.become_follower(leader=2, epoch=4)
    writes = len(ctx.store.writes)
    ctx.advance(ctx.config.fetch_timeout_ms)
    ctx.assert_state(Kind.PROSPECTIVE, 4, leader=2)
    req = ctx.one_sent(m.VoteRequest, 3)
    assert (req.pre_vote, req.replica_epoch) == (True, 4)
    ctx.drain()
    # voter 3 still hears from leader 2: it says so, and this node follows 2 again
    ctx.deliver(3, ctx.vote_response(req, False, leader=2))
    ctx.assert_state(Kind.FOLLOWER, 4, leader=2)
    for _ in range(3):  # isolated: it never gets an answer, and never bumps the epoch
        ctx.advance(ctx.config.fetch_timeout_ms)
        ctx.advance(MAX_ELECTION_MS)
        assert ctx.node.epoch == 4
    assert len(ctx.store.writes) == writes


# -- restarts ------------------------------------------------------------------------------------


def test_a_leader_restarts_resigned_and_never_leads_that_epoch_again():
    ctx = Context(election=ElectionState(3, 1, 1), log=log_with(1, 3))
    ctx.poll()
    ctx.assert_state(Kind.RESIGNED, 3, leader=1, voted=1)
    ends = ctx.sent_of(m.EndQuorumEpochRequest)
    assert sorted(d for d, _ in ends) == [2, 3]
    assert ctx.node.append([b"x"], ctx.time).epoch == 3  # type: ignore[union-attr]
    ctx.deliver(2, ctx.vote_request(2, epoch=3, last_epoch=3, last_offset=2))
    assert not ctx.one_sent(m.VoteResponse, 2).vote_granted


def test_a_candidate_restarts_as_candidate_in_the_same_epoch():
    ctx = Context(election=ElectionState(2, None, 1))
    ctx.poll()
    ctx.assert_state(Kind.CANDIDATE, 2, voted=1)
    assert all(not r.pre_vote and r.replica_epoch == 2 for _, r in ctx.sent_of(m.VoteRequest))


def test_a_follower_restarts_following():
    ctx = Context(election=ElectionState(2, 3, None))
    ctx.poll()
    ctx.assert_state(Kind.FOLLOWER, 2, leader=3)
    assert ctx.one_sent(m.FetchRequest, 3).current_leader_epoch == 2


def test_the_log_epoch_wins_over_an_older_store():
    ctx = Context(election=ElectionState(1), log=log_with(1, 4))
    ctx.assert_state(Kind.UNATTACHED, 4)
    assert ctx.store.state == ElectionState(4)


def test_a_lost_election_backs_off_then_starts_over_with_a_pre_vote():
    ctx = Context()
    ctx.advance(MAX_ELECTION_MS)
    ctx.deliver(2, ctx.vote_response(ctx.one_sent(m.VoteRequest, 2), True))
    ctx.assert_state(Kind.CANDIDATE, 1, voted=1)
    for dest, req in ctx.sent_of(m.VoteRequest):
        ctx.deliver(dest, ctx.vote_response(req, False))
    ctx.assert_state(Kind.CANDIDATE, 1, voted=1)  # backing off, asking nobody
    ctx.assert_nothing_sent()
    ctx.advance(ctx.config.election_backoff_max_ms)
    ctx.assert_state(Kind.PROSPECTIVE, 1, voted=1)  # no new epoch without a pre-vote majority
    assert all(r.pre_vote and r.replica_epoch == 1 for _, r in ctx.sent_of(m.VoteRequest))
