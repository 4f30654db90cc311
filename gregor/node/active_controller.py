"""The controller's side of a quorum node, sans I/O (Kafka's ControllerApis for the broker
RPCs, and the periodic events of its QuorumController): what it answers brokers, when, and
what it does on its own at each tick.

    core = ActiveControllerCore(node_id, store, controller)
    answer = core.handle(api_keys.BROKER_HEARTBEAT, version, request, now_ms)
    # a response, or a Pending of one (completed once the records it wrote are committed)
    deadline = core.poll(now_ms)      # the tick when due, answers past their deadline

Requests (the controller listener's, beside the Raft RPCs):

  BrokerRegistration  QuorumController.register_broker (broker epoch = the record's offset);
                      INCONSISTENT_CLUSTER_ID for another cluster
  BrokerHeartbeat     QuorumController.heartbeat (unfences a broker caught up to its
                      registration)
  AllocateProducerIds a block of PRODUCER_ID_BLOCK_SIZE producer ids for a broker
  AlterPartition      a partition leader's ISR changes (v3: each member with its broker epoch)

Each is planned by the controller (NOT_CONTROLLER off the active one) and answered once what
the controller last appended is committed and replayed here (`store.wait_committed`): at once
when it already is, NOT_CONTROLLER if leadership is lost first, REQUEST_TIMED_OUT after
COMMIT_TIMEOUT_MS. A heartbeat or an AlterPartition that wrote nothing is answered at once.

Tick (every TICK_MS, on the active controller only): on the first tick of a new leadership
epoch `activate` (it writes the bootstrap records of a new log), then fence the brokers whose
session expired (`tick`) and move leaders back to preferred replicas when due
(`balance_leaders`). Its writes answer nobody: they are committed in their own time. A voter
told that another node leads (`on_leader_change`) does not tick until it is told it leads:
it would find nothing to do four times a second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from gregor.controller.broker_requests import (
    alter_partition_response,
    heartbeat_of,
    heartbeat_response,
    isr_changes_of,
    registration_of,
)
from gregor.controller.local import LocalController
from gregor.controller.quorum_controller import PRODUCER_ID_BLOCK_SIZE
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import (
    AllocateProducerIdsResponse,
    AlterPartitionResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
)
from gregor.protocol.outbound import earliest
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperation, DelayedOperationPurgatory

log = logging.getLogger("gregor.cluster")

TICK_MS = 250
COMMIT_TIMEOUT_MS = 30_000
INCONSISTENT_CLUSTER_ID = errors.BY_NAME["INCONSISTENT_CLUSTER_ID"].code
REQUEST_TIMED_OUT = errors.BY_NAME["REQUEST_TIMED_OUT"].code
Respond = Callable[[int], Any]  # error code (NONE: committed) -> the response


class CommitLog(Protocol):
    """What the core needs of the metadata store (metadata/raft_store.py)."""

    cluster_id: str
    last_appended: int

    @property
    def epoch(self) -> int: ...

    def is_active(self) -> bool: ...

    def wait_committed(self, offset: int, done: Callable[[KafkaError | None], object]) -> None: ...


class AwaitingCommit(DelayedOperation):
    """An answer held until what the controller appended is committed, or its deadline."""

    __slots__ = ("respond", "answer", "code")

    def __init__(self, deadline_ms: int, respond: Respond) -> None:
        super().__init__(deadline_ms)
        self.respond = respond
        self.answer = Pending("controller write")
        self.code: int | None = None

    def settle(self, error: KafkaError | None) -> None:
        if self.code is None:
            self.code = errors.NONE if error is None else error.code

    def try_complete(self) -> bool:
        return self.code is not None

    def on_expiration(self) -> None:
        self.code = REQUEST_TIMED_OUT

    def on_complete(self) -> None:
        assert self.code is not None
        self.answer.complete(self.respond(self.code))


class ActiveControllerCore:
    def __init__(
        self,
        node_id: int,
        store: CommitLog,
        controller: LocalController,
        *,
        tick_ms: int = TICK_MS,
        commit_timeout_ms: int = COMMIT_TIMEOUT_MS,
        duties: bool = True,
    ) -> None:
        """`duties`: whether this node ticks (a voter); an observer only answers (NOT_CONTROLLER)."""
        self.node_id = node_id
        self.store = store
        self.controller = controller
        self.tick_ms = tick_ms
        self.commit_timeout_ms = commit_timeout_ms
        self.duties = duties
        self.next_tick_ms: int | None = None  # None: at the first poll
        self.may_lead = True  # False once told another node leads (on_leader_change)
        self.activated_epoch = -1
        self.waiting = DelayedOperationPurgatory("controller")
        self.waiting.wakeup = self._wake
        self.wakeup: Callable[[], None] | None = None  # set by the driver
        self.requests: dict[int, Callable[[int, Any, int], Any]] = {
            api_keys.BROKER_REGISTRATION: self.register_broker,
            api_keys.BROKER_HEARTBEAT: self.heartbeat,
            api_keys.ALLOCATE_PRODUCER_IDS: self.allocate_producer_ids,
            api_keys.ALTER_PARTITION: self.alter_partition,
        }

    def on_leader_change(self, leader_id: int | None) -> None:
        """The metadata log's leader changed: tick only while this node leads (or none is
        known yet); polled at once, so a new leader ticks (activates) on the next turn."""
        self.may_lead = leader_id is None or leader_id == self.node_id
        if not self.may_lead:
            self.next_tick_ms = None  # the first tick of a later leadership comes at once
        self._wake()

    def _wake(self) -> None:
        if self.wakeup is not None:
            self.wakeup()

    def handle(self, api_key: int, version: int, request: Any, now_ms: int) -> Any:
        """The response to `request`, or a Pending of it."""
        return self.requests[api_key](version, request, now_ms)

    # -- time ---------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> int | None:
        """Answer what waited past its deadline; tick when due. The next deadline."""
        self.waiting.expire(now_ms)
        if self.duties and self.may_lead:
            if self.next_tick_ms is None or now_ms >= self.next_tick_ms:
                self.next_tick_ms = now_ms + self.tick_ms
                try:
                    self.tick(now_ms)
                except KafkaError as exc:  # lost the leadership meanwhile, mostly
                    log.debug("controller tick: %s", exc)
        tick_ms = self.next_tick_ms if self.may_lead else None
        return earliest(tick_ms, self.waiting.next_deadline_ms())

    def tick(self, now_ms: int) -> None:
        store = self.store
        if not store.is_active():
            return
        if store.epoch != self.activated_epoch:
            self.activated_epoch = store.epoch
            log.info("node %d is the active controller in epoch %d", self.node_id, store.epoch)
            self.controller.activate()
        self.controller.tick(now_ms)
        self.controller.balance_leaders(now_ms)

    # -- answering once committed -------------------------------------------------------------

    def _after_commit(self, now_ms: int, respond: Respond) -> Any:
        """`respond(code)` once the last offset appended is committed (or not, in time)."""
        op = AwaitingCommit(now_ms + self.commit_timeout_ms, respond)

        def committed(error: KafkaError | None) -> None:
            op.settle(error)
            self.waiting.force_complete(op)

        self.store.wait_committed(self.store.last_appended, committed)  # may call back now
        if op.completed:
            return op.answer.value
        self.waiting.watch(op, ())
        return op.answer

    # -- the requests -------------------------------------------------------------------------

    def register_broker(self, version: int, req: Any, now_ms: int) -> Any:
        R = BrokerRegistrationResponse
        if req.cluster_id != self.store.cluster_id:
            return R(error_code=INCONSISTENT_CLUSTER_ID, broker_epoch=-1)
        try:
            code, epoch = self.controller.register_broker(registration_of(req), now_ms)
        except KafkaError as exc:
            return R(error_code=exc.code, broker_epoch=-1)
        if code != errors.NONE:
            return R(error_code=code, broker_epoch=epoch)

        def respond(code: int) -> Any:
            if code != errors.NONE:
                return R(error_code=code, broker_epoch=-1)
            log.info("registered broker %d (epoch %d)", req.broker_id, epoch)
            return R(error_code=errors.NONE, broker_epoch=epoch)

        return self._after_commit(now_ms, respond)

    def heartbeat(self, version: int, req: Any, now_ms: int) -> Any:
        try:
            answer, wrote = self.controller.heartbeat(heartbeat_of(req), now_ms)
        except KafkaError as exc:
            return BrokerHeartbeatResponse(error_code=exc.code)

        def respond(code: int) -> Any:
            if code != errors.NONE:
                return BrokerHeartbeatResponse(error_code=code)
            return heartbeat_response(answer)

        return self._after_commit(now_ms, respond) if wrote else respond(errors.NONE)

    def allocate_producer_ids(self, version: int, req: Any, now_ms: int) -> Any:
        R = AllocateProducerIdsResponse

        def failed(code: int) -> Any:
            return R(error_code=code, producer_id_start=-1, producer_id_len=0)

        try:
            first = self.controller.allocate_producer_ids_for(
                req.broker_id, req.broker_epoch, PRODUCER_ID_BLOCK_SIZE
            )
        except KafkaError as exc:
            return failed(exc.code)

        def respond(code: int) -> Any:
            if code != errors.NONE:
                return failed(code)
            return R(
                error_code=errors.NONE,
                producer_id_start=first,
                producer_id_len=PRODUCER_ID_BLOCK_SIZE,
            )

        return self._after_commit(now_ms, respond)

    def alter_partition(self, version: int, req: Any, now_ms: int) -> Any:
        changes, where = isr_changes_of(version, req)
        try:
            answer, wrote = self.controller.alter_partition(
                req.broker_id, req.broker_epoch, changes
            )
        except KafkaError as exc:
            return AlterPartitionResponse(error_code=exc.code, topics=[])

        def respond(code: int) -> Any:
            if code != errors.NONE:
                return AlterPartitionResponse(error_code=code, topics=[])
            return alter_partition_response(where, answer)

        return self._after_commit(now_ms, respond) if wrote else respond(errors.NONE)
