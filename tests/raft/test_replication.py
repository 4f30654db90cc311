"""Replication: the leader's fetch answers and high watermark, follower appends and truncation,
check-quorum, resignation and EndQuorumEpoch, DescribeQuorum, observers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gregor.protocol import errors
from gregor.raft import messages as m
from gregor.raft.control import decode_leader_change, encode_leader_change
from gregor.raft.log import Batch
from gregor.raft.node import NotLeader, RaftError
from gregor.raft.quorum_state import Kind
from gregor.raft.store import ElectionState

from .context import CONFIG, MAX_ELECTION_MS, Context, log_with


def leader_ctx(voters=(1, 2, 3), log=None) -> Context:
    ctx = Context(voters=voters, log=log)
    ctx.become_leader()
    return ctx


# -- the leader ----------------------------------------------------------------------------------


def test_append_is_refused_off_the_leader():
    ctx = Context()
    ctx.become_follower(leader=2, epoch=3)
    assert ctx.node.append([b"x"], ctx.time) == NotLeader(2, 3)


def test_the_high_watermark_needs_a_majority():
    ctx = leader_ctx()  # epoch 1, its marker at offset 0
    assert ctx.node.append([b"a", b"b"], ctx.time) == 2
    assert ctx.node.high_watermark is None and ctx.log.flushed_offset == 1
    ctx.advance(ctx.config.append_linger_ms)  # flushed now, but the leader alone is no majority
    assert ctx.log.flushed_offset == 3 and ctx.node.high_watermark is None
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=1, last_epoch=1))
    resp = ctx.one_sent(m.FetchResponse, 2)
    assert ctx.node.high_watermark == 1
    assert [(b.base_offset, b.records) for b in resp.batches] == [(1, (b"a", b"b"))]
    assert resp.high_watermark == 1
    ctx.deliver(3, ctx.fetch_request(3, 1, offset=3, last_epoch=1))
    assert ctx.node.high_watermark == 3
    assert [(e.offset, e.epoch, e.data, e.control) for e in ctx.committed] == [
        (0, 1, encode_leader_change(1, [1, 2, 3], [1, 2]), True),
        (1, 1, b"a", False),
        (2, 1, b"b", False),
    ]
    assert decode_leader_change(ctx.committed[0].data) == (1, [1, 2, 3], [1, 2])


def test_the_high_watermark_waits_for_an_entry_of_the_leaders_epoch():
    # Offsets 0-2 come from epoch 1 and are not known to be committed. Leader of epoch 3 writes
    # its marker at 3; a follower holding 0-2 but not 3 makes a majority for offset 3, which is
    # not above the epoch start: nothing may be exposed yet (Raft's Figure 8).
    ctx = Context(log=log_with(1, 1, 1), election=ElectionState(2))
    ctx.become_leader()
    assert ctx.node.epoch == 3 and ctx.node.leader_state.epoch_start_offset == 3
    ctx.deliver(2, ctx.fetch_request(2, 3, offset=3, last_epoch=1))
    assert ctx.node.high_watermark is None
    assert ctx.one_sent(m.FetchResponse, 2).high_watermark == -1
    ctx.deliver(2, ctx.fetch_request(2, 3, offset=4, last_epoch=3, corr=10))
    assert ctx.node.high_watermark == 4
    assert [e.offset for e in ctx.committed] == [0, 1, 2, 3]


def test_a_leader_is_active_once_the_start_of_its_epoch_is_committed():
    # KRaft's active controller: everything before its epoch must be committed. A high
    # watermark known from following (2, below this epoch's start at 3) is not enough.
    ctx = Context(log=log_with(1, 1, 1))
    fetch = ctx.become_follower(leader=2, epoch=1)
    ctx.deliver(2, ctx.fetch_response(fetch, 2, hw=2))
    assert ctx.node.high_watermark == 2 and ctx.node.active_epoch is None
    ctx.become_leader()
    assert ctx.node.epoch == 2 and ctx.node.leader_state.epoch_start_offset == 3
    assert ctx.node.high_watermark == 2 and ctx.node.active_epoch is None
    ctx.deliver(3, ctx.fetch_request(3, 2, offset=4, last_epoch=2))
    assert ctx.node.high_watermark == 4 and ctx.node.active_epoch == 2
    ctx.become_follower(leader=3, epoch=3)
    assert ctx.node.active_epoch is None


def test_five_voters_commit_what_three_hold():
    ctx = leader_ctx(voters=(1, 2, 3, 4, 5))
    for i in range(4):
        ctx.node.append([b"r%d" % i], ctx.time)
    ctx.advance(ctx.config.append_linger_ms)  # leader's end: 5
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=5, last_epoch=1))
    assert ctx.node.high_watermark is None  # {1, 2} of 5 voters
    ctx.deliver(3, ctx.fetch_request(3, 1, offset=3, last_epoch=1))
    assert ctx.node.high_watermark == 3  # ends [5, 5, 3, -1, -1]: three hold 3
    ctx.deliver(4, ctx.fetch_request(4, 1, offset=4, last_epoch=1))
    assert ctx.node.high_watermark == 4


def test_the_leader_answers_a_diverging_epoch():
    # leader's log: epoch 1 at 0-2, epoch 3 from 3 (its marker); a follower that wrote 3-4
    # in epoch 2 is told where epoch 1 ends on the leader
    ctx = Context(log=log_with(1, 1, 1), election=ElectionState(2))
    ctx.become_leader()
    ctx.deliver(2, ctx.fetch_request(2, 3, offset=5, last_epoch=2))
    resp = ctx.one_sent(m.FetchResponse, 2)
    assert resp.diverging_epoch == m.EpochEndOffset(1, 3)
    assert resp.batches == ()
    assert ctx.node.leader_state.voters[2].end_offset == -1  # a diverging fetch acks nothing


def test_fetch_errors_name_the_epoch_and_leader():
    ctx = leader_ctx()
    ctx.deliver(2, ctx.fetch_request(2, 0, offset=0, last_epoch=0))
    assert ctx.one_sent(m.FetchResponse, 2).error_code == errors.FENCED_LEADER_EPOCH
    ctx.deliver(2, ctx.fetch_request(2, 2, offset=0, last_epoch=0))
    assert ctx.one_sent(m.FetchResponse, 2).error_code == errors.UNKNOWN_LEADER_EPOCH
    follower = Context()
    follower.become_follower(leader=2, epoch=1)
    follower.deliver(3, follower.fetch_request(3, 1, offset=0, last_epoch=0))
    resp = follower.one_sent(m.FetchResponse, 3)
    assert (resp.error_code, resp.leader_id, resp.leader_epoch) == (
        errors.NOT_LEADER_OR_FOLLOWER,
        2,
        1,
    )


def test_an_empty_fetch_waits_for_data():
    ctx = leader_ctx()
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=1, last_epoch=1, max_wait_ms=500))
    assert ctx.node.high_watermark == 1  # it moved the high watermark: that news waits
    ctx.assert_nothing_sent()
    ctx.advance(ctx.config.high_watermark_linger_ms)
    assert ctx.one_sent(m.FetchResponse, 2).high_watermark == 1
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=1, last_epoch=1, max_wait_ms=500, corr=10))
    ctx.assert_nothing_sent()  # parked: nothing new, and its node knows the high watermark
    assert ctx.next_deadline_ms == ctx.time + 500
    ctx.node.append([b"a"], ctx.time)
    ctx.poll()
    resp = ctx.one_sent(m.FetchResponse, 2)
    assert [b.base_offset for b in resp.batches] == [1]


def test_a_parked_fetch_times_out_empty():
    ctx = leader_ctx()
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=0, last_epoch=0))
    ctx.drain()
    ctx.deliver(3, ctx.fetch_request(3, 1, offset=1, last_epoch=1, max_wait_ms=500))
    ctx.advance(ctx.config.high_watermark_linger_ms)
    resp = ctx.one_sent(m.FetchResponse, 3)  # the high watermark its fetch moved
    assert resp.high_watermark == 1
    ctx.deliver(3, ctx.fetch_request(3, 1, offset=1, last_epoch=1, max_wait_ms=500, corr=11))
    ctx.assert_nothing_sent()
    ctx.advance(499)
    ctx.assert_nothing_sent()
    ctx.advance(1)
    resp = ctx.one_sent(m.FetchResponse, 3)
    assert (resp.batches, resp.correlation_id) == ((), 11)


def test_news_of_the_high_watermark_rides_with_the_next_records():
    """The acknowledging Fetch that moves the high watermark is not answered with that news
    alone when an append follows within the linger: one answer carries both."""
    ctx = leader_ctx()
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=1, last_epoch=1, max_wait_ms=500))
    assert ctx.node.high_watermark == 1
    ctx.advance(ctx.config.high_watermark_linger_ms - 1)
    ctx.assert_nothing_sent()
    ctx.node.append([b"a"], ctx.time)
    ctx.poll()
    resp = ctx.one_sent(m.FetchResponse, 2)
    assert resp.high_watermark == 1 and [b.base_offset for b in resp.batches] == [1]


def test_a_node_parked_before_the_high_watermark_moved_is_told_within_the_linger():
    """Voter 3's Fetch was parked before voter 2's moved the high watermark: it is answered
    with the news within the linger, not at the end of its wait."""
    ctx = leader_ctx()
    ctx.deliver(3, ctx.fetch_request(3, 1, offset=0, last_epoch=0, max_wait_ms=500))
    ctx.drain()  # the leader's marker
    ctx.deliver(3, ctx.fetch_request(3, 1, offset=1, last_epoch=1, max_wait_ms=500, corr=7))
    assert ctx.node.high_watermark == 1  # voter 3's own fetch moved it
    ctx.advance(ctx.config.high_watermark_linger_ms)
    assert ctx.one_sent(m.FetchResponse, 3).high_watermark == 1
    ctx.deliver(3, ctx.fetch_request(3, 1, offset=1, last_epoch=1, max_wait_ms=500, corr=8))
    ctx.assert_nothing_sent()  # told: parked for its whole wait
    ctx.node.append([b"a"], ctx.time)
    ctx.poll()
    ctx.drain()
    ctx.deliver(3, ctx.fetch_request(3, 1, offset=2, last_epoch=1, max_wait_ms=500, corr=9))
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=2, last_epoch=1, max_wait_ms=500, corr=3))
    assert ctx.node.high_watermark == 2
    ctx.advance(ctx.config.high_watermark_linger_ms - 1)
    ctx.assert_nothing_sent()
    ctx.advance(1)
    answers = {dest: msg for dest, msg in ctx.sent_of(m.FetchResponse)}
    assert {d: a.high_watermark for d, a in answers.items()} == {2: 2, 3: 2}


def test_no_linger_answers_the_high_watermark_as_it_moves():
    ctx = Context(config=replace(CONFIG, high_watermark_linger_ms=0))
    ctx.become_leader()
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=1, last_epoch=1, max_wait_ms=500))
    assert ctx.one_sent(m.FetchResponse, 2).high_watermark == 1


# -- the follower --------------------------------------------------------------------------------


def test_a_follower_appends_flushes_and_takes_the_high_watermark():
    ctx = Context()
    fetch = ctx.become_follower(leader=2, epoch=1)
    assert (fetch.fetch_offset, fetch.last_fetched_epoch, fetch.current_leader_epoch) == (0, 0, 1)
    batches = [Batch(0, 1, (b"m",), control=True), Batch(1, 1, (b"a", b"b"))]
    ctx.deliver(2, ctx.fetch_response(fetch, 2, batches=batches, hw=2))
    assert ctx.node.high_watermark == 2
    assert [e.offset for e in ctx.committed] == [0, 1]
    nxt = ctx.one_sent(m.FetchRequest, 2)
    assert (nxt.fetch_offset, nxt.last_fetched_epoch) == (3, 1)
    assert ctx.log.flushed_offset == 3  # flushed before the fetch that acknowledges it


def test_a_follower_truncates_where_the_logs_diverge():
    # epochs 1 at 0-4, 2 at 5-7; the leader of epoch 3 says its epoch 1 ended at 3
    ctx = Context(log=log_with(1, 1, 1, 1, 1, 2, 2, 2), election=ElectionState(2))
    fetch = ctx.become_follower(leader=3, epoch=3)
    assert (fetch.fetch_offset, fetch.last_fetched_epoch) == (8, 2)
    ctx.deliver(3, ctx.fetch_response(fetch, 3, diverging=m.EpochEndOffset(1, 3)))
    assert ctx.log.end_offset == 3
    nxt = ctx.one_sent(m.FetchRequest, 3)
    assert (nxt.fetch_offset, nxt.last_fetched_epoch) == (3, 1)


def test_truncation_stops_at_the_local_end_of_the_epoch():
    # the leader's epoch 2 ends at 9, but ours ends at 7: keep 0-6, then fetch from there
    ctx = Context(log=log_with(1, 1, 1, 2, 2, 2, 2, 4), election=ElectionState(4))
    fetch = ctx.become_follower(leader=3, epoch=5)
    ctx.deliver(3, ctx.fetch_response(fetch, 3, diverging=m.EpochEndOffset(2, 9)))
    assert ctx.log.end_offset == 7


def test_truncating_below_the_high_watermark_is_fatal():
    ctx = Context()
    fetch = ctx.become_follower(leader=2, epoch=1)
    ctx.deliver(
        2, ctx.fetch_response(fetch, 2, batches=[Batch(0, 1, (b"a",)), Batch(1, 1, (b"b",))], hw=2)
    )
    nxt = ctx.one_sent(m.FetchRequest, 2)
    with pytest.raises(RaftError):
        ctx.deliver(2, ctx.fetch_response(nxt, 2, diverging=m.EpochEndOffset(1, 1)))


def test_a_stale_or_duplicated_response_is_ignored():
    ctx = Context()
    fetch = ctx.become_follower(leader=2, epoch=1)
    response = ctx.fetch_response(fetch, 2, batches=[Batch(0, 1, (b"a",))], hw=0)
    ctx.deliver(2, response)
    assert ctx.log.end_offset == 1
    ctx.drain()
    ctx.deliver(2, response)  # the network duplicated it: the request it answers is done
    assert ctx.log.end_offset == 1
    ctx.assert_nothing_sent()


def test_a_fetch_error_backs_off_before_retrying():
    ctx = Context()
    fetch = ctx.become_follower(leader=2, epoch=1)
    ctx.deliver(2, ctx.fetch_response(fetch, 2, error=errors.NOT_LEADER_OR_FOLLOWER))
    ctx.assert_nothing_sent()
    assert ctx.next_deadline_ms == ctx.time + ctx.config.retry_backoff_ms
    ctx.advance(ctx.config.retry_backoff_ms)
    assert ctx.one_sent(m.FetchRequest, 2).correlation_id != fetch.correlation_id


def test_an_unanswered_fetch_is_retried_after_the_request_timeout():
    ctx = Context(config=Context().config.__class__(fetch_timeout_ms=10_000))
    ctx.become_follower(leader=2, epoch=1)
    ctx.advance(ctx.config.request_timeout_ms - 1)
    ctx.assert_nothing_sent()
    ctx.advance(1)  # given up; retried after the backoff
    ctx.assert_nothing_sent()
    assert ctx.next_deadline_ms == ctx.time + ctx.config.retry_backoff_ms
    ctx.advance(ctx.config.retry_backoff_ms)
    ctx.one_sent(m.FetchRequest, 2)


# -- check-quorum and resignation ----------------------------------------------------------------


def test_a_leader_without_a_majority_fetching_resigns():
    ctx = leader_ctx()
    timeout = ctx.config.check_quorum_timeout_ms  # 1.5 x the fetch timeout
    ctx.advance(timeout - 1)
    ctx.assert_state(Kind.LEADER, 1, leader=1, voted=1)
    ctx.drain()
    ctx.advance(1)
    ctx.assert_state(Kind.RESIGNED, 1, leader=1, voted=1)
    ends = ctx.sent_of(m.EndQuorumEpochRequest)
    assert sorted(d for d, _ in ends) == [2, 3]


def test_a_leader_fetched_from_by_a_majority_stays():
    ctx = leader_ctx()
    for i in range(5):
        ctx.advance(ctx.config.fetch_timeout_ms)
        ctx.deliver(2, ctx.fetch_request(2, 1, offset=1, last_epoch=1, corr=20 + i))
    ctx.assert_state(Kind.LEADER, 1, leader=1, voted=1)


def test_graceful_resignation_names_the_most_caught_up_successor_first():
    ctx = leader_ctx()
    ctx.node.append([b"a"], ctx.time)
    ctx.advance(ctx.config.append_linger_ms)
    ctx.deliver(3, ctx.fetch_request(3, 1, offset=2, last_epoch=1))
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=1, last_epoch=1))
    ctx.drain()
    assert ctx.node.resign(ctx.time)
    ctx.poll()
    req = ctx.one_sent(m.EndQuorumEpochRequest, 2)
    assert (req.leader_id, req.leader_epoch, req.preferred_successors) == (1, 1, (3, 2))
    ctx.deliver(2, m.EndQuorumEpochResponse(errors.NONE, 1, 1, req.correlation_id))
    assert ctx.node.quorum.data.unacked == {3}


def test_end_quorum_epoch_makes_the_first_successor_run_at_once():
    ctx = Context()
    fetch = ctx.become_follower(leader=2, epoch=4)
    ctx.deliver(2, ctx.fetch_response(fetch, 2, hw=0))  # it has heard from its leader
    ctx.drain()
    ctx.deliver(2, m.EndQuorumEpochRequest(None, 2, 4, (1, 3), 5))
    assert ctx.one_sent(m.EndQuorumEpochResponse, 2).error_code == errors.NONE
    ctx.assert_state(Kind.PROSPECTIVE, 4, leader=2)
    assert {d for d, r in ctx.sent_of(m.VoteRequest) if r.pre_vote} == {2, 3}


def test_end_quorum_epoch_staggers_later_successors_and_opens_pre_votes():
    ctx = Context(local_id=3)
    fetch = ctx.become_follower(leader=2, epoch=4)
    ctx.deliver(2, ctx.fetch_response(fetch, 2, hw=0))
    ctx.drain()
    ctx.deliver(2, m.EndQuorumEpochRequest(None, 2, 4, (1, 3), 5))
    ctx.drain()
    # second of two successors: waits max >> 1 = 500 ms; meanwhile it grants pre-votes
    ctx.deliver(1, m.VoteRequest(None, 1, 4, 3, 0, 0, True, 8))
    assert ctx.one_sent(m.VoteResponse, 1).vote_granted
    ctx.advance(499)
    ctx.assert_state(Kind.FOLLOWER, 4, leader=2)
    ctx.advance(1)
    ctx.assert_state(Kind.PROSPECTIVE, 4, leader=2)


# -- DescribeQuorum and observers ----------------------------------------------------------------


def test_describe_quorum_on_the_leader():
    ctx = leader_ctx()
    ctx.node.append([b"a"], ctx.time)
    ctx.advance(ctx.config.append_linger_ms)
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=2, last_epoch=1))
    fetched_at = ctx.time
    ctx.advance(10)
    ctx.deliver(9, m.DescribeQuorumRequest(4))
    resp = ctx.one_sent(m.DescribeQuorumResponse, 9)
    assert (resp.error_code, resp.leader_id, resp.leader_epoch, resp.high_watermark) == (
        errors.NONE,
        1,
        1,
        2,
    )
    voters = {v.replica_id: v for v in resp.current_voters}
    assert voters[1].log_end_offset == 2
    # The leader reports itself fetching and caught up now, as Kafka's leader does.
    assert voters[1].last_fetch_timestamp == voters[1].last_caught_up_timestamp == ctx.time
    assert (voters[2].log_end_offset, voters[2].last_fetch_timestamp) == (2, fetched_at)
    assert voters[2].last_caught_up_timestamp == fetched_at
    assert (voters[3].log_end_offset, voters[3].last_fetch_timestamp) == (-1, -1)
    follower = Context()
    follower.become_follower(leader=2, epoch=1)
    assert follower.node.describe_quorum(0).error_code == errors.NOT_LEADER_OR_FOLLOWER


def test_an_observer_finds_the_leader_through_any_voter_and_never_votes():
    ctx = Context(local_id=7, voters=(1, 2, 3))
    ctx.poll()
    [(voter, fetch)] = ctx.sent_of(m.FetchRequest)
    ctx.deliver(voter, ctx.fetch_response(fetch, 2, error=errors.FENCED_LEADER_EPOCH, epoch=3))
    ctx.assert_state(Kind.FOLLOWER, 3, leader=2)
    fetch = ctx.one_sent(m.FetchRequest, 2)
    ctx.deliver(2, ctx.fetch_response(fetch, 2, batches=[Batch(0, 3, (b"a",))], hw=1))
    assert [e.data for e in ctx.committed] == [b"a"]
    ctx.advance(ctx.config.fetch_timeout_ms)
    ctx.advance(MAX_ELECTION_MS)
    assert ctx.node.state in (Kind.UNATTACHED, Kind.FOLLOWER)  # it looks for a leader, never runs
    assert not [r for _, r in ctx.sent_of(m.VoteRequest)]


def test_observer_fetches_do_not_count_toward_the_high_watermark():
    ctx = leader_ctx()
    ctx.deliver(7, ctx.fetch_request(7, 1, offset=1, last_epoch=1))
    assert ctx.one_sent(m.FetchResponse, 7).high_watermark == -1
    assert ctx.node.high_watermark is None
    observers = ctx.node.describe_quorum(ctx.time).observers
    assert [(o.replica_id, o.log_end_offset) for o in observers] == [(7, 1)]
