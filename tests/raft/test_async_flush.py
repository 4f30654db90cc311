"""Asynchronous flushes (`async_flush=True`): the node asks for a flush as an effect and counts or
acknowledges its own offsets only once the driver reports it done (`flushed`). Driven by hand,
time by hand."""

from __future__ import annotations

from dataclasses import replace

from gregor.raft import messages as m
from gregor.raft.log import Batch
from gregor.raft.quorum_state import Kind

from .context import CONFIG, MAX_ELECTION_MS, Context

NO_LINGER = replace(CONFIG, append_linger_ms=0)  # a flush is asked for at the append's poll


def async_leader(voters=(1, 2, 3)) -> Context:
    ctx = Context(voters=voters, async_flush=True, config=NO_LINGER)
    ctx.become_leader()
    return ctx


def test_a_new_leader_asks_for_a_flush_of_its_epoch_marker():
    ctx = async_leader()
    assert ctx.flushes == [1]  # the start-of-epoch batch at offset 0
    assert ctx.log.flushed_offset == 0  # nothing was flushed inside the call
    ctx.complete_flush()
    assert ctx.node.leader_state.voters[1].end_offset == 1


def test_the_leader_counts_its_own_offset_only_once_flushed():
    ctx = async_leader()
    ctx.complete_flush()
    assert ctx.node.append([b"a", b"b"], ctx.time) == 2
    ctx.poll()
    assert ctx.flushes == [3] and ctx.log.flushed_offset == 1
    # follower 2 holds everything durably; the leader's own copy only its marker: with 3
    # voters a majority (2 of 3) holds offset 0 alone
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=3, last_epoch=1))
    assert ctx.node.high_watermark == 1
    assert [e.control for e in ctx.committed] == [True]
    ctx.complete_flush()
    assert ctx.node.high_watermark == 3
    assert [e.data for e in ctx.committed if not e.control] == [b"a", b"b"]


def test_a_flush_reported_beyond_what_the_log_holds_durably_counts_only_that():
    ctx = async_leader()
    ctx.complete_flush()
    ctx.node.append([b"a"], ctx.time)
    ctx.poll()
    ctx.flushes.clear()
    ctx.node.flushed(ctx.time, 2)  # the log was never flushed to 2 (a driver that lost it)
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=2, last_epoch=1))
    assert ctx.node.high_watermark == 1  # the leader is durable to 1 only: not 2


def test_one_flush_at_a_time_and_appends_meanwhile_share_the_next():
    ctx = Context(voters=(1,), async_flush=True, config=NO_LINGER)
    ctx.poll()  # a sole voter leads at once
    assert ctx.node.state is Kind.LEADER and ctx.flushes == [1]
    for record in (b"a", b"b", b"c"):
        ctx.node.append([record], ctx.time)
        ctx.poll()
    assert ctx.flushes == [1]  # the first is still in flight: no second one asked for
    assert ctx.next_deadline_ms > ctx.time  # and no busy poll while it is
    ctx.complete_flush()
    assert ctx.node.high_watermark == 1
    assert ctx.flushes == [4]  # the three appends in one flush: a group commit
    ctx.complete_flush()
    assert ctx.node.high_watermark == 4
    assert [e.data for e in ctx.committed if not e.control] == [b"a", b"b", b"c"]
    ctx.advance(10)
    assert ctx.flushes == []  # nothing new: nothing asked for


def test_a_follower_fetches_again_only_once_what_it_fetched_is_durable():
    ctx = Context(async_flush=True)
    fetch = ctx.become_follower(leader=2, epoch=1)
    assert ctx.flushes == []  # an empty log is durable to its end
    batches = [Batch(0, 1, (b"m",), control=True), Batch(1, 1, (b"a", b"b"))]
    ctx.deliver(2, ctx.fetch_response(fetch, 2, batches=batches, hw=2))
    assert [e.offset for e in ctx.committed] == [0, 1]  # committed entries go out at once
    assert ctx.sent_of(m.FetchRequest) == []  # its offset would acknowledge undurable data
    assert ctx.flushes == [3] and ctx.log.flushed_offset == 0
    ctx.advance(ctx.config.fetch_max_wait_ms)  # time alone sends nothing, asks nothing more
    assert ctx.sent_of(m.FetchRequest) == [] and ctx.flushes == [3]
    ctx.complete_flush()
    nxt = ctx.one_sent(m.FetchRequest, 2)
    assert (nxt.fetch_offset, nxt.last_fetched_epoch) == (3, 1)


def test_a_follower_without_its_flush_times_out_as_without_its_leader():
    ctx = Context(async_flush=True)
    fetch = ctx.become_follower(leader=2, epoch=1)
    ctx.deliver(2, ctx.fetch_response(fetch, 2, batches=[Batch(0, 1, (b"a",))], hw=0))
    ctx.advance(ctx.config.fetch_timeout_ms)
    assert ctx.node.state is Kind.PROSPECTIVE
    assert ctx.log.flushed_offset == 1  # a (pre-)vote describes a durable log: flushed inline


def test_votes_are_asked_for_after_a_synchronous_flush():
    ctx = Context(async_flush=True)
    fetch = ctx.become_follower(leader=2, epoch=1)
    ctx.deliver(2, ctx.fetch_response(fetch, 2, batches=[Batch(0, 1, (b"a",))], hw=-1))
    ctx.advance(MAX_ELECTION_MS + ctx.config.fetch_timeout_ms)
    votes = ctx.sent_of(m.VoteRequest)
    assert votes and all(v.last_offset == 1 for _d, v in votes)
    assert ctx.log.flushed_offset == 1


def test_a_flush_completing_after_the_leader_resigned_changes_nothing():
    ctx = async_leader()
    ctx.node.append([b"a"], ctx.time)
    assert ctx.node.resign(ctx.time)
    ctx.poll()
    ctx.complete_flush()  # the marker's flush, reported to a node that no longer leads
    assert ctx.node.state is Kind.RESIGNED and ctx.node.high_watermark is None
