"""A broker's life in a networked cluster, toward the active controller (Kafka's
BrokerLifecycleManager and RPCProducerIdManager): registration, heartbeats, fencing itself on
the way out, and producer-id blocks fetched ahead. The same on a combined node and on a
broker-only one; only the way to the controller differs (controller_channel.py).

    lifecycle = BrokerLifecycle(broker, store, channel)
    lifecycle.start()                 # register, then heartbeat; fetch a producer-id block
    lifecycle.on_leader_change()      # the controller moved: talk to the new one at once
    await lifecycle.leave()           # controlled shutdown, then fenced; no more heartbeats
    await lifecycle.stop()            # (leaves first if not done yet), then stops

The loop: once the metadata is caught up (the committed prefix is known), register with the
active controller, then heartbeat every `broker.heartbeat.interval.ms` with the offset replayed
so far; faster while still fenced or when the controller moves; register again when told
STALE_BROKER_EPOCH or BROKER_ID_NOT_REGISTERED. A restarted broker is refused
(DUPLICATE_BROKER_REGISTRATION) until its old incarnation's session has expired, as in Kafka; it
retries meanwhile.

Stopping (SIGTERM), the broker first makes a controlled shutdown (a heartbeat with
want_shut_down, unless controlled.shutdown.enable=false: the controller moves the leadership of
its partitions to other ISR members and takes it out of every ISR) while it still serves, then
asks to be fenced (a heartbeat with want_fence), so Metadata stops naming it at once and its
next start registers without waiting for the old session to expire. Heartbeats stop then (one
would unfence it).

A failed log dir (KIP-858): every heartbeat names the broker's offline dirs by directory id, so
the controller moves the leadership of their partitions to other ISR members (and keeps the
broker out of elections while all its dirs are offline); the first heartbeat after the failure
goes at once. If no controller has acknowledged that within `log.dir.failure.timeout.ms`, the
broker shuts down, as Kafka does, rather than stay the leader of partitions it cannot write.

Producer ids: once registered, the broker keeps one block of producer ids fetched ahead from the
active controller (AllocateProducerIds, its ProducerIdsRecord committed before the answer); the
ProducerIdManager takes blocks from here (`allocate_producer_ids`) and a taken block makes the
next one be fetched at once. With no block at hand it is COORDINATOR_LOAD_IN_PROGRESS (the
producer retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
import uuid
from collections import deque
from typing import TYPE_CHECKING

from gregor.broker.controller_channel import ControllerChannel
from gregor.controller.quorum_controller import PRODUCER_ID_BLOCK_SIZE
from gregor.metadata.image import METADATA_VERSION
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import (
    AllocateProducerIdsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
)
from gregor.runtime.client import ClientError

if TYPE_CHECKING:
    from gregor.broker.broker import BrokerServer

log = logging.getLogger("gregor.cluster")

REGISTRATION_VERSION = 3
HEARTBEAT_VERSION = 1
_code = errors.BY_NAME
NOT_CONTROLLER = _code["NOT_CONTROLLER"].code
RE_REGISTER = {_code["STALE_BROKER_EPOCH"].code, _code["BROKER_ID_NOT_REGISTERED"].code}


class BrokerLifecycle:
    def __init__(
        self, broker: BrokerServer, store: RaftMetadataStore, channel: ControllerChannel
    ) -> None:
        self.broker = broker
        self.store = store
        self.channel = channel
        self.node_id = broker.node_id
        self.heartbeat_interval_s = broker.config.get_int("broker.heartbeat.interval.ms") / 1000
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self._tasks: list[asyncio.Task[None]] = []
        self._leader_moved = asyncio.Event()
        self._pid_blocks: deque[int] = deque()  # first ids of blocks fetched ahead
        self._pid_wanted = asyncio.Event()
        self._left = False  # leaving the cluster: no more heartbeats
        self.dir_failure_timeout_s = broker.config_value("log.dir.failure.timeout.ms") / 1000
        self._dirs_failed_at: float | None = None  # monotonic; None once the controller knows

    def start(self) -> None:
        self.broker.logs.dir_failure_listeners.append(self.on_dir_failure)
        self._tasks = [
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
        await self.channel.close()

    def on_leader_change(self) -> None:
        self._leader_moved.set()

    def on_dir_failure(self, _directory: str) -> None:
        """A log dir went offline: tell the controller with the next heartbeat, now."""
        if self._dirs_failed_at is None:
            self._dirs_failed_at = time.monotonic()
        self._leader_moved.set()

    def _offline_dir_ids(self) -> list[uuid.UUID]:
        offline = self.broker.logs.offline_dirs
        return [
            m.directory_id
            for d, m in self.broker.meta_properties.items()
            if m.directory_id is not None and os.path.abspath(d) in offline
        ]

    def _check_dir_failure_timeout(self) -> None:
        failed_at = self._dirs_failed_at
        if failed_at is not None and time.monotonic() - failed_at > self.dir_failure_timeout_s:
            log.error(
                "broker %d: no controller learned of its offline log dirs (%s) within "
                "log.dir.failure.timeout.ms; shutting down",
                self.node_id,
                ", ".join(self.broker.logs.offline_dirs),
            )
            self._dirs_failed_at = None
            os.kill(os.getpid(), signal.SIGTERM)

    async def leave(self) -> None:
        """Hand this broker's leaderships over (controlled shutdown), then ask to be fenced, so
        clients stop being sent here at once and the next start may register at once. Once."""
        if self._left:
            return
        self._left = True
        steps = [(False, True)]
        if self.broker.config_value("controlled.shutdown.enable"):
            steps.insert(0, (True, False))
        for want_shut_down, want_fence in steps:
            if self.broker_epoch < 0 or self.channel.controller_id() is None:
                return
            request = BrokerHeartbeatRequest(
                broker_id=self.node_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=self.store.applied,
                want_fence=want_fence,
                want_shut_down=want_shut_down,
            )
            what = (
                "fenced for shutdown"
                if want_fence
                else "handed its leaderships over (controlled shutdown)"
            )
            try:
                answer = await self.channel.send(
                    api_keys.BROKER_HEARTBEAT, HEARTBEAT_VERSION, request, timeout_ms=1000
                )
                if answer.error_code == errors.NONE:
                    log.info("broker %d %s", self.node_id, what)
            except ClientError as exc:
                log.info("broker %d not %s: %s", self.node_id, what, exc)

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
        while True:
            if self._pid_blocks:
                await self._pid_wanted.wait()
                self._pid_wanted.clear()
                continue
            if self.broker_epoch < 0:
                await asyncio.sleep(0.2)
                continue
            request = AllocateProducerIdsRequest(
                broker_id=self.node_id, broker_epoch=self.broker_epoch
            )
            try:
                answer = await self.channel.send(api_keys.ALLOCATE_PRODUCER_IDS, 0, request)
            except ClientError:
                await asyncio.sleep(0.2)
                continue
            if answer.error_code != errors.NONE or answer.producer_id_len != PRODUCER_ID_BLOCK_SIZE:
                await asyncio.sleep(0.2)
                continue
            self._pid_blocks.append(answer.producer_id_start)

    # -- registration and heartbeats ----------------------------------------------------------

    async def _lifecycle(self) -> None:
        while True:
            try:
                delay = await self._lifecycle_step()
            except ClientError as exc:
                log.debug("broker %d lifecycle: %s", self.node_id, exc)
                delay = 0.2
            except Exception:
                log.exception("broker %d lifecycle step failed", self.node_id)
                delay = 1.0
            self._leader_moved.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._leader_moved.wait(), delay)

    async def _lifecycle_step(self) -> float:
        """One registration or heartbeat; how long to wait before the next."""
        if self._left:
            return 1.0
        self._check_dir_failure_timeout()
        controller = self.channel.controller_id()
        if controller is None or not self.store.caught_up:
            return 0.1
        if self.broker_epoch < 0:
            return await self._register(controller)
        request = BrokerHeartbeatRequest(
            broker_id=self.node_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self.store.applied,
            want_fence=False,
            want_shut_down=False,
            offline_log_dirs=self._offline_dir_ids(),
        )
        answer = await self.channel.send(api_keys.BROKER_HEARTBEAT, HEARTBEAT_VERSION, request)
        if answer.error_code in RE_REGISTER:
            log.info(
                "broker %d: %s: registering again", self.node_id, errors.name_of(answer.error_code)
            )
            self.broker_epoch = -1
            return 0.0
        if answer.error_code != errors.NONE:
            return 0.1
        if request.offline_log_dirs and self._dirs_failed_at is not None:
            self._dirs_failed_at = None
            log.info("broker %d: the controller knows its log dirs %s are offline",
                     self.node_id, ", ".join(self.broker.logs.offline_dirs))  # fmt: skip
        if answer.is_fenced:
            return 0.2
        return self.heartbeat_interval_s

    async def _register(self, controller: int) -> float:
        broker = self.broker
        request = BrokerRegistrationRequest(
            broker_id=self.node_id,
            cluster_id=self.store.cluster_id,
            incarnation_id=self.incarnation_id,
            listeners=[
                BrokerRegistrationRequest.Listener(
                    name="PLAINTEXT", host=broker.host, port=broker.port, security_protocol=0
                )
            ],
            features=[
                BrokerRegistrationRequest.Feature(
                    name=METADATA_VERSION, min_supported_version=1, max_supported_version=25
                )
            ],
            rack=broker.config.get_str("broker.rack"),
            log_dirs=[
                m.directory_id
                for m in broker.meta_properties.values()
                if m.directory_id is not None
            ],
        )
        answer = await self.channel.send(
            api_keys.BROKER_REGISTRATION, REGISTRATION_VERSION, request
        )
        if answer.error_code != errors.NONE:
            log.info(
                "broker %d: registration with node %d refused: %s",
                self.node_id,
                controller,
                errors.name_of(answer.error_code),
            )
            return 0.1 if answer.error_code == NOT_CONTROLLER else 1.0
        self.broker_epoch = answer.broker_epoch
        log.info(
            "broker %d registered with controller %d (epoch %d)",
            self.node_id,
            controller,
            self.broker_epoch,
        )
        return 0.0
