"""Snapshots (KIP-630): creating one drops the log below it; a follower below the leader's log
start is told to fetch the snapshot, downloads it in chunks, installs it and goes on fetching."""

from __future__ import annotations

import pytest

from gregor.protocol import errors
from gregor.raft import messages as m
from gregor.raft.config import RaftConfig
from gregor.raft.log import Batch, SnapshotId

from .context import Context


def leader_with_snapshot() -> Context:
    """Leader of epoch 1 with offsets 0-4 committed and a snapshot ending at 5."""
    ctx = Context()
    ctx.become_leader()
    for i in range(4):
        ctx.node.append([b"r%d" % i], ctx.time)
    ctx.advance(ctx.config.append_linger_ms)
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=5, last_epoch=1))
    ctx.drain()
    assert ctx.node.high_watermark == 5 and ctx.node.applied_offset == 5
    assert ctx.node.create_snapshot(5, b"state-at-5") == SnapshotId(5, 1)
    return ctx


def test_a_snapshot_drops_the_log_below_it():
    ctx = leader_with_snapshot()
    assert (ctx.log.start_offset, ctx.log.end_offset) == (5, 5)
    assert ctx.log.latest_snapshot() == SnapshotId(5, 1)
    assert ctx.log.last_epoch == 1


def test_a_snapshot_must_be_applied_and_on_a_batch_boundary():
    ctx = Context()
    ctx.become_leader()
    ctx.node.append([b"a", b"b"], ctx.time)
    ctx.advance(ctx.config.append_linger_ms)
    ctx.deliver(2, ctx.fetch_request(2, 1, offset=3, last_epoch=1))
    with pytest.raises(ValueError, match="inside the batch"):
        ctx.node.create_snapshot(2, b"")
    with pytest.raises(ValueError):
        ctx.node.create_snapshot(4, b"")  # beyond what was applied


def test_the_leader_sends_a_follower_below_its_log_start_to_the_snapshot():
    ctx = leader_with_snapshot()
    ctx.deliver(3, ctx.fetch_request(3, 1, offset=2, last_epoch=1))
    resp = ctx.one_sent(m.FetchResponse, 3)
    assert (resp.snapshot_id, resp.batches, resp.diverging_epoch) == (SnapshotId(5, 1), (), None)
    ctx.deliver(3, ctx.fetch_request(3, 1, offset=0, last_epoch=0, corr=12))
    assert ctx.one_sent(m.FetchResponse, 3).snapshot_id == SnapshotId(5, 1)


def test_the_leader_serves_snapshot_chunks():
    ctx = leader_with_snapshot()
    ctx.deliver(3, m.FetchSnapshotRequest(None, 3, 1, SnapshotId(5, 1), 6, 4, 1))
    resp = ctx.one_sent(m.FetchSnapshotResponse, 3)
    assert (resp.error_code, resp.size, resp.position, resp.data) == (errors.NONE, 10, 6, b"at-5")
    ctx.deliver(3, m.FetchSnapshotRequest(None, 3, 1, SnapshotId(4, 1), 0, 4, 2))
    assert (
        ctx.one_sent(m.FetchSnapshotResponse, 3).error_code
        == errors.BY_NAME["SNAPSHOT_NOT_FOUND"].code
    )
    ctx.deliver(3, m.FetchSnapshotRequest(None, 3, 1, SnapshotId(5, 1), 10, 4, 3))
    assert (
        ctx.one_sent(m.FetchSnapshotResponse, 3).error_code
        == errors.BY_NAME["POSITION_OUT_OF_RANGE"].code
    )


def test_a_follower_downloads_and_installs_the_snapshot_then_fetches_after_it():
    ctx = Context(config=RaftConfig(snapshot_chunk_bytes=4))
    fetch = ctx.become_follower(leader=2, epoch=3)
    ctx.deliver(2, ctx.fetch_response(fetch, 2, snapshot=SnapshotId(5, 2)))
    sid = SnapshotId(5, 2)
    data = b"0123456789"
    for position in (0, 4, 8):
        req = ctx.one_sent(m.FetchSnapshotRequest, 2)
        assert (req.snapshot_id, req.position, req.current_leader_epoch) == (sid, position, 3)
        chunk = data[position : position + req.max_bytes]
        ctx.deliver(
            2,
            m.FetchSnapshotResponse(
                errors.NONE, 2, 3, sid, len(data), position, chunk, req.correlation_id
            ),
        )
    assert [(s.snapshot_id, s.data) for s in ctx.snapshots] == [(sid, data)]
    assert (ctx.log.start_offset, ctx.log.end_offset, ctx.log.last_epoch) == (5, 5, 2)
    assert ctx.node.high_watermark == 5 and ctx.node.applied_offset == 5
    nxt = ctx.one_sent(m.FetchRequest, 2)
    assert (nxt.fetch_offset, nxt.last_fetched_epoch) == (5, 2)
    ctx.deliver(2, ctx.fetch_response(nxt, 2, batches=[Batch(5, 3, (b"x",))], hw=6))
    assert [(e.offset, e.data) for e in ctx.committed] == [(5, b"x")]


def test_a_snapshot_the_leader_no_longer_has_sends_the_follower_back_to_fetch():
    ctx = Context()
    fetch = ctx.become_follower(leader=2, epoch=3)
    ctx.deliver(2, ctx.fetch_response(fetch, 2, snapshot=SnapshotId(5, 2)))
    req = ctx.one_sent(m.FetchSnapshotRequest, 2)
    gone = errors.BY_NAME["SNAPSHOT_NOT_FOUND"].code
    ctx.deliver(2, m.FetchSnapshotResponse(gone, 2, 3, None, -1, 0, b"", req.correlation_id))
    assert ctx.one_sent(m.FetchRequest, 2).fetch_offset == 0


def test_a_restarted_node_loads_its_snapshot_first():
    ctx = leader_with_snapshot()
    ctx.restart()
    eff = ctx.poll()
    assert eff.snapshot is not None and eff.snapshot.snapshot_id == SnapshotId(5, 1)
    assert ctx.node.applied_offset == 5 and ctx.node.high_watermark is None
