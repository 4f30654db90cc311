"""A peer of another cluster: refused with INCONSISTENT_CLUSTER_ID, as Kafka's KafkaRaftClient
does, and said at WARNING once per peer, naming it and the cluster ids (the answering node knows
both; the asking node knows its own)."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from gregor.protocol import errors
from gregor.raft import messages as m
from tests.raft.context import MAX_ELECTION_MS, Context

OURS = "J8qXRwI-Qyi2G0guFTiuYw"
THEIRS = "Yp6Kc2WfQ3m9o6sXb0XnZg"
INCONSISTENT_CLUSTER_ID = errors.BY_NAME["INCONSISTENT_CLUSTER_ID"].code


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_request_of_another_cluster_is_refused_and_warned_of_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = Context()
    ctx.node.cluster_id = OURS
    request = dataclasses.replace(ctx.vote_request(2, 1, 0, 0), cluster_id=THEIRS)
    with caplog.at_level(logging.WARNING, logger="gregor.raft"):
        ctx.deliver(2, request)
        ctx.deliver(2, dataclasses.replace(request, correlation_id=8))  # retried: no new line
    answers = [answer for _, answer in ctx.sent_of(m.VoteResponse)]
    assert [(a.error_code, a.vote_granted) for a in answers] == [
        (INCONSISTENT_CLUSTER_ID, False)
    ] * 2
    assert warnings(caplog) == [
        f"node 1: refused a request from node 2 of cluster.id {THEIRS}: this node is of "
        f"cluster.id {OURS} (INCONSISTENT_CLUSTER_ID; was one of the two formatted or "
        "configured with another cluster.id?)"
    ]


def test_an_inconsistent_cluster_id_answer_is_warned_of_naming_the_peer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = Context()
    ctx.node.cluster_id = OURS
    ctx.advance(MAX_ELECTION_MS)  # a pre-vote to 2 and 3
    requests = dict(ctx.sent_of(m.VoteRequest))
    refused = m.VoteResponse(INCONSISTENT_CLUSTER_ID, -1, 0, False, requests[3].correlation_id)
    with caplog.at_level(logging.WARNING, logger="gregor.raft"):
        ctx.deliver(3, refused)
    assert warnings(caplog) == [
        f"node 1: node 3 answered INCONSISTENT_CLUSTER_ID: it is of another cluster than this "
        f"node's cluster.id {OURS} (its own log names both ids; was one of the two formatted "
        "or configured with another cluster.id?)"
    ]


def test_a_request_of_the_same_cluster_is_not_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    ctx = Context()
    ctx.node.cluster_id = OURS
    with caplog.at_level(logging.WARNING, logger="gregor.raft"):
        ctx.deliver(2, dataclasses.replace(ctx.vote_request(2, 1, 0, 0), cluster_id=OURS))
    assert ctx.one_sent(m.VoteResponse, 2).error_code == errors.NONE
    assert warnings(caplog) == []
