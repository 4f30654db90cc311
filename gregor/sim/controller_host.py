"""A controller node of the data-plane simulation: a RaftNode of the metadata quorum and, while
it is the active controller, the QuorumController planning on its image (a thin driver, as
controller/local.py and metadata/raft_store.py are for the real broker).

Every node replays what the quorum committed into its committed image and keeps the records
for brokers to read (`MetadataFetch`). The node is active once it leads and its own
start-of-epoch record is committed (so its image holds everything committed before its epoch);
it then builds a QuorumController on the committed image and replays into it every record it
appends, at once, so the next operation sees them. A request's answer goes out once its records
are committed; on losing leadership the waiting ones get NOT_CONTROLLER.

The raft log and quorum state are the memory ones of the Raft simulation (disk.py): a crash
keeps what was flushed and maybe a torn prefix of the rest. The node flushes asynchronously, as
the real driver runs it (`Effects.flush`, then `flushed`); here the disk completes a flush at
once, within the effects that asked for it (the Raft simulation, cluster.py, delays them), so
the seeds this simulation pins keep their runs.
"""

from __future__ import annotations

import bisect
import random
import uuid
from collections.abc import Callable
from typing import Any

from gregor.controller.broker_requests import (
    alter_partition_response,
    heartbeat_of,
    heartbeat_response,
    isr_changes_of,
    registration_of,
)
from gregor.controller.quorum_controller import (
    ControllerConfig,
    ControllerResult,
    QuorumController,
    bootstrap_records,
)
from gregor.metadata import records as r
from gregor.metadata.image import EMPTY_IMAGE, METADATA_VERSION, MetadataImage
from gregor.protocol import messages as m
from gregor.raft.config import RaftConfig
from gregor.raft.leader import NEVER
from gregor.raft.node import Effects, NotLeader, RaftNode
from gregor.sim.disk import SimLog, SimStore
from gregor.sim.rpc import (
    CreateTopics,
    MetadataEntries,
    MetadataFetch,
    NotController,
    SimContext,
    SimHost,
)

METADATA_FETCH_MAX = 200  # records per MetadataFetch answer
TICK_MS = 250  # fencing and leader balancing checks


class ControllerHost(SimHost):
    def __init__(
        self,
        sim: SimContext,
        node_id: int,
        voters: list[int],
        config: ControllerConfig,
        raft: RaftConfig,
        node_factory: Callable[..., RaftNode] = RaftNode,
    ) -> None:
        super().__init__(sim, node_id)
        self.voters = voters
        self.config = config
        self.raft_config = raft
        self.node_factory = node_factory
        self.disk = SimLog()
        self.store = SimStore()
        self.node: RaftNode | None = None
        self.poll_at = NEVER
        self.poll_token = 0
        self.records: list[tuple[Any, int, int]] = []  # committed (record, offset, epoch)
        self.offsets: list[int] = []  # their offsets, for bisect
        self.image: MetadataImage = EMPTY_IMAGE
        self.committed_end = 0  # the next offset to be committed, as this node applied
        self.quorum: QuorumController | None = None
        self.active_epoch = -1
        self.waiting: list[tuple[int, Callable[[], None]]] = []  # (last offset, answer)

    # -- life --------------------------------------------------------------------------------

    def boot(self) -> None:
        self.records, self.offsets, self.image, self.committed_end = [], [], EMPTY_IMAGE, 0
        self.quorum, self.active_epoch, self.waiting = None, -1, []
        rng = random.Random(self.sim.rng.getrandbits(64))
        self.node = self.node_factory(
            self.node_id,
            self.voters,
            self.disk,
            self.store,
            rng,
            self.now_ms(),
            self.raft_config,
            async_flush=True,
        )
        self.poll_at = NEVER
        self.apply(self.node.poll(self.now_ms()))
        self.sim.timer(self, self.sim.now + TICK_MS, "tick")

    def crash(self, rng: random.Random, torn_rate: float, power_loss: bool = True) -> int:
        self.node = None
        self.quorum = None
        self.waiting = []
        self.poll_token += 1
        self.poll_at = NEVER
        return self.disk.crash(rng, torn_rate)

    # -- raft --------------------------------------------------------------------------------

    def on_message(self, src: int, message: Any) -> None:
        if self.node is not None:
            self.apply(self.node.receive(self.now_ms(), src, message))

    def timer_poll(self, token: int) -> None:
        if token == self.poll_token and self.node is not None:
            # The timer is spent: a deadline equal to the one just reached (a candidate's
            # election backoff of 0) needs a new one, as the real driver re-arms at each poll.
            self.poll_at = NEVER
            self.apply(self.node.poll(self.now_ms()))

    def apply(self, effects: Effects) -> None:
        node = self.node
        assert node is not None
        while effects.flush is not None:  # done at once: these effects, then the flush's
            self.disk.flush(effects.flush)
            more = node.flushed(self.now_ms(), effects.flush)
            more.outbound[:0] = effects.outbound
            more.committed[:0] = effects.committed
            more.leader_change = more.leader_change or effects.leader_change
            effects = more
        for send in effects.outbound:
            self.sim.send(self, send.destination, send.message)
        if effects.snapshot is not None:
            raise AssertionError("the data-plane simulation takes no metadata snapshots")
        for entry in effects.committed:
            self.committed_end = entry.offset + 1
            if entry.control:
                continue
            rec = (r.decode(entry.data), entry.offset, entry.epoch)
            self.records.append(rec)
            self.offsets.append(entry.offset)
            self.image = self.image.replay([rec])
            self.sim.checker.on_metadata(rec)
        self._maybe_activate()
        self._answer_committed()
        deadline = effects.next_deadline_ms
        if deadline != self.poll_at:
            self.poll_at = deadline
            self.poll_token += 1
            if deadline < NEVER:
                # The node's deadlines are on this host's clock: the timer is in simulated time.
                at = max(self.sim.now, deadline - self.now_ms() + self.sim.now)
                self.sim.timer(self, at, "poll", self.poll_token)

    def is_active(self) -> bool:
        node = self.node
        if node is None or not node.is_leader:
            return False
        leader = node.leader_state
        hw = node.high_watermark
        return leader is not None and hw is not None and hw > leader.epoch_start_offset

    def _maybe_activate(self) -> None:
        node = self.node
        assert node is not None
        if not self.is_active():
            if self.quorum is not None:
                self.quorum = None
                self.active_epoch = -1
                waiting, self.waiting = self.waiting, []
                for _offset, answer in waiting:
                    answer()  # the answers say NOT_CONTROLLER now (see `commit`)
            return
        if self.quorum is not None and self.active_epoch == node.epoch:
            return
        seed = self.sim.rng.getrandbits(64)
        ids = random.Random(seed)
        self.quorum = QuorumController(
            self.config,
            self.image,
            new_uuid=lambda: uuid.UUID(int=ids.getrandbits(128)),
            rng=random.Random(f"placement-{seed}"),  # its own stream: the others are unchanged
        )
        self.active_epoch = node.epoch
        self.sim.record("active", self.node_id, node.epoch)
        if METADATA_VERSION not in self.image.features:
            self.commit(bootstrap_records(), None)

    def _answer_committed(self) -> None:
        if not self.waiting:
            return
        done = [w for w in self.waiting if w[0] < self.committed_end]
        if done:
            self.waiting = [w for w in self.waiting if w[0] >= self.committed_end]
            for _offset, answer in done:
                answer()

    def commit(self, records: list[Any], answer: Callable[[], None] | None) -> None:
        """Append `records` (planned on the controller's image) and replay them into it;
        `answer` runs once they are committed, or at once when there are none."""
        node, quorum = self.node, self.quorum
        assert node is not None and quorum is not None
        if not records:
            # Planned on an image that may hold appended records not committed yet: answer
            # once they are (as Kafka's controller, and controller/local.py, wait for the last
            # appended offset), or they may be lost with the leadership, and the answer wrong.
            appended = node.log.end_offset - 1
            if answer is not None and appended >= self.committed_end:
                self.waiting.append((appended, answer))
            elif answer is not None:
                answer()
            return
        first = node.log.end_offset
        last = node.append([r.encode(rec) for rec in records], self.now_ms())
        if isinstance(last, NotLeader):
            raise AssertionError("an active controller leads")
        quorum.replay([(rec, first + i, node.epoch) for i, rec in enumerate(records)])
        if answer is not None:
            self.waiting.append((last, answer))
        self.apply(node.poll(self.now_ms()))

    # -- requests ----------------------------------------------------------------------------

    def on_request(self, src: int, correlation_id: int, body: Any) -> None:
        if isinstance(body, MetadataFetch):
            i = bisect.bisect_left(self.offsets, body.offset)
            entries = tuple(self.records[i : i + METADATA_FETCH_MAX])
            self.answer(
                src, correlation_id, MetadataEntries(entries, self.committed_end, self.is_active())
            )
            return
        quorum = self.quorum
        if quorum is None or not self.is_active():
            leader = self.node.leader_id if self.node is not None else None
            self.answer(src, correlation_id, NotController(leader))
            return
        result = self._plan(quorum, body)
        epoch = self.active_epoch

        def reply() -> None:
            ok = self.quorum is not None and self.active_epoch == epoch
            self.answer(src, correlation_id, result.response if ok else NotController(None))

        self.commit(result.records, reply)

    def _plan(self, quorum: QuorumController, body: Any) -> ControllerResult[Any]:
        """The records a request appends and its answer, as the networked controller plans them
        (broker/cluster_member.py): the brokers' cores send the protocol's requests."""
        now = self.now_ms()
        if isinstance(body, m.BrokerRegistrationRequest):
            assert self.node is not None
            reg = quorum.register_broker(registration_of(body), now, self.node.log.end_offset)
            answer: Any = m.BrokerRegistrationResponse(
                error_code=reg.response.error_code, broker_epoch=reg.response.broker_epoch
            )
            return ControllerResult(reg.records, answer)
        if isinstance(body, m.BrokerHeartbeatRequest):
            beat = quorum.heartbeat(heartbeat_of(body), now)
            return ControllerResult(beat.records, heartbeat_response(beat.response))
        if isinstance(body, m.AlterPartitionRequest):
            changes, where = isr_changes_of(3, body)
            alter = quorum.alter_partition(body.broker_id, body.broker_epoch, changes)
            return ControllerResult(alter.records, alter_partition_response(where, alter.response))
        if isinstance(body, m.AllocateProducerIdsRequest):
            ids = quorum.allocate_producer_ids(body.broker_id, body.broker_epoch)
            code, first, count = ids.response
            answer = m.AllocateProducerIdsResponse(
                error_code=code, producer_id_start=first, producer_id_len=count
            )
            return ControllerResult(ids.records, answer)
        if isinstance(body, CreateTopics):
            return quorum.create_topics(body.topics)
        raise AssertionError(f"unknown request {body!r}")

    def timer_tick(self) -> None:
        self.sim.timer(self, self.sim.now + TICK_MS, "tick")
        if self.quorum is None or not self.is_active():
            return
        now = self.now_ms()
        fenced = self.quorum.tick(now)
        if fenced.records:
            self.sim.record("fence", self.node_id, fenced.response)
        self.commit(fenced.records, None)
        if self.quorum is None:
            return  # it lost the leadership meanwhile
        balance = self.quorum.balance_leaders(now)
        if balance.records:
            self.sim.record("balance", self.node_id, balance.response)
        self.commit(balance.records, None)
