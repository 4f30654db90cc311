"""A node of a networked KRaft quorum (`controller.quorum.voters` set): the Raft driver on the
controller listener, the controller APIs served there, and this broker's registration and
heartbeats (what Kafka splits between KafkaRaftManager, ControllerServer/ControllerApis and
BrokerLifecycleManager).

    member = ClusterMember(broker, voters, ("127.0.0.1", 9093), raft_log, quorum_state, raft_config)
    await member.start()      # listen, join the quorum, start registering and heartbeating
    await member.stop()       # a leader resigns first (EndQuorumEpoch), then everything closes

The driver's committed entries go to the metadata store (replayed on every node, followers
too) and its leader changes to the store and to here. On the controller listener, besides the
Raft RPCs:

  BrokerRegistration  on the active controller: QuorumController.register_broker; answered
                      once the RegisterBrokerRecord is committed (broker epoch = its offset);
                      NOT_CONTROLLER elsewhere, INCONSISTENT_CLUSTER_ID for another cluster.
  BrokerHeartbeat     on the active controller: QuorumController.heartbeat (unfences a broker
                      caught up to its registration); answered once its records commit.

  AllocateProducerIds on the active controller: a block of producer ids for a broker (its
                      ProducerIdsRecord committed before the answer).
  AlterPartition      on the active controller: a partition leader's ISR changes
                      (QuorumController.alter_partition), answered once committed; the
                      leaders send them through `client` (broker/alter_partition.py).

The controller timer (every CONTROLLER_TICK_S) runs on the active controller: after a new
leadership starts it writes the bootstrap records of a new log (metadata.version), and it fences
brokers silent for `broker.session.timeout.ms` (QuorumController.tick).

The lifecycle loop (the broker side): register with the active controller (found through the
store's leader id and `controller.quorum.voters`), then heartbeat every
`broker.heartbeat.interval.ms` with the offset replayed so far; faster while still fenced or when
the controller moves; registers again when told STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED.
A restarted broker is refused (DUPLICATE_BROKER_REGISTRATION) until its old incarnation's
session has expired, as in Kafka; it retries meanwhile.

Stopping (SIGTERM), the broker first makes a controlled shutdown (a heartbeat with
want_shut_down, unless controlled.shutdown.enable=false: the controller moves the leadership of
its partitions to other ISR members and takes it out of every ISR), then asks to be fenced (a
heartbeat with want_fence), so Metadata stops naming it at once and its next start registers
without waiting for the old session to expire.

Producer ids (Kafka's RPCProducerIdManager): once registered, the broker keeps one block of
producer ids fetched ahead from the active controller (AllocateProducerIds); the
ProducerIdManager takes blocks from here (`allocate_producer_ids`) and a taken block makes the
next one be fetched at once. With no block at hand it is COORDINATOR_LOAD_IN_PROGRESS (the
producer retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gregor.controller.quorum_controller import (
    PRODUCER_ID_BLOCK_SIZE,
    BrokerHeartbeat,
    BrokerRegistration,
    IsrChange,
    Listener,
)
from gregor.metadata.image import METADATA_VERSION
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from gregor.raft.config import RaftConfig
from gregor.raft.log import RaftLog
from gregor.raft.node import LeaderAndEpoch
from gregor.raft.store import QuorumStateStore
from gregor.runtime.client import ClientError, NetworkClient
from gregor.runtime.raft_driver import RaftDriver

if TYPE_CHECKING:
    from gregor.broker.broker import BrokerServer

log = logging.getLogger("gregor.cluster")

CONTROLLER_TICK_S = 0.25
REGISTRATION_VERSION = 3
HEARTBEAT_VERSION = 1
COMMIT_TIMEOUT_S = 30.0
_code = errors.BY_NAME
NOT_CONTROLLER = _code["NOT_CONTROLLER"].code
RE_REGISTER = {_code["STALE_BROKER_EPOCH"].code, _code["BROKER_ID_NOT_REGISTERED"].code}


class ClusterMember:
    def __init__(
        self,
        broker: BrokerServer,
        voters: Mapping[int, tuple[str, int]],
        listen: tuple[str, int],
        raft_log: RaftLog,
        quorum_state: QuorumStateStore,
        raft_config: RaftConfig,
    ) -> None:
        self.broker = broker
        self.store = broker.store
        self.controller = broker.controller
        self.voters = dict(voters)
        self.listen = listen
        self.heartbeat_interval_s = broker.config.get_int("broker.heartbeat.interval.ms") / 1000.0
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.driver = RaftDriver(
            broker.node_id,
            raft_log,
            quorum_state,
            config=raft_config,
            cluster_id=self.store.cluster_id,
            on_commit=self.store.on_committed,
            on_snapshot=self.store.on_snapshot,
            on_leader_change=self._on_leader_change,
            clock=broker.now_ms,  # wall clock: DescribeQuorum reports fetch times in it
            handlers={
                api_keys.BROKER_REGISTRATION: self._on_registration,
                api_keys.BROKER_HEARTBEAT: self._on_heartbeat,
                api_keys.ALLOCATE_PRODUCER_IDS: self._on_allocate_producer_ids,
                api_keys.ALTER_PARTITION: self._on_alter_partition,
                api_keys.ENVELOPE: lambda version, req: self.broker.forwarder.serve_envelope(version, req),
            },
        )
        self.store.attach(self.driver)
        self.client: NetworkClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._activated_epoch = -1
        self._leader_moved = asyncio.Event()
        self._pid_blocks: deque[int] = deque()  # first ids of blocks fetched ahead
        self._pid_wanted = asyncio.Event()
        self._left = False  # leaving the cluster: no more heartbeats

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        await self.driver.bind(*self.listen)
        await self.driver.start(self.voters)
        self.client = NetworkClient(
            self.voters,
            client_id=f"broker-{self.broker.node_id}",
            request_timeout_ms=5000,
            connect_timeout_ms=2000,
            reconnect_backoff_ms=50,
            reconnect_backoff_max_ms=500,
        )
        self._tasks = [
            asyncio.ensure_future(self._controller_timer()),
            asyncio.ensure_future(self._lifecycle()),
            asyncio.ensure_future(self._prefetch_producer_ids()),
        ]

    async def stop(self) -> None:
        await self.leave()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self.client is not None:
            await self.client.close()
        await self.driver.stop(resign=True)

    async def leave(self) -> None:
        """A stopping broker hands its leaderships over (controlled shutdown), then asks the
        controller to fence it, so clients stop being sent to it at once and its next start
        may register at once. Heartbeats stop (they would unfence it). Once only."""
        if self._left:
            return
        self._left = True
        steps = [(False, True)]
        if self.broker.config_value("controlled.shutdown.enable"):
            steps.insert(0, (True, False))
        for want_shut_down, want_fence in steps:
            leader = self.store.leader_id
            if self.client is None or self.broker_epoch < 0 or leader is None or leader not in self.voters:
                return
            request = BrokerHeartbeatRequest(
                broker_id=self.broker.node_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=self.store.applied,
                want_fence=want_fence,
                want_shut_down=want_shut_down,
            )
            what = "fenced for shutdown" if want_fence else "handed its leaderships over (controlled shutdown)"
            try:
                answer = await self.client.send(leader, api_keys.BROKER_HEARTBEAT, HEARTBEAT_VERSION, request, timeout_ms=1000)
                if answer.error_code == errors.NONE:
                    log.info("broker %d %s", self.broker.node_id, what)
            except ClientError as exc:
                log.info("broker %d not %s: %s", self.broker.node_id, what, exc)

    def _on_leader_change(self, change: LeaderAndEpoch) -> None:
        self.store.on_leader_change(change)
        self._leader_moved.set()

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
            log.info("node %d is the active controller in epoch %d", self.broker.node_id, store.epoch)
            self.controller.activate()
        self.controller.tick(self.broker.now_ms())

    async def _wait_appended(self) -> None:
        await asyncio.wait_for(self.store.wait_committed(self.store.last_appended), COMMIT_TIMEOUT_S)

    async def _on_registration(self, version: int, req: Any) -> Any:
        if req.cluster_id != self.store.cluster_id:
            return BrokerRegistrationResponse(error_code=_code["INCONSISTENT_CLUSTER_ID"].code, broker_epoch=-1)
        registration = BrokerRegistration(
            req.broker_id,
            req.incarnation_id,
            tuple(Listener(li.name, li.host, li.port, li.security_protocol) for li in req.listeners),
            req.rack,
            tuple(req.log_dirs or ()),
        )
        try:
            code, epoch = self.controller.register_broker(registration, self.broker.now_ms())
            if code == errors.NONE:
                await self._wait_appended()
                log.info("registered broker %d (epoch %d)", req.broker_id, epoch)
        except KafkaError as exc:
            code, epoch = exc.code, -1
        except TimeoutError:
            code, epoch = _code["REQUEST_TIMED_OUT"].code, -1
        return BrokerRegistrationResponse(error_code=code, broker_epoch=epoch)

    async def _on_heartbeat(self, version: int, req: Any) -> Any:
        beat = BrokerHeartbeat(
            req.broker_id, req.broker_epoch, req.current_metadata_offset, req.want_fence, req.want_shut_down
        )
        try:
            answer, wrote = self.controller.heartbeat(beat, self.broker.now_ms())
            if wrote:
                await self._wait_appended()
        except KafkaError as exc:
            return BrokerHeartbeatResponse(error_code=exc.code)
        except TimeoutError:
            return BrokerHeartbeatResponse(error_code=_code["REQUEST_TIMED_OUT"].code)
        return BrokerHeartbeatResponse(
            error_code=answer.error_code,
            is_caught_up=answer.is_caught_up,
            is_fenced=answer.is_fenced,
            should_shut_down=answer.should_shut_down,
        )

    async def _on_allocate_producer_ids(self, version: int, req: Any) -> Any:
        try:
            first = self.controller.allocate_producer_ids_for(req.broker_id, req.broker_epoch, PRODUCER_ID_BLOCK_SIZE)
            await self._wait_appended()
        except KafkaError as exc:
            return AllocateProducerIdsResponse(error_code=exc.code, producer_id_start=-1, producer_id_len=0)
        except TimeoutError:
            return AllocateProducerIdsResponse(
                error_code=_code["REQUEST_TIMED_OUT"].code, producer_id_start=-1, producer_id_len=0
            )
        return AllocateProducerIdsResponse(
            error_code=errors.NONE, producer_id_start=first, producer_id_len=PRODUCER_ID_BLOCK_SIZE
        )

    async def _on_alter_partition(self, version: int, req: Any) -> Any:
        R = AlterPartitionResponse
        changes, where = [], []
        for t in req.topics:
            for pd in t.partitions:
                if version >= 3:
                    isr = [b.broker_id for b in pd.new_isr_with_epochs]
                    epochs = {b.broker_id: b.broker_epoch for b in pd.new_isr_with_epochs}
                else:
                    isr, epochs = list(pd.new_isr), {}
                changes.append(
                    IsrChange(t.topic_id, pd.partition_index, pd.leader_epoch, pd.partition_epoch, isr, epochs,
                              pd.leader_recovery_state)
                )  # fmt: skip
                where.append((t.topic_id, pd.partition_index))
        try:
            answer, wrote = self.controller.alter_partition(req.broker_id, req.broker_epoch, changes)
            if wrote:
                await self._wait_appended()
        except KafkaError as exc:
            return R(error_code=exc.code, topics=[])
        except TimeoutError:
            return R(error_code=_code["REQUEST_TIMED_OUT"].code, topics=[])
        if isinstance(answer, int):
            return R(error_code=answer, topics=[])
        topics: dict[uuid.UUID, list[Any]] = {}
        for (topic_id, index), res in zip(where, answer, strict=True):
            topics.setdefault(topic_id, []).append(
                R.PartitionData(
                    partition_index=index, error_code=res.error_code, leader_id=res.leader,
                    leader_epoch=res.leader_epoch, isr=list(res.isr), partition_epoch=res.partition_epoch,
                )
            )  # fmt: skip
        return R(error_code=errors.NONE, topics=[R.TopicData(topic_id=t, partitions=ps) for t, ps in topics.items()])

    # -- producer ids -------------------------------------------------------------------------

    def allocate_producer_ids(self, count: int) -> int:
        """The first id of a block of `count` (PRODUCER_ID_BLOCK_SIZE) fetched ahead."""
        if count != PRODUCER_ID_BLOCK_SIZE:
            raise ValueError(f"producer id blocks are {PRODUCER_ID_BLOCK_SIZE} ids, not {count}")
        self._pid_wanted.set()
        if not self._pid_blocks:
            raise KafkaError(
                _code["COORDINATOR_LOAD_IN_PROGRESS"].code,
                "no producer id block from the controller yet",
            )
        return self._pid_blocks.popleft()

    async def _prefetch_producer_ids(self) -> None:
        assert self.client is not None
        while True:
            if self._pid_blocks:
                await self._pid_wanted.wait()
                self._pid_wanted.clear()
                continue
            leader = self.store.leader_id
            if self.broker_epoch < 0 or leader is None or leader not in self.voters:
                await asyncio.sleep(0.2)
                continue
            request = AllocateProducerIdsRequest(broker_id=self.broker.node_id, broker_epoch=self.broker_epoch)
            try:
                answer = await self.client.send(leader, api_keys.ALLOCATE_PRODUCER_IDS, 0, request)
            except ClientError:
                await asyncio.sleep(0.2)
                continue
            if answer.error_code != errors.NONE or answer.producer_id_len != PRODUCER_ID_BLOCK_SIZE:
                await asyncio.sleep(0.2)
                continue
            self._pid_blocks.append(answer.producer_id_start)

    # -- this broker's registration and heartbeats --------------------------------------------

    async def _lifecycle(self) -> None:
        while True:
            try:
                delay = await self._lifecycle_step()
            except ClientError as exc:
                log.debug("broker %d lifecycle: %s", self.broker.node_id, exc)
                delay = 0.2
            except Exception:
                log.exception("broker %d lifecycle step failed", self.broker.node_id)
                delay = 1.0
            self._leader_moved.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._leader_moved.wait(), delay)

    async def _lifecycle_step(self) -> float:
        """One registration or heartbeat; how long to wait before the next."""
        assert self.client is not None
        leader = self.store.leader_id
        if self._left:
            return 1.0
        if leader is None or leader not in self.voters or not self.store.caught_up:
            return 0.1
        node_id = self.broker.node_id
        if self.broker_epoch < 0:
            request = BrokerRegistrationRequest(
                broker_id=node_id,
                cluster_id=self.store.cluster_id,
                incarnation_id=self.incarnation_id,
                listeners=[
                    BrokerRegistrationRequest.Listener(
                        name="PLAINTEXT", host=self.broker.host, port=self.broker.port, security_protocol=0
                    )
                ],
                features=[
                    BrokerRegistrationRequest.Feature(
                        name=METADATA_VERSION, min_supported_version=1, max_supported_version=25
                    )
                ],
                rack=self.broker.config.get_str("broker.rack"),
                log_dirs=[
                    m.directory_id for m in self.broker.meta_properties.values() if m.directory_id is not None
                ],
            )
            answer = await self.client.send(leader, api_keys.BROKER_REGISTRATION, REGISTRATION_VERSION, request)
            if answer.error_code != errors.NONE:
                log.info(
                    "broker %d: registration with node %d refused: %s",
                    node_id, leader, errors.name_of(answer.error_code),
                )
                return 0.1 if answer.error_code == NOT_CONTROLLER else 1.0
            self.broker_epoch = answer.broker_epoch
            log.info("broker %d registered with controller %d (epoch %d)", node_id, leader, self.broker_epoch)
            return 0.0
        request = BrokerHeartbeatRequest(
            broker_id=node_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.store.applied,
            want_fence=False,
            want_shut_down=False,
        )
        answer = await self.client.send(leader, api_keys.BROKER_HEARTBEAT, HEARTBEAT_VERSION, request)
        if answer.error_code in RE_REGISTER:
            log.info("broker %d: %s: registering again", node_id, errors.name_of(answer.error_code))
            self.broker_epoch = -1
            return 0.0
        if answer.error_code != errors.NONE:
            return 0.1
        if answer.is_fenced:
            return 0.2
        return self.heartbeat_interval_s
