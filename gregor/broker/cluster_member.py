"""A node of a networked KRaft quorum (`controller.quorum.voters` or
`controller.quorum.bootstrap.servers` set): the Raft driver, and what runs on it by the node's
`process.roles` (Kafka splits this between KafkaRaftManager, ControllerServer/ControllerApis and
BrokerLifecycleManager).

    member = ClusterMember(1, store, controller, config.membership(), raft_log, quorum_state,
                           raft_config, clock=now_ms)
    member.serve_admin(services)   # a controller's admin writes, with the node's services
    member.lifecycle = ...    # a broker's (runtime/lifecycle.py), over member.controller_channel()
    await member.start()      # listen (controllers), join the quorum, register (brokers)
    await member.stop()       # a broker asks to be fenced, a leader resigns (EndQuorumEpoch)

The driver's committed entries go to the metadata store (replayed on every node, controllers,
brokers and observers alike) and its leader changes to the store and to the broker lifecycle.

A controller (`controller` among the roles) is a voter: its driver listens on the controller
listener, which serves, besides the Raft RPCs:

  BrokerRegistration  on the active controller: QuorumController.register_broker; answered
                      once the RegisterBrokerRecord is committed (broker epoch = its offset);
                      NOT_CONTROLLER elsewhere, INCONSISTENT_CLUSTER_ID for another cluster.
  BrokerHeartbeat     on the active controller: QuorumController.heartbeat (unfences a broker
                      caught up to its registration); answered once its records commit.
  AllocateProducerIds on the active controller: a block of producer ids for a broker (its
                      ProducerIdsRecord committed before the answer).
  AlterPartition      on the active controller: a partition leader's ISR changes
                      (QuorumController.alter_partition), answered once committed; the
                      leaders send them through a ControllerChannel (replication/isr_sender.py).
  admin writes        CreateTopics, DeleteTopics, CreatePartitions, (Incremental)AlterConfigs,
                      and the Envelope in which brokers forward them and DescribeQuorum
                      (controller_apis.py; node/forwarding.py is the brokers' side).

and its controller timer (every CONTROLLER_TICK_S) runs on the active controller: after a new
leadership starts it writes the bootstrap records of a new log (metadata.version), and it fences
brokers silent for `broker.session.timeout.ms` (QuorumController.tick).

A broker-only node (`process.roles=broker`) is an observer: no listener, it fetches the log
from the leader it finds through the voters or the bootstrap servers (raft_driver.py).

A broker (a combined node, or a broker-only one) registers and heartbeats with the active
controller and fetches producer-id blocks ahead (its `lifecycle`: node/lifecycle.py, driven by
runtime/lifecycle.py), through a ControllerChannel that finds the leader and where it listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gregor.broker.config import BrokerConfig, Membership
from gregor.broker.controller_apis import admin_handlers
from gregor.controller.broker_requests import (
    alter_partition_response,
    heartbeat_of,
    heartbeat_response,
    isr_changes_of,
    registration_of,
)
from gregor.controller.local import LocalController
from gregor.controller.quorum_controller import PRODUCER_ID_BLOCK_SIZE
from gregor.handlers.context import Services
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import (
    AllocateProducerIdsResponse,
    AlterPartitionResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
)
from gregor.raft.config import RaftConfig
from gregor.raft.log import RaftLog
from gregor.raft.node import LeaderAndEpoch
from gregor.raft.store import QuorumStateStore
from gregor.runtime.controller_channel import ControllerChannel
from gregor.runtime.lifecycle import BrokerLifecycle
from gregor.runtime.raft_driver import RaftDriver

log = logging.getLogger("gregor.cluster")

CONTROLLER_TICK_S = 0.25
COMMIT_TIMEOUT_S = 30.0
_code = errors.BY_NAME


def networked_controller(
    store: RaftMetadataStore, node_id: int, config: BrokerConfig
) -> LocalController:
    """The controller of a node in a networked quorum (it writes only while active), with the
    configured broker session timeout."""
    controller = LocalController(store, node_id, config.values)
    session_ms = config.get_int("broker.session.timeout.ms")
    controller.config = replace(controller.config, broker_session_timeout_ms=session_ms)
    controller.quorum.config = controller.config
    return controller


class ClusterMember:
    def __init__(
        self,
        node_id: int,
        store: RaftMetadataStore,
        controller: LocalController,
        membership: Membership,
        raft_log: RaftLog,
        quorum_state: QuorumStateStore,
        raft_config: RaftConfig,
        *,
        clock: Callable[[], int],
    ) -> None:
        """A controller's admin handlers come with `serve_admin`, a broker's `lifecycle` is
        set; both before `start`."""
        self.node_id = node_id
        self.store = store
        self.controller = controller
        self.membership = membership
        self.voters = dict(membership.voters or {})
        self.now_ms = clock
        self.driver = RaftDriver(
            node_id,
            raft_log,
            quorum_state,
            config=raft_config,
            cluster_id=self.store.cluster_id,
            on_commit=self.store.on_committed,
            on_snapshot=self.store.on_snapshot,
            on_leader_change=self._on_leader_change,
            clock=clock,  # wall clock: DescribeQuorum reports fetch times in it
            handlers={
                api_keys.BROKER_REGISTRATION: self._on_registration,
                api_keys.BROKER_HEARTBEAT: self._on_heartbeat,
                api_keys.ALLOCATE_PRODUCER_IDS: self._on_allocate_producer_ids,
                api_keys.ALTER_PARTITION: self._on_alter_partition,
            },
        )
        self.store.attach(self.driver)
        self.lifecycle: BrokerLifecycle | None = None  # a broker's, set before start
        self._tasks: list[asyncio.Task[None]] = []
        self._activated_epoch = -1

    def controller_channel(
        self, client_id: str, request_timeout_ms: int = 5000
    ) -> ControllerChannel:
        """A channel of its own to the active controller, found through this node's quorum."""
        return ControllerChannel(
            self.store,
            self.driver.endpoint,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
        )

    def serve_admin(self, services: Services) -> None:
        """On a controller, serve the admin writes (and the Envelopes brokers forward them in)
        on the controller listener, with the node's services."""
        if self.membership.is_controller:
            self.driver.handlers.update(admin_handlers(services))

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        listen = self.membership.controller_listener
        if listen is not None:  # a voter; an observer only makes requests
            await self.driver.bind(*listen)
        await self.driver.start(self.voters, self.membership.bootstrap)
        if self.membership.is_controller:
            self._tasks.append(asyncio.ensure_future(self._controller_timer()))
        if self.lifecycle is not None:
            self.lifecycle.start()

    async def stop(self) -> None:
        if self.lifecycle is not None:
            await self.lifecycle.stop()  # asks to be fenced first
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        await self.driver.stop(resign=True)

    async def leave(self) -> None:
        """A stopping broker's controlled shutdown, then fencing (node/lifecycle.py)."""
        if self.lifecycle is not None:
            await self.lifecycle.leave()

    @property
    def broker_epoch(self) -> int:
        """This broker's epoch (-1: not registered, or no broker here)."""
        return -1 if self.lifecycle is None else self.lifecycle.broker_epoch

    def _on_leader_change(self, change: LeaderAndEpoch) -> None:
        self.store.on_leader_change(change)
        if self.lifecycle is not None:
            self.lifecycle.on_leader_change()

    def allocate_producer_ids(self, count: int) -> int:
        """A producer-id block fetched ahead from the active controller (node/lifecycle.py)."""
        if self.lifecycle is None:
            raise ValueError(f"node {self.node_id} is no broker: it hands out no producer ids")
        return self.lifecycle.allocate_producer_ids(count)

    # -- the active controller ----------------------------------------------------------------

    async def _controller_timer(self) -> None:
        while True:
            await asyncio.sleep(CONTROLLER_TICK_S)
            try:
                self._controller_duties()
            except KafkaError as exc:
                log.debug("controller timer: %s", exc)
            except Exception:
                log.exception("controller timer failed")

    def _controller_duties(self) -> None:
        store = self.store
        if not store.is_active():
            return
        if store.epoch != self._activated_epoch:
            self._activated_epoch = store.epoch
            log.info("node %d is the active controller in epoch %d", self.node_id, store.epoch)
            self.controller.activate()
        now_ms = self.now_ms()
        self.controller.tick(now_ms)
        self.controller.balance_leaders(now_ms)

    async def _wait_appended(self) -> None:
        await asyncio.wait_for(
            self.store.wait_committed(self.store.last_appended), COMMIT_TIMEOUT_S
        )

    async def _on_registration(self, version: int, req: Any) -> Any:
        if req.cluster_id != self.store.cluster_id:
            return BrokerRegistrationResponse(
                error_code=_code["INCONSISTENT_CLUSTER_ID"].code, broker_epoch=-1
            )
        registration = registration_of(req)
        try:
            code, epoch = self.controller.register_broker(registration, self.now_ms())
            if code == errors.NONE:
                await self._wait_appended()
                log.info("registered broker %d (epoch %d)", req.broker_id, epoch)
        except KafkaError as exc:
            code, epoch = exc.code, -1
        except TimeoutError:
            code, epoch = _code["REQUEST_TIMED_OUT"].code, -1
        return BrokerRegistrationResponse(error_code=code, broker_epoch=epoch)

    async def _on_heartbeat(self, version: int, req: Any) -> Any:
        beat = heartbeat_of(req)
        try:
            answer, wrote = self.controller.heartbeat(beat, self.now_ms())
            if wrote:
                await self._wait_appended()
        except KafkaError as exc:
            return BrokerHeartbeatResponse(error_code=exc.code)
        except TimeoutError:
            return BrokerHeartbeatResponse(error_code=_code["REQUEST_TIMED_OUT"].code)
        return heartbeat_response(answer)

    async def _on_allocate_producer_ids(self, version: int, req: Any) -> Any:
        try:
            first = self.controller.allocate_producer_ids_for(
                req.broker_id, req.broker_epoch, PRODUCER_ID_BLOCK_SIZE
            )
            await self._wait_appended()
        except KafkaError as exc:
            return AllocateProducerIdsResponse(
                error_code=exc.code, producer_id_start=-1, producer_id_len=0
            )
        except TimeoutError:
            return AllocateProducerIdsResponse(
                error_code=_code["REQUEST_TIMED_OUT"].code, producer_id_start=-1, producer_id_len=0
            )
        return AllocateProducerIdsResponse(
            error_code=errors.NONE, producer_id_start=first, producer_id_len=PRODUCER_ID_BLOCK_SIZE
        )

    async def _on_alter_partition(self, version: int, req: Any) -> Any:
        R = AlterPartitionResponse
        changes, where = isr_changes_of(version, req)
        try:
            answer, wrote = self.controller.alter_partition(
                req.broker_id, req.broker_epoch, changes
            )
            if wrote:
                await self._wait_appended()
        except KafkaError as exc:
            return R(error_code=exc.code, topics=[])
        except TimeoutError:
            return R(error_code=_code["REQUEST_TIMED_OUT"].code, topics=[])
        return alter_partition_response(where, answer)
