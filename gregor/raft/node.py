"""RaftNode: one member of the KRaft quorum, without I/O (KIP-595, KIP-630, KIP-996).

The driver calls it with the time and what arrived, and does what it returns::

    effects = node.receive(now_ms, source_id, message)   # a request or a response
    effects = node.request_failed(now_ms, dest, corr)    # a request that will get no answer
    effects = node.poll(now_ms)                          # timers; call again at next_deadline_ms
    offset  = node.append([b"record", ...], now_ms)      # on the leader; else NotLeader

`Effects` holds the messages to send (`Send(destination, message)`), a snapshot to load (then)
the entries newly committed, in offset order, for the state machine, a change of leader, and
the time of the next poll. Time, randomness (election jitter), the log and the quorum-state
store are injected; the node never reads a clock, sleeps, or touches a socket.

Replication is pull-based. A follower sends Fetch(fetch offset = its log end, last fetched
epoch = its last batch's epoch) after flushing; the leader checks that pair against its own log
(fetch.py):

    below its log start (a snapshot covers it)   -> snapshot id: fetch it with FetchSnapshot
    epoch unknown or ending before the offset    -> diverging epoch (epoch, end offset): the
                                                    follower truncates to where the logs agree
    otherwise                                    -> batches from the offset, and the high
                                                    watermark; an empty answer waits up to
                                                    fetch_max_wait_ms for data (parked)

The leader's high watermark rule is leader.py's. Elections: an expired election or fetch
timeout starts a pre-vote (Prospective, same epoch); a majority of pre-votes starts the real
election (Candidate, epoch + 1); a majority of votes makes the leader, which appends a control
batch and repeats BeginQuorumEpoch to every voter every fetch_timeout / 2. Vote granting rules
are in quorum_state.py (`can_grant_vote`); the log up-to-date check is `_log_up_to_date`.

Observers (a node not among the voters: a broker-only node) never vote or stand; with no known
leader they send Fetch to one of `bootstrap` (ids the driver maps to the configured
`controller.quorum.bootstrap.servers`; the voters when none are given) and follow the leader its
answer names (KIP-853). One that has not fetched from its leader for the fetch timeout forgets it
and asks again. The voter set of such an observer may be empty.

Durability: quorum state is persisted before it is acted on (quorum_state.py). A follower
flushes before every Fetch, since its fetch offset is its acknowledgement; a leader counts only
its flushed end offset toward the high watermark and flushes `append.linger.ms` after an
append; every node flushes before it asks for (pre-)votes, so the log it claims is durable.

Flushes are synchronous (`log.flush()` inside the call) unless the node is made with
`async_flush=True`: then a flush is an effect, `Effects.flush = offset`, which the driver does
off the caller's thread (the fsync) and reports with `flushed(now_ms, offset)`. One is in flight
at a time. A leader counts its own end offset toward the high watermark only at that report
(appends made meanwhile ride on the next flush: a group commit); a follower sends its next
Fetch only once its log is durable to its end. Votes are asked for after a synchronous flush
either way (elections are rare).

Choices of our own (Kafka's code differs or the KIPs leave them open): a Resigned node grants
pre-votes, and an EndQuorumEpoch makes a follower grant them at once (its leader has left); a
prospective counts pre-vote answers from voters in an older epoch; errors that change nothing
back off `retry_backoff_ms` before the retry; a parked fetch whose node has not been told the
high watermark is answered within `high_watermark_linger_ms` (fetch.py), so followers learn of
commits within it even when no record follows. As in Kafka, a standard vote from a
newer epoch always moves a voter to that epoch: pre-vote keeps an isolated node from ever
bumping it, but a node that won a pre-vote and was then cut off still bumps it on return.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gregor.frozen import positional_constructor
from gregor.protocol import errors
from gregor.raft import messages as m
from gregor.raft.config import RaftConfig
from gregor.raft.connections import RequestManager
from gregor.raft.control import encode_leader_change
from gregor.raft.fetch import (
    SNAPSHOT_NOT_FOUND,
    FetchPurgatory,
    ParkedFetch,
    Position,
    snapshot_chunk,
    validate_fetch_position,
)
from gregor.raft.leader import NEVER, LeaderState
from gregor.raft.log import Batch, RaftLog, SnapshotId, new_batch
from gregor.raft.quorum_state import (
    CANDIDATE,
    FOLLOWER,
    LEADER,
    PROSPECTIVE,
    CandidateState,
    FollowerState,
    Kind,
    ProspectiveState,
    QuorumState,
    ResignedState,
    SnapshotDownload,
    UnattachedState,
)
from gregor.raft.store import QuorumStateStore

if TYPE_CHECKING:
    import random  # the type of the injected generator; the core never seeds or draws its own

log = logging.getLogger(__name__)

INCONSISTENT_CLUSTER_ID = errors.BY_NAME["INCONSISTENT_CLUSTER_ID"].code
INVALID_VOTER_KEY = errors.BY_NAME["INVALID_VOTER_KEY"].code

ELECTION_BACKOFF_BASE_MS = 100  # Kafka's RETRY_BACKOFF_BASE_MS for lost elections
MAX_POLL_TRANSITIONS = 8  # a poll follows at most this many transitions (one voter: 3)


class RaftError(RuntimeError):
    """The quorum broke a rule this node relies on (two leaders in an epoch, truncation below
    the high watermark, a high watermark going back). Fatal for the node: Kafka exits."""


@dataclass(frozen=True, slots=True)
class Send:
    destination: int
    message: m.Message


@dataclass(frozen=True, slots=True)
class Entry:
    offset: int
    epoch: int
    data: bytes
    control: bool = False  # the leader's start-of-epoch record (control.py); not user data


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    snapshot_id: SnapshotId
    data: bytes


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    leader_id: int | None
    epoch: int


@dataclass(frozen=True, slots=True)
class NotLeader:
    leader_id: int | None
    epoch: int


@dataclass(slots=True)
class Effects:
    outbound: list[Send] = field(default_factory=list)
    # When set, the state machine resets to this snapshot before it applies `committed`.
    snapshot: LoadSnapshot | None = None
    committed: list[Entry] = field(default_factory=list)
    leader_change: LeaderAndEpoch | None = None
    next_deadline_ms: int = NEVER
    # Asynchronous flushes only: make the log durable below this offset, then call
    # `RaftNode.flushed(now_ms, offset)`. At most one is asked for until that call.
    flush: int | None = None


# built on every Fetch and commit: every field, in order (frozen.py)
_new_send = positional_constructor(Send)
_new_entry = positional_constructor(Entry)


def _leader_or_none(leader_id: int) -> int | None:
    return leader_id if leader_id >= 0 else None


class RaftNode:
    def __init__(
        self,
        node_id: int,
        voters: Sequence[int],
        log: RaftLog,
        store: QuorumStateStore,
        rng: random.Random,
        now_ms: int,
        config: RaftConfig | None = None,
        cluster_id: str | None = None,
        bootstrap: Sequence[int] = (),
        async_flush: bool = False,
    ) -> None:
        self.node_id = node_id
        self.log = log
        self.config = config or RaftConfig()
        self.cluster_id = cluster_id
        self.rng = rng
        self.quorum = QuorumState(node_id, voters, store, rng, self.config)
        # Whom an observer asks while it knows no leader: the bootstrap servers, else the voters.
        self.bootstrap = tuple(bootstrap) or self.quorum.voters
        if not self.quorum.is_voter and not self.bootstrap:
            raise ValueError(f"observer {node_id} has neither voters nor bootstrap servers to ask")
        self.quorum.initialize(log.last_epoch, now_ms)
        self._requests = RequestManager(
            self.config.request_timeout_ms, self.config.retry_backoff_ms
        )
        self._correlation = 0
        self._out: list[Send] = []
        self._committed: list[Entry] = []
        self._snapshot: LoadSnapshot | None = None
        # Not persisted (as Kafka): unknown after a restart until a leader says or computes it.
        self._high_watermark: int | None = None
        self._applied = log.start_offset  # the next offset to hand to the state machine
        self._parked = FetchPurgatory()
        # A leader's: the high watermark its last Fetch answer to each node carried (-1: none).
        self._hw_told: dict[int, int] = {}
        self._flush_deadline_ms: int | None = None
        self._async_flush = async_flush
        self._flush_inflight: int | None = None  # the offset of the flush asked for, not done
        self._flush_out: int | None = None  # a flush to ask for in the next Effects
        self._lost_elections = 0
        self._foreign_peers: set[tuple[int, str | None]] = set()  # warned of: (peer, cluster.id)
        self._reported = LeaderAndEpoch(None, -1)
        self._seen_transitions = self.quorum.transitions
        snap = log.latest_snapshot()
        if snap is not None:
            data = log.read_snapshot(snap)
            assert data is not None
            self._snapshot = LoadSnapshot(snap, data)
            self._applied = snap.end_offset

    # -- reading --------------------------------------------------------------------------------

    @property
    def state(self) -> Kind:
        return self.quorum.kind

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader_id(self) -> int | None:
        """The leader of the current epoch, if this node follows or is it."""
        return self.quorum.leader_id if self.quorum.kind in (LEADER, FOLLOWER) else None

    @property
    def voted_for(self) -> int | None:
        return self.quorum.voted_for

    @property
    def is_leader(self) -> bool:
        return self.quorum.kind is LEADER

    @property
    def high_watermark(self) -> int | None:
        return self._high_watermark

    @property
    def applied_offset(self) -> int:
        """Everything below this offset has been handed out as committed (or in a snapshot)."""
        return self._applied

    @property
    def active_epoch(self) -> int | None:
        """This leader's epoch once the high watermark has passed the epoch's start (so that
        everything written before it is committed: KRaft's active controller); else None."""
        data, hw = self.quorum.data, self._high_watermark
        if isinstance(data, LeaderState) and hw is not None and hw > data.epoch_start_offset:
            return data.epoch
        return None

    @property
    def leader_state(self) -> LeaderState | None:
        data = self.quorum.data
        return data if isinstance(data, LeaderState) else None

    def __repr__(self) -> str:
        return f"RaftNode({self.node_id}, {self.quorum!r}, hw={self._high_watermark}, log={self.log!r})"

    # -- entry points ---------------------------------------------------------------------------

    def poll(self, now_ms: int) -> Effects:
        """Run timers and send what is due; call again at the returned next_deadline_ms."""
        self._requests.expire(now_ms)
        for _ in range(MAX_POLL_TRANSITIONS):
            seen = self.quorum.transitions
            self._poll_state(now_ms)
            if self.quorum.transitions == seen:
                break
        if self.quorum.kind is LEADER:
            self._maybe_complete_parked(now_ms)
        return self._drain(now_ms)

    def receive(self, now_ms: int, source: int, message: m.Message) -> Effects:
        """Handle a request or response from node `source`, then poll."""
        if isinstance(message, m.REQUEST_TYPES):
            self._handle_request(source, message, now_ms)
        else:
            self._handle_response(source, message, now_ms)
        return self.poll(now_ms)

    def request_failed(self, now_ms: int, destination: int, correlation_id: int) -> Effects:
        """The request `correlation_id` to `destination` will get no answer (no connection, or
        it broke): back off that node as after an error answer, then poll. As in Kafka, where a
        disconnect comes back as a failed response; an observer then asks another bootstrap
        server at once rather than after the request timeout."""
        if self._requests.complete(destination, correlation_id):
            self._requests.backoff(destination, now_ms)
        return self.poll(now_ms)

    def flushed(self, now_ms: int, offset: int) -> Effects:
        """The flush asked for in `Effects.flush` is done: the log is durable below `offset`,
        as far as it still holds those entries (the driver marks the flush in the log, which
        ignores one a truncation overtook). A leader now counts it toward the high watermark;
        a follower may send the Fetch that acknowledges it. Then poll."""
        self._flush_inflight = None
        leader = self.leader_state
        if leader is not None:
            durable = min(offset, self.log.flushed_offset)
            if leader.update_local(durable, now_ms):
                self._on_leader_high_watermark(now_ms)
        return self.poll(now_ms)

    def append(self, records: Sequence[bytes], now_ms: int) -> int | NotLeader:
        """Append `records` as one batch of this leader's epoch; the offset of the last one.

        The batch is committed once the high watermark passes it (it then comes back in
        Effects.committed). It is flushed `append.linger.ms` later, at a poll."""
        if self.quorum.kind is not LEADER:
            return NotLeader(self.leader_id, self.epoch)
        if not records:
            raise ValueError("append needs at least one record")
        batch = new_batch(self.log.end_offset, self.epoch, tuple(map(bytes, records)), False, None)
        self.log.append(batch)
        if self._flush_deadline_ms is None:
            self._flush_deadline_ms = now_ms + self.config.append_linger_ms
        return batch.last_offset

    def resign(self, now_ms: int) -> bool:
        """Graceful resignation: the leader steps down and sends EndQuorumEpoch. Poll next."""
        leader = self.leader_state
        if leader is None:
            return False
        self._transition(self.quorum.to_resigned, now_ms, leader.successors())
        return True

    def create_snapshot(self, end_offset: int, data: bytes) -> SnapshotId:
        """Store a snapshot of the state machine with every record below `end_offset` (at most
        the applied offset, on a batch boundary) and drop the log below it (KIP-630: the log
        starts where its latest snapshot ends)."""
        if end_offset > self._applied or end_offset <= self.log.start_offset:
            raise ValueError(
                f"snapshot end {end_offset} must be in ({self.log.start_offset}, {self._applied}]"
            )
        last = self.log.read(end_offset - 1, 1)[0]
        if last.next_offset != end_offset:
            raise ValueError(f"snapshot end {end_offset} is inside the batch at {last.base_offset}")
        snapshot_id = SnapshotId(end_offset, last.epoch)
        self.log.create_snapshot(snapshot_id, data)
        self.log.delete_before_snapshot()
        return snapshot_id

    def describe_quorum(self, now_ms: int) -> m.DescribeQuorumResponse:
        return self._describe_quorum(m.DescribeQuorumRequest(0), now_ms)

    # -- effects --------------------------------------------------------------------------------

    def _drain(self, now_ms: int) -> Effects:
        if self._high_watermark is not None and self._applied < self._high_watermark:
            self._deliver_committed()
        quorum, reported = self.quorum, self._reported
        election = quorum.election
        epoch = election.epoch
        leader_id = election.leader_id if quorum.kind in (LEADER, FOLLOWER) else None
        change = None
        if leader_id != reported.leader_id or epoch != reported.epoch:
            change = self._reported = LeaderAndEpoch(leader_id, epoch)
        effects = Effects(
            self._out,
            self._snapshot,
            self._committed,
            change,
            self._next_deadline(now_ms),
            self._flush_out,
        )
        self._out, self._snapshot, self._committed, self._flush_out = [], None, [], None
        return effects

    def _deliver_committed(self) -> None:
        hw = self._high_watermark
        while hw is not None and self._applied < hw:
            for batch in self.log.read(self._applied, self.config.fetch_max_bytes):
                if batch.base_offset >= hw:
                    break
                for i, record in enumerate(batch.records):
                    offset = batch.base_offset + i
                    if self._applied <= offset < hw:
                        self._committed.append(
                            _new_entry(offset, batch.epoch, record, batch.control)
                        )
                self._applied = min(batch.next_offset, hw)

    def _set_high_watermark(self, offset: int) -> None:
        if self._high_watermark is not None and offset < self._high_watermark:
            raise RaftError(
                f"node {self.node_id}: high watermark {self._high_watermark} -> {offset}"
            )
        self._high_watermark = offset

    def _next_deadline(self, now_ms: int) -> int:
        deadline = self._requests.next_deadline(now_ms)
        data = self.quorum.data
        if isinstance(data, LeaderState):  # first: an active controller polls most
            deadline = min(deadline, data.check_quorum_deadline_ms, data.begin_quorum_deadline_ms)
            if self._flush_deadline_ms is not None and self._flush_inflight is None:
                deadline = min(deadline, self._flush_deadline_ms)
            deadline = min(deadline, self._parked.next_deadline())
        elif isinstance(data, UnattachedState):
            deadline = min(deadline, data.election_deadline_ms)
            if not self.quorum.is_voter:
                deadline = min(deadline, now_ms + self.config.retry_backoff_ms)
        elif isinstance(data, ProspectiveState):
            deadline = min(deadline, data.election_deadline_ms)
        elif isinstance(data, CandidateState):
            until = data.backoff_until_ms
            deadline = min(deadline, data.election_deadline_ms if until is None else until)
        elif isinstance(data, FollowerState):
            deadline = min(deadline, data.fetch_deadline_ms)
        elif isinstance(data, ResignedState):
            deadline = min(deadline, data.election_deadline_ms)
        return deadline

    # -- transitions ----------------------------------------------------------------------------

    def _transition(self, change: Callable[..., None], *args: object) -> None:
        """Run one QuorumState transition, then forget what belonged to the old state."""
        was_leader = self.quorum.kind is LEADER
        change(*args)
        self._requests.reset_all()
        if was_leader and self.quorum.kind is not LEADER:
            self._flush_deadline_ms = None
            for p in self._parked.drain():
                self._respond(
                    p.source,
                    self._fetch_error(
                        p.request, self._leader_only_error(p.request.current_leader_epoch)
                    ),
                )
        kind = self.quorum.kind
        if kind in (LEADER, FOLLOWER):
            self._lost_elections = 0
        if kind in (PROSPECTIVE, CANDIDATE):
            self.log.flush()  # the log a (pre-)vote request describes must be durable

    def _to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        self._transition(self.quorum.to_follower, epoch, leader_id, now_ms)

    def _to_unattached(self, epoch: int, now_ms: int) -> None:
        self._transition(self.quorum.to_unattached, epoch, now_ms)

    def _become_leader(self, now_ms: int) -> None:
        candidate = self.quorum.data
        assert isinstance(candidate, CandidateState)
        self._hw_told = {}
        granted = sorted(candidate.granted)
        start = self.log.end_offset
        leader = LeaderState(
            self.node_id, self.epoch, start, self.quorum.voters, now_ms, self.config
        )
        self._transition(self.quorum.to_leader, leader)
        # The start-of-epoch control batch (control.py): the high watermark can pass older
        # entries only once a majority holds an entry of this epoch.
        record = encode_leader_change(self.node_id, self.quorum.voters, granted)
        self.log.append(Batch(start, self.epoch, (record,), control=True))
        self._flush_leader(now_ms)

    def _flush_leader(self, now_ms: int) -> None:
        leader = self.leader_state
        assert leader is not None
        if self._async_flush:
            # One flush at a time: appends made meanwhile wait for the next, which the
            # completion's poll asks for (the deadline has passed by then): a group commit.
            if self._flush_inflight is None:
                self._flush_deadline_ms = None
                self._request_flush()
            return
        self.log.flush()
        self._flush_deadline_ms = None
        if leader.update_local(self.log.flushed_offset, now_ms):
            self._on_leader_high_watermark(now_ms)

    def _request_flush(self) -> None:
        """Ask the driver to make the log durable to its end (asynchronous flushes)."""
        self._flush_inflight = self._flush_out = self.log.end_offset

    def _durable_to_end(self) -> bool:
        """The log is durable to its end, flushing it now (synchronous) or asking for a flush
        (asynchronous: then False until `flushed`)."""
        if not self._async_flush:
            self.log.flush()
            return True
        if self.log.flushed_offset >= self.log.end_offset:
            return True
        if self._flush_inflight is None:
            self._request_flush()
        return False

    def _on_leader_high_watermark(self, now_ms: int) -> None:
        leader = self.leader_state
        assert leader is not None and leader.high_watermark is not None
        self._set_high_watermark(leader.high_watermark)
        self._parked.high_watermark_moved(
            leader.high_watermark, now_ms + self.config.high_watermark_linger_ms
        )

    def _maybe_transition(self, leader_id: int | None, epoch: int, now_ms: int) -> bool:
        """Learn of `epoch` and its leader from a message; True if the state changed."""
        quorum = self.quorum
        if leader_id == self.node_id:
            if epoch > quorum.epoch or (epoch == quorum.epoch and quorum.leader_id != self.node_id):
                raise RaftError(f"node {self.node_id} is named leader of epoch {epoch}: {quorum!r}")
            return False
        if (
            epoch == quorum.epoch
            and None not in (leader_id, quorum.leader_id)
            and leader_id != quorum.leader_id
        ):
            raise RaftError(f"two leaders in epoch {epoch}: {leader_id} and {quorum.leader_id}")
        if epoch > quorum.epoch:
            if leader_id is not None:
                self._to_follower(epoch, leader_id, now_ms)
            else:
                self._to_unattached(epoch, now_ms)
            return True
        if epoch == quorum.epoch and leader_id is not None and quorum.leader_id is None:
            self._to_follower(epoch, leader_id, now_ms)
            return True
        return False

    # -- polling by state -----------------------------------------------------------------------

    def _poll_state(self, now_ms: int) -> None:
        data = self.quorum.data
        if isinstance(data, LeaderState):
            self._poll_leader(data, now_ms)
        elif isinstance(data, FollowerState):
            self._poll_follower(data, now_ms)
        elif isinstance(data, CandidateState):
            self._poll_candidate(data, now_ms)
        elif isinstance(data, ProspectiveState):
            self._poll_prospective(data, now_ms)
        elif isinstance(data, ResignedState):
            self._poll_resigned(data, now_ms)
        else:
            self._poll_unattached(data, now_ms)

    def _only_voter(self) -> bool:
        return self.quorum.voters == (self.node_id,)

    def _poll_leader(self, leader: LeaderState, now_ms: int) -> None:
        if now_ms >= leader.check_quorum_deadline_ms:
            log.info(
                "node %d: no majority fetched in epoch %d; resigning", self.node_id, self.epoch
            )
            self._transition(self.quorum.to_resigned, now_ms, leader.successors())
            return
        if self._flush_deadline_ms is not None and now_ms >= self._flush_deadline_ms:
            self._flush_leader(now_ms)
        if now_ms >= leader.begin_quorum_deadline_ms:
            leader.begin_quorum_deadline_ms = now_ms + self.config.begin_quorum_epoch_interval_ms
            for voter in self.quorum.remote_voters:
                self._send_request(voter, now_ms, self._begin_quorum_epoch_request, voter)

    def _poll_follower(self, follower: FollowerState, now_ms: int) -> None:
        if now_ms >= follower.fetch_deadline_ms or self._only_voter():
            if self.quorum.is_voter:
                self._transition(self.quorum.to_prospective, now_ms)
            else:
                self._transition(self.quorum.to_unattached_same_epoch, now_ms)
            return
        leader_id = self.quorum.leader_id
        assert leader_id is not None
        if follower.download is not None:
            self._send_request(leader_id, now_ms, self._fetch_snapshot_request, follower.download)
        elif self._requests.is_ready(leader_id, now_ms) and self._durable_to_end():
            # the fetch offset acknowledges everything below it: sent once that is durable
            self._send_request(leader_id, now_ms, self._fetch_request)

    def _poll_unattached(self, state: UnattachedState, now_ms: int) -> None:
        if not self.quorum.is_voter:
            # An observer asks one bootstrap server (or voter) at a time, picked at random among
            # those not backing off; an answer naming the leader makes it a follower of that
            # leader (Kafka's RequestManager.findReadyBootstrapServer).
            if not self._requests.has_inflight():
                ready = [b for b in self.bootstrap if self._requests.is_ready(b, now_ms)]
                if ready:
                    self._send_request(self.rng.choice(ready), now_ms, self._fetch_request)
            return
        if now_ms >= state.election_deadline_ms or self._only_voter():
            self._transition(self.quorum.to_prospective, now_ms)

    def _poll_prospective(self, state: ProspectiveState, now_ms: int) -> None:
        quorum = self.quorum
        if len(state.granted) >= quorum.majority:
            self._transition(quorum.to_candidate, now_ms, self._lost_elections + 1)
        elif (
            now_ms >= state.election_deadline_ms
            or len(state.rejected) > len(quorum.voters) - quorum.majority
        ):
            self._lost_elections += 1
            self._lose_pre_vote(now_ms)
        else:
            for voter in quorum.remote_voters:
                if voter not in state.granted and voter not in state.rejected:
                    self._send_request(voter, now_ms, self._vote_request, voter, True)

    def _lose_pre_vote(self, now_ms: int) -> None:
        leader_id = self.quorum.leader_id
        if leader_id is not None and leader_id != self.node_id:
            self._to_follower(self.epoch, leader_id, now_ms)
        else:
            self._transition(self.quorum.to_unattached_same_epoch, now_ms)

    def _poll_candidate(self, state: CandidateState, now_ms: int) -> None:
        quorum = self.quorum
        if len(state.granted) >= quorum.majority:
            self._become_leader(now_ms)
        elif state.backoff_until_ms is not None:
            if now_ms >= state.backoff_until_ms:
                self._transition(quorum.to_prospective, now_ms)
        elif (
            now_ms >= state.election_deadline_ms
            or len(state.rejected) > len(quorum.voters) - quorum.majority
        ):
            self._lost_elections += 1
            state.backoff_until_ms = now_ms + self._election_backoff_ms(state.retries)
        else:
            for voter in quorum.remote_voters:
                if voter not in state.granted and voter not in state.rejected:
                    self._send_request(voter, now_ms, self._vote_request, voter, False)

    def _poll_resigned(self, state: ResignedState, now_ms: int) -> None:
        if now_ms >= state.election_deadline_ms or self._only_voter():
            self._transition(self.quorum.to_prospective, now_ms)
            return
        for voter in sorted(state.unacked):
            self._send_request(
                voter, now_ms, self._end_quorum_epoch_request, state.preferred_successors
            )

    def _election_backoff_ms(self, retries: int) -> int:
        """Binary exponential backoff with jitter, capped (Kafka's)."""
        spread = 2 << min(20, max(0, retries - 1))
        return min(
            ELECTION_BACKOFF_BASE_MS * self.rng.randrange(spread),
            self.config.election_backoff_max_ms,
        )

    def _end_epoch_backoff_ms(self, successors: tuple[int, ...]) -> int:
        """After EndQuorumEpoch, the first preferred successor starts at once and each next one
        waits twice as long as the one before (max >> (n - 1), doubling), so the most caught-up
        voter usually wins. Not in the list: the maximum."""
        cap = self.config.election_backoff_max_ms
        if self.node_id not in successors:
            return cap
        position = successors.index(self.node_id)
        if position == 0:
            return 0
        base = cap >> (len(successors) - 1)
        return min(cap, base << (position - 1))

    # -- sending --------------------------------------------------------------------------------

    def _send_request(
        self, destination: int, now_ms: int, build: Callable[..., m.Request], *args: object
    ) -> None:
        if not self._requests.is_ready(destination, now_ms):
            return
        self._correlation += 1
        request = build(self._correlation, *args)
        self._requests.on_sent(destination, self._correlation, now_ms)
        self._out.append(_new_send(destination, request))

    def _respond(self, destination: int, response: m.Response) -> None:
        self._out.append(_new_send(destination, response))

    def _vote_request(self, correlation_id: int, voter: int, pre_vote: bool) -> m.VoteRequest:
        return m.VoteRequest(
            self.cluster_id,
            self.node_id,
            self.epoch,
            voter,
            self.log.last_epoch,
            self.log.end_offset,
            pre_vote,
            correlation_id,
        )

    def _begin_quorum_epoch_request(
        self, correlation_id: int, voter: int
    ) -> m.BeginQuorumEpochRequest:
        return m.BeginQuorumEpochRequest(
            self.cluster_id, self.node_id, self.epoch, voter, correlation_id
        )

    def _end_quorum_epoch_request(
        self, correlation_id: int, successors: tuple[int, ...]
    ) -> m.EndQuorumEpochRequest:
        return m.EndQuorumEpochRequest(
            self.cluster_id, self.node_id, self.epoch, successors, correlation_id
        )

    def _fetch_request(self, correlation_id: int) -> m.FetchRequest:
        return m.new_fetch_request(
            self.cluster_id,
            self.node_id,
            self.epoch,
            self.log.end_offset,
            self.log.last_epoch,
            self.log.start_offset,
            self.config.fetch_max_wait_ms,
            self.config.fetch_max_bytes,
            correlation_id,
        )

    def _fetch_snapshot_request(
        self, correlation_id: int, download: SnapshotDownload
    ) -> m.FetchSnapshotRequest:
        return m.FetchSnapshotRequest(
            self.cluster_id,
            self.node_id,
            self.epoch,
            download.snapshot_id,
            len(download.data),
            self.config.snapshot_chunk_bytes,
            correlation_id,
        )

    # -- requests -------------------------------------------------------------------------------

    def _handle_request(self, source: int, request: m.Request, now_ms: int) -> None:
        theirs = getattr(request, "cluster_id", None)
        if not self._cluster_ok(theirs):  # each handler answers INCONSISTENT_CLUSTER_ID
            self._warn_cluster_id(
                source,
                theirs,
                "node %d: refused a request from node %d of cluster.id %s: this node is of "
                "cluster.id %s (INCONSISTENT_CLUSTER_ID; was one of the two formatted or "
                "configured with another cluster.id?)",
                self.node_id,
                source,
                theirs,
                self.cluster_id,
            )
        if isinstance(request, m.FetchRequest):
            self._handle_fetch(source, request, now_ms)
        elif isinstance(request, m.VoteRequest):
            self._respond(source, self._handle_vote(request, now_ms))
        elif isinstance(request, m.BeginQuorumEpochRequest):
            self._respond(source, self._handle_begin_quorum_epoch(request, now_ms))
        elif isinstance(request, m.EndQuorumEpochRequest):
            self._respond(source, self._handle_end_quorum_epoch(request, now_ms))
        elif isinstance(request, m.FetchSnapshotRequest):
            self._respond(source, self._handle_fetch_snapshot(source, request, now_ms))
        else:
            self._respond(source, self._describe_quorum(request, now_ms))

    def _warn_cluster_id(self, peer: int, theirs: str | None, message: str, *args: object) -> None:
        """A peer of another cluster: a WARNING once per peer and cluster id (it retries often)."""
        if (peer, theirs) not in self._foreign_peers:
            self._foreign_peers.add((peer, theirs))
            log.warning(message, *args)

    def _cluster_ok(self, cluster_id: str | None) -> bool:
        return cluster_id is None or self.cluster_id is None or cluster_id == self.cluster_id

    def _log_up_to_date(self, last_epoch: int, end_offset: int) -> bool:
        """A candidate's log is at least as up to date as ours: compare (last epoch, end offset)."""
        return (last_epoch, end_offset) >= (self.log.last_epoch, self.log.end_offset)

    def _vote_response(self, error: int, granted: bool, correlation_id: int) -> m.VoteResponse:
        leader = self.quorum.leader_id
        return m.VoteResponse(
            error, m.NO_LEADER if leader is None else leader, self.epoch, granted, correlation_id
        )

    def _handle_vote(self, request: m.VoteRequest, now_ms: int) -> m.VoteResponse:
        corr = request.correlation_id
        if not self._cluster_ok(request.cluster_id):
            return self._vote_response(INCONSISTENT_CLUSTER_ID, False, corr)
        too_new = request.last_offset_epoch > request.replica_epoch or (
            not request.pre_vote and request.last_offset_epoch == request.replica_epoch
        )
        if request.last_offset < 0 or request.last_offset_epoch < 0 or too_new:
            return self._vote_response(errors.INVALID_REQUEST, False, corr)
        if request.replica_epoch < self.epoch:
            return self._vote_response(errors.FENCED_LEADER_EPOCH, False, corr)
        if not request.pre_vote and request.replica_epoch > self.epoch:
            self._to_unattached(request.replica_epoch, now_ms)
        if request.voter_id != self.node_id:
            return self._vote_response(INVALID_VOTER_KEY, False, corr)
        candidate = request.replica_id
        up_to_date = self._log_up_to_date(request.last_offset_epoch, request.last_offset)
        granted = candidate in self.quorum.voters and self.quorum.can_grant_vote(
            candidate, up_to_date, request.pre_vote
        )
        if granted and not request.pre_vote and self.quorum.voted_for is None:
            self._transition(self.quorum.to_voted, self.epoch, candidate, now_ms)
        return self._vote_response(errors.NONE, granted, corr)

    def _epoch_response_fields(self) -> tuple[int, int]:
        leader = self.quorum.leader_id
        return (m.NO_LEADER if leader is None else leader), self.epoch

    def _follow_leader(
        self, cluster_id: str | None, leader_id: int, leader_epoch: int, now_ms: int
    ) -> int:
        """BeginQuorumEpoch and EndQuorumEpoch alike: refuse another cluster or an old epoch;
        else learn of the leader and its epoch (NONE)."""
        if not self._cluster_ok(cluster_id):
            return INCONSISTENT_CLUSTER_ID
        if leader_epoch < self.epoch:
            return errors.FENCED_LEADER_EPOCH
        self._maybe_transition(leader_id, leader_epoch, now_ms)
        return errors.NONE

    def _handle_begin_quorum_epoch(
        self, request: m.BeginQuorumEpochRequest, now_ms: int
    ) -> m.BeginQuorumEpochResponse:
        error = self._follow_leader(
            request.cluster_id, request.leader_id, request.leader_epoch, now_ms
        )
        if error == errors.NONE and request.voter_id != self.node_id:
            error = INVALID_VOTER_KEY
        return m.BeginQuorumEpochResponse(
            error, *self._epoch_response_fields(), request.correlation_id
        )

    def _handle_end_quorum_epoch(
        self, request: m.EndQuorumEpochRequest, now_ms: int
    ) -> m.EndQuorumEpochResponse:
        error = self._follow_leader(
            request.cluster_id, request.leader_id, request.leader_epoch, now_ms
        )
        if error == errors.NONE:
            data = self.quorum.data
            if isinstance(data, FollowerState) and self.quorum.leader_id == request.leader_id:
                data.fetch_deadline_ms = now_ms + self._end_epoch_backoff_ms(
                    request.preferred_successors
                )
                # The leader has left: this follower no longer refuses pre-votes (its has_fetched
                # stands for "heard from a live leader", which no longer holds).
                data.has_fetched = False
        return m.EndQuorumEpochResponse(
            error, *self._epoch_response_fields(), request.correlation_id
        )

    def _leader_only_error(self, epoch: int) -> int:
        if epoch < self.epoch:
            return errors.FENCED_LEADER_EPOCH
        if epoch > self.epoch:
            return errors.UNKNOWN_LEADER_EPOCH
        if self.quorum.kind is not LEADER:
            return errors.NOT_LEADER_OR_FOLLOWER
        return errors.NONE

    def _fetch_error(self, request: m.FetchRequest, error: int) -> m.FetchResponse:
        leader, epoch = self._epoch_response_fields()
        return m.FetchResponse(
            error, leader, epoch, -1, self.log.start_offset, (), None, None, request.correlation_id
        )

    def _handle_fetch(self, source: int, request: m.FetchRequest, now_ms: int) -> None:
        if not self._cluster_ok(request.cluster_id):
            self._respond(source, self._fetch_error(request, INCONSISTENT_CLUSTER_ID))
            return
        error = self._leader_only_error(request.current_leader_epoch)
        if error == errors.NONE and (
            request.fetch_offset < 0
            or request.last_fetched_epoch < 0
            or request.last_fetched_epoch > request.current_leader_epoch
        ):
            error = errors.INVALID_REQUEST
        if error != errors.NONE:
            self._respond(source, self._fetch_error(request, error))
            return
        leader = self.leader_state
        assert leader is not None
        leader.record_voter_fetch(source, now_ms)
        position = self._fetch_position(leader, source, request, now_ms)
        if (  # nothing new for it: parked, with no answer built
            position[0] is Position.VALID
            and request.fetch_offset >= self.log.end_offset
            and request.max_wait_ms > 0
        ):
            deadline = now_ms + min(request.max_wait_ms, self.config.fetch_max_wait_ms)
            told = self._hw_told.get(source, -1)
            hw = -1 if leader.high_watermark is None else leader.high_watermark
            if told != hw:  # news of the high watermark alone: it may
                # wait a little for records to ride with (the next append answers it)
                deadline = min(deadline, now_ms + self.config.high_watermark_linger_ms)
            self._parked.park(ParkedFetch(source, request, deadline, told))
        else:
            self._answer_fetch(source, self._fetch_answer(leader, request, position))

    def _answer_fetch(self, source: int, response: m.FetchResponse) -> None:
        self._hw_told[source] = response.high_watermark
        self._respond(source, response)

    def _complete_fetch(self, source: int, request: m.FetchRequest, now_ms: int) -> m.FetchResponse:
        leader = self.leader_state
        assert leader is not None
        position = self._fetch_position(leader, source, request, now_ms)
        return self._fetch_answer(leader, request, position)

    def _fetch_position(
        self, leader: LeaderState, source: int, request: m.FetchRequest, now_ms: int
    ) -> tuple[Position, int, int]:
        """Where `request` fetches from; a valid position counts toward the high watermark."""
        position = validate_fetch_position(
            self.log, request.fetch_offset, request.last_fetched_epoch
        )
        if position[0] is Position.VALID and leader.update_replica(
            source, request.fetch_offset, self.log.end_offset, now_ms
        ):
            self._on_leader_high_watermark(now_ms)
        return position

    def _fetch_answer(
        self, leader: LeaderState, request: m.FetchRequest, position: tuple[Position, int, int]
    ) -> m.FetchResponse:
        """The answer to `request` from `position` (_fetch_position): records, or where to go."""
        kind, a, b = position
        batches: tuple[Batch, ...] = ()
        diverging = None
        snapshot = None
        if kind is Position.VALID:
            if request.fetch_offset < self.log.end_offset:
                max_bytes = min(request.max_bytes, self.config.fetch_max_bytes)
                batches = tuple(self.log.read(request.fetch_offset, max_bytes))
        elif kind is Position.DIVERGING:
            diverging = m.EpochEndOffset(a, b)
        else:
            snapshot = SnapshotId(a, b)
        hw = -1 if leader.high_watermark is None else leader.high_watermark
        return m.new_fetch_response(
            errors.NONE,
            self.node_id,
            self.epoch,
            hw,
            self.log.start_offset,
            batches,
            diverging,
            snapshot,
            request.correlation_id,
        )

    def _maybe_complete_parked(self, now_ms: int) -> None:
        """Answer the parked fetches that are due (records to read, or out of time)."""
        for p in self._parked.due(now_ms, self.log):
            self._answer_fetch(p.source, self._complete_fetch(p.source, p.request, now_ms))

    def _handle_fetch_snapshot(
        self, source: int, request: m.FetchSnapshotRequest, now_ms: int
    ) -> m.FetchSnapshotResponse:
        def answer(error: int, data: bytes = b"", size: int = -1) -> m.FetchSnapshotResponse:
            leader, epoch = self._epoch_response_fields()
            sid = request.snapshot_id if error == errors.NONE else None
            return m.FetchSnapshotResponse(
                error, leader, epoch, sid, size, request.position, data, request.correlation_id
            )

        if not self._cluster_ok(request.cluster_id):
            return answer(INCONSISTENT_CLUSTER_ID)
        error = self._leader_only_error(request.current_leader_epoch)
        if error != errors.NONE:
            return answer(error)
        leader = self.leader_state
        assert leader is not None
        leader.record_voter_fetch(source, now_ms)
        data = self.log.read_snapshot(request.snapshot_id)
        max_bytes = min(request.max_bytes, self.config.snapshot_chunk_bytes)
        error, chunk = snapshot_chunk(data, request.position, max_bytes)
        return answer(error, chunk, -1 if data is None else len(data))

    def _describe_quorum(
        self, request: m.DescribeQuorumRequest, now_ms: int
    ) -> m.DescribeQuorumResponse:
        leader = self.leader_state
        if leader is None:
            leader_id, epoch = self._epoch_response_fields()
            return m.DescribeQuorumResponse(
                errors.NOT_LEADER_OR_FOLLOWER, leader_id, epoch, -1, (), (), request.correlation_id
            )
        voters, observers = leader.describe(now_ms)
        hw = -1 if leader.high_watermark is None else leader.high_watermark
        return m.DescribeQuorumResponse(
            errors.NONE, self.node_id, self.epoch, hw, voters, observers, request.correlation_id
        )

    # -- responses ------------------------------------------------------------------------------

    def _handle_response(self, source: int, response: m.Response, now_ms: int) -> None:
        if not self._requests.complete(source, response.correlation_id):
            return  # not the answer to the request in flight there: late, duplicated or stale
        if response.error_code == INCONSISTENT_CLUSTER_ID:
            self._warn_cluster_id(
                source,
                None,
                "node %d: node %d answered INCONSISTENT_CLUSTER_ID: it is of another cluster than "
                "this node's cluster.id %s (its own log names both ids; was one of the two "
                "formatted or configured with another cluster.id?)",
                self.node_id,
                source,
                self.cluster_id,
            )
        if isinstance(response, m.FetchResponse):
            ok = self._handle_fetch_response(source, response, now_ms)
        elif isinstance(response, m.VoteResponse):
            ok = self._handle_vote_response(source, response, now_ms)
        elif isinstance(response, m.FetchSnapshotResponse):
            ok = self._handle_fetch_snapshot_response(source, response, now_ms)
        elif isinstance(response, m.EndQuorumEpochResponse):
            ok = self._handle_end_quorum_epoch_response(source, response, now_ms)
        elif isinstance(response, m.BeginQuorumEpochResponse):
            ok = (
                self._common_response(
                    response.error_code, response.leader_id, response.leader_epoch, now_ms
                )
                is not False
            )
        else:
            ok = True
        if not ok:
            self._requests.backoff(source, now_ms)

    def _common_response(self, error: int, leader_id: int, epoch: int, now_ms: int) -> bool | None:
        """Kafka's maybeHandleCommonResponse: what the epoch and leader of any response say.
        True/False: fully handled (False: back off before retrying); None: go on."""
        leader = _leader_or_none(leader_id)
        if epoch < self.epoch or error == errors.UNKNOWN_LEADER_EPOCH:
            return False  # the responder is behind us: the answer means nothing now
        if epoch > self.epoch or error in (
            errors.FENCED_LEADER_EPOCH,
            errors.NOT_LEADER_OR_FOLLOWER,
        ):
            return self._maybe_transition(leader, epoch, now_ms)
        if leader is not None and self.quorum.leader_id is None:
            self._maybe_transition(leader, epoch, now_ms)
            return None if error == errors.NONE else True
        if error != errors.NONE:
            return False
        return None

    def _handle_vote_response(self, source: int, response: m.VoteResponse, now_ms: int) -> bool:
        data = self.quorum.data
        behind = response.leader_epoch < self.epoch and response.error_code == errors.NONE
        if behind and isinstance(data, ProspectiveState):
            # A voter in an older epoch still has an opinion on a pre-vote, which changes no
            # epoch: count it (else it would be asked again and again until the timeout).
            (data.granted if response.vote_granted else data.rejected).add(source)
            return True
        handled = self._common_response(
            response.error_code, response.leader_id, response.leader_epoch, now_ms
        )
        if handled is not None:
            return handled
        data = self.quorum.data
        if not isinstance(data, ProspectiveState | CandidateState):
            return True
        if response.vote_granted:
            data.granted.add(source)
            return True
        data.rejected.add(source)
        leader = _leader_or_none(response.leader_id)
        if (
            isinstance(data, ProspectiveState)
            and leader is not None
            and leader == self.quorum.leader_id
            and leader != self.node_id
        ):
            # A voter still follows our old leader: go back to fetching from it (KIP-996).
            self._to_follower(self.epoch, leader, now_ms)
        return True

    def _handle_end_quorum_epoch_response(
        self, source: int, response: m.EndQuorumEpochResponse, now_ms: int
    ) -> bool:
        handled = self._common_response(
            response.error_code, response.leader_id, response.leader_epoch, now_ms
        )
        if handled is not None:
            return handled
        data = self.quorum.data
        if isinstance(data, ResignedState):
            data.unacked.discard(source)
        return True

    def _following(self, source: int) -> FollowerState | None:
        data = self.quorum.data
        if isinstance(data, FollowerState) and self.quorum.leader_id == source:
            return data
        return None

    def _handle_fetch_response(self, source: int, response: m.FetchResponse, now_ms: int) -> bool:
        handled = self._common_response(
            response.error_code, response.leader_id, response.leader_epoch, now_ms
        )
        if handled is not None:
            return handled
        follower = self._following(source)
        if follower is None:
            return False
        if response.diverging_epoch is not None:
            self._truncate_to_diverging(response.diverging_epoch)
        elif response.snapshot_id is not None:
            follower.download = SnapshotDownload(response.snapshot_id)
            log.info(
                "node %d: fetching snapshot %s from %d", self.node_id, response.snapshot_id, source
            )
        elif not self._append_as_follower(response):
            return False
        follower.has_fetched = True
        follower.fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        return True

    def _truncate_to_diverging(self, diverging: m.EpochEndOffset) -> None:
        local_epoch, local_end = self.log.end_offset_for_epoch(diverging.epoch)
        target = (
            min(local_end, diverging.end_offset) if local_epoch == diverging.epoch else local_end
        )
        hw = self._high_watermark
        if (hw is not None and target < hw) or target < self.log.start_offset:
            raise RaftError(
                f"node {self.node_id}: told to truncate to {target}, below the high watermark {hw} "
                f"or the log start {self.log.start_offset}"
            )
        end = self.log.truncate_to(target)
        log.info("node %d: truncated to %d (diverging epoch %s)", self.node_id, end, diverging)

    def _append_as_follower(self, response: m.FetchResponse) -> bool:
        batches = response.batches
        if batches and batches[0].base_offset != self.log.end_offset:
            log.warning(
                "node %d: fetched batch at %d, log ends at %d",
                self.node_id,
                batches[0].base_offset,
                self.log.end_offset,
            )
            return False
        for batch in batches:
            self.log.append(batch)
        if response.high_watermark >= 0:
            new = min(response.high_watermark, self.log.end_offset)
            if self._high_watermark is None or new != self._high_watermark:
                self._set_high_watermark(new)
        return True

    def _handle_fetch_snapshot_response(
        self, source: int, response: m.FetchSnapshotResponse, now_ms: int
    ) -> bool:
        error = response.error_code
        common_error = errors.NONE if error == SNAPSHOT_NOT_FOUND else error
        handled = self._common_response(
            common_error, response.leader_id, response.leader_epoch, now_ms
        )
        if handled is not None:
            return handled
        follower = self._following(source)
        if follower is None or follower.download is None:
            return False
        download = follower.download
        follower.fetch_deadline_ms = now_ms + self.config.fetch_timeout_ms
        if response.error_code == SNAPSHOT_NOT_FOUND:
            follower.download = None  # the leader replaced it: start over with a Fetch
            return True
        if response.snapshot_id != download.snapshot_id or response.position != len(download.data):
            return False
        download.data += response.data
        if len(download.data) >= response.size:
            self._install_snapshot(download)
            follower.download = None
        follower.has_fetched = True
        return True

    def _install_snapshot(self, download: SnapshotDownload) -> None:
        snapshot_id, data = download.snapshot_id, bytes(download.data)
        self.log.install_snapshot(snapshot_id, data)
        self._snapshot = LoadSnapshot(snapshot_id, data)
        self._committed = []  # the snapshot replaces whatever came before it
        self._applied = snapshot_id.end_offset
        hw = self._high_watermark
        if hw is None or hw < snapshot_id.end_offset:
            self._set_high_watermark(snapshot_id.end_offset)
        log.info("node %d: installed snapshot %s", self.node_id, snapshot_id)
