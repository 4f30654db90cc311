"""Observers that know no voters, only bootstrap servers (`controller.quorum.bootstrap.servers`,
KIP-853): a broker-only node asks one of them, follows the leader its answer names, never
votes, and asks again when that leader goes silent."""

from __future__ import annotations

import pytest

from gregor.protocol import errors
from gregor.raft import messages as m
from gregor.raft.log import Batch
from gregor.raft.quorum_state import Kind
from tests.raft.context import MAX_ELECTION_MS, Context

BOOTSTRAP = (-2, -3, -4)  # the driver's ids for three bootstrap addresses (Kafka's: -2, -3, ...)


def observer() -> Context:
    return Context(local_id=7, voters=(), bootstrap=BOOTSTRAP)


def test_an_observer_without_voters_asks_a_bootstrap_server_then_follows_the_leader_named():
    ctx = observer()
    ctx.poll()
    [(server, fetch)] = ctx.sent_of(m.FetchRequest)
    assert server in BOOTSTRAP
    assert (fetch.replica_id, fetch.fetch_offset) == (7, 0)
    not_leader = ctx.fetch_response(fetch, 2, error=errors.NOT_LEADER_OR_FOLLOWER, epoch=5)
    ctx.deliver(server, not_leader)
    ctx.assert_state(Kind.FOLLOWER, 5, leader=2)
    fetch = ctx.one_sent(m.FetchRequest, 2)
    assert fetch.current_leader_epoch == 5
    ctx.deliver(2, ctx.fetch_response(fetch, 2, batches=[Batch(0, 5, (b"a", b"b"))], hw=2))
    assert [e.data for e in ctx.committed] == [b"a", b"b"]
    assert ctx.one_sent(m.FetchRequest, 2).fetch_offset == 2


def test_a_bootstrap_server_that_knows_no_leader_is_left_for_another():
    ctx = observer()
    ctx.poll()
    [(first, fetch)] = ctx.sent_of(m.FetchRequest)
    ctx.deliver(first, ctx.fetch_response(fetch, -1, error=errors.NOT_LEADER_OR_FOLLOWER, epoch=0))
    ctx.assert_state(Kind.UNATTACHED, 0)
    [(second, _)] = ctx.sent_of(m.FetchRequest)
    assert second in BOOTSTRAP and second != first  # the first backs off


def test_when_its_leader_goes_silent_the_observer_asks_the_bootstrap_servers_and_never_stands():
    ctx = observer()
    ctx.poll()
    [(server, fetch)] = ctx.sent_of(m.FetchRequest)
    ctx.deliver(server, ctx.fetch_response(fetch, 2, error=errors.NOT_LEADER_OR_FOLLOWER, epoch=5))
    ctx.drain()
    ctx.advance(ctx.config.fetch_timeout_ms)
    ctx.assert_state(Kind.UNATTACHED, 5)
    [(asked, _)] = ctx.sent_of(m.FetchRequest)
    assert asked in BOOTSTRAP
    ctx.advance(MAX_ELECTION_MS)
    assert not ctx.sent_of(m.VoteRequest)
    assert ctx.node.state is Kind.UNATTACHED


def test_an_observer_needs_voters_or_bootstrap_servers():
    with pytest.raises(ValueError, match="bootstrap"):
        Context(local_id=7, voters=())


def test_a_bootstrap_server_that_cannot_be_reached_is_left_for_another_at_once():
    ctx = observer()
    ctx.poll()
    [(first, fetch)] = ctx.sent_of(m.FetchRequest)
    ctx.fail(first, fetch)
    [(second, _)] = ctx.sent_of(m.FetchRequest)
    assert second in BOOTSTRAP and second != first  # no request timeout waited for


def test_a_failure_report_for_an_older_request_changes_nothing():
    ctx = observer()
    ctx.poll()
    [(first, fetch)] = ctx.sent_of(m.FetchRequest)
    stale = m.FetchRequest(None, 7, 0, 0, 0, 0, 0, 1, fetch.correlation_id + 100)
    ctx.fail(first, stale)
    assert ctx.sent_of(m.FetchRequest) == []  # the request in flight still waits for its answer
