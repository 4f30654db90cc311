"""A test context for one RaftNode, in the style of Kafka's RaftClientTestContext: build a node
over a MemoryLog and a memory store with a fake clock, deliver a message, advance time, poll,
and assert exactly what it sent and which state it is in."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

from gregor.protocol import errors
from gregor.raft import messages as m
from gregor.raft.config import RaftConfig
from gregor.raft.log import Batch, MemoryLog, SnapshotId
from gregor.raft.node import Effects, Entry, LoadSnapshot, RaftNode, Send
from gregor.raft.quorum_state import Kind
from gregor.raft.store import ElectionState, MemoryQuorumStateStore

T = TypeVar("T")

CONFIG = RaftConfig()
MAX_ELECTION_MS = 2 * CONFIG.election_timeout_ms


def log_with(*epochs: int, start: int = 0) -> MemoryLog:
    """A log of one-record batches, one per epoch given: log_with(1, 1, 2) -> offsets 0, 1 (epoch
    1), 2 (epoch 2)."""
    log = MemoryLog()
    for i, epoch in enumerate(epochs):
        log.append(Batch(start + i, epoch, (b"r%d" % (start + i),)))
    log.flush()
    return log


class Context:
    def __init__(
        self,
        local_id: int = 1,
        voters: Sequence[int] = (1, 2, 3),
        *,
        log: MemoryLog | None = None,
        election: ElectionState | None = None,
        store: MemoryQuorumStateStore | None = None,
        config: RaftConfig = CONFIG,
        seed: int = 0,
        now_ms: int = 0,
        bootstrap: Sequence[int] = (),
        async_flush: bool = False,
    ) -> None:
        self.local_id = local_id
        self.async_flush = async_flush
        self.voters = tuple(voters)
        self.log = log if log is not None else MemoryLog()
        self.store = store if store is not None else MemoryQuorumStateStore(election)
        self.config = config
        self.time = now_ms
        self.seed = seed
        self.bootstrap = tuple(bootstrap)
        self.node = RaftNode(
            local_id,
            voters,
            self.log,
            self.store,
            random.Random(seed),
            now_ms,
            config,
            bootstrap=self.bootstrap,
            async_flush=async_flush,
        )
        self.sent: list[Send] = []
        self.flushes: list[int] = []  # offsets of the asynchronous flushes asked for
        self.committed: list[Entry] = []
        self.snapshots: list[LoadSnapshot] = []
        self.next_deadline_ms = 0

    def restart(self) -> None:
        """A new node over the same log and store (what a process restart keeps)."""
        self.node = RaftNode(
            self.local_id,
            self.voters,
            self.log,
            self.store,
            random.Random(self.seed + 1),
            self.time,
            self.config,
            bootstrap=self.bootstrap,
            async_flush=self.async_flush,
        )
        self.sent.clear()

    # -- driving --------------------------------------------------------------------------------

    def _collect(self, effects: Effects) -> Effects:
        self.sent.extend(effects.outbound)
        if effects.snapshot is not None:
            self.snapshots.append(effects.snapshot)
        self.committed.extend(effects.committed)
        self.next_deadline_ms = effects.next_deadline_ms
        if effects.flush is not None:
            self.flushes.append(effects.flush)
        return effects

    def complete_flush(self) -> Effects:
        """The disk did the oldest flush asked for: mark it in the log, tell the node."""
        offset = self.flushes.pop(0)
        self.log.flush(offset)
        return self._collect(self.node.flushed(self.time, offset))

    def poll(self) -> Effects:
        return self._collect(self.node.poll(self.time))

    def advance(self, ms: int) -> Effects:
        self.time += ms
        return self.poll()

    def deliver(self, source: int, message: m.Message) -> Effects:
        return self._collect(self.node.receive(self.time, source, message))

    def fail(self, destination: int, request: m.Request) -> Effects:
        """`request` to `destination` will get no answer (the driver could not send it)."""
        return self._collect(
            self.node.request_failed(self.time, destination, request.correlation_id)
        )

    # -- what was sent --------------------------------------------------------------------------

    def drain(self) -> list[Send]:
        sent, self.sent = self.sent, []
        return sent

    def sent_of(self, kind: type[T]) -> list[tuple[int, T]]:
        """Every message of `kind` sent since the last drain, as (destination, message); drains."""
        out = [(s.destination, s.message) for s in self.sent if isinstance(s.message, kind)]
        self.sent = [s for s in self.sent if not isinstance(s.message, kind)]
        return out  # type: ignore[return-value]

    def one_sent(self, kind: type[T], destination: int) -> T:
        found = [msg for dest, msg in self.sent_of(kind) if dest == destination]
        assert len(found) == 1, f"expected one {kind.__name__} to {destination}, got {found}"
        return found[0]

    def assert_nothing_sent(self) -> None:
        assert self.sent == [], self.sent

    def assert_state(
        self, kind: Kind, epoch: int, leader: int | None = None, voted: int | None = None
    ) -> None:
        quorum = self.node.quorum
        assert (quorum.kind, quorum.epoch) == (kind, epoch), repr(quorum)
        assert quorum.leader_id == leader, repr(quorum)
        assert quorum.voted_for == voted, repr(quorum)

    # -- messages to the node -------------------------------------------------------------------

    def vote_request(
        self,
        candidate: int,
        epoch: int,
        last_epoch: int,
        last_offset: int,
        *,
        pre_vote: bool = False,
        corr: int = 7,
    ) -> m.VoteRequest:
        return m.VoteRequest(
            None, candidate, epoch, self.local_id, last_epoch, last_offset, pre_vote, corr
        )

    def vote_response(
        self, request: m.VoteRequest, granted: bool, *, leader: int = -1, epoch: int | None = None
    ) -> m.VoteResponse:
        return m.VoteResponse(
            errors.NONE,
            leader,
            request.replica_epoch if epoch is None else epoch,
            granted,
            request.correlation_id,
        )

    def fetch_request(
        self,
        replica: int,
        epoch: int,
        offset: int,
        last_epoch: int,
        *,
        max_wait_ms: int = 0,
        corr: int = 9,
    ) -> m.FetchRequest:
        return m.FetchRequest(
            None, replica, epoch, offset, last_epoch, 0, max_wait_ms, 1 << 20, corr
        )

    def fetch_response(
        self,
        request: m.FetchRequest,
        leader: int,
        *,
        batches: Sequence[Batch] = (),
        hw: int = -1,
        diverging: m.EpochEndOffset | None = None,
        snapshot: SnapshotId | None = None,
        error: int = errors.NONE,
        epoch: int | None = None,
    ) -> m.FetchResponse:
        return m.FetchResponse(
            error,
            leader,
            request.current_leader_epoch if epoch is None else epoch,
            hw,
            0,
            tuple(batches),
            diverging,
            snapshot,
            request.correlation_id,
        )

    def begin_quorum_epoch(
        self, leader: int, epoch: int, corr: int = 3
    ) -> m.BeginQuorumEpochRequest:
        return m.BeginQuorumEpochRequest(None, leader, epoch, self.local_id, corr)

    # -- getting somewhere ----------------------------------------------------------------------

    def become_follower(self, leader: int, epoch: int) -> m.FetchRequest:
        """BeginQuorumEpoch from `leader`; returns the Fetch it sends at once (drains the rest)."""
        self.deliver(leader, self.begin_quorum_epoch(leader, epoch))
        self.assert_state(Kind.FOLLOWER, epoch, leader, self.node.voted_for)
        fetch = self.one_sent(m.FetchRequest, leader)
        self.drain()
        return fetch

    def become_leader(self) -> None:
        """From a state that will start a pre-vote once its timer runs out: win both rounds."""
        self.advance(MAX_ELECTION_MS)
        assert self.node.state is Kind.PROSPECTIVE, repr(self.node.quorum)
        for dest, req in self.sent_of(m.VoteRequest):
            self.deliver(dest, self.vote_response(req, True))
        assert self.node.state is Kind.CANDIDATE, repr(self.node.quorum)
        for dest, req in self.sent_of(m.VoteRequest):
            self.deliver(dest, self.vote_response(req, True))
        assert self.node.state is Kind.LEADER, repr(self.node.quorum)
        self.drain()
