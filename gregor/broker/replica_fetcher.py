"""Replica fetchers: the I/O loops that keep this broker's follower partitions copying their
leaders (Kafka's ReplicaFetcherManager and ReplicaFetcherThread; the decisions are
replication/follower.py's, sans I/O).

    fetchers = ReplicaFetcherManager(broker)
    fetchers.apply(broker.replicas.take_follower_changes())   # after each metadata change
    await fetchers.stop()

One loop per leader broker (`num.replica.fetchers` = 1), started when the first partition
needs it and stopped when its last one goes. A loop sends one Fetch at a time to its leader's
PLAINTEXT listener (from the metadata image, so a leader that moved ports is followed), waits
for the answer (long polling: replica.fetch.wait.max.ms on the leader), applies it, and sends
the next at once; with nothing ready it sleeps until a partition is added or a back-off ends.
No Fetch goes out before this broker is registered (its broker epoch is the Fetch's
replica_epoch, KIP-903). A failed request (connection refused or lost, timeout after
replica.socket.timeout.ms beyond the wait) backs its partitions off replica.fetch.backoff.ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from gregor.protocol import api_keys
from gregor.replication.follower import FETCH_VERSION, FetcherConfig, FollowerFetcher
from gregor.replication.partition import FollowerChange
from gregor.runtime.client import ClientError, NetworkClient

if TYPE_CHECKING:
    from gregor.broker.broker import BrokerServer

log = logging.getLogger("gregor.replica_fetcher")


class _FetcherLoop:
    def __init__(self, manager: ReplicaFetcherManager, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.state = FollowerFetcher(leader_id, manager.config)
        self.wakeup = asyncio.Event()
        self.failures = 0  # in a row: the first is logged at INFO, the rest at DEBUG
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for broker %d failed", self.leader_id)
                await asyncio.sleep(1.0)

    async def _sleep(self, seconds: float) -> None:
        self.wakeup.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wakeup.wait(), seconds)

    async def _step(self) -> None:
        broker = self.manager.broker
        now = broker.now_ms()
        epoch = self.manager.broker_epoch()
        if epoch < 0:
            await self._sleep(0.2)  # not registered yet
            return
        built = self.state.build_request(now, epoch)
        if built is None:
            ready = self.state.next_ready_ms()
            await self._sleep(1.0 if ready is None else max(0.0, (ready - now) / 1000.0))
            return
        request, sent = built
        endpoint = broker.broker_endpoint(self.leader_id)
        if endpoint is None:
            log.debug("no endpoint for broker %d yet", self.leader_id)
            self.state.handle_error(sent, now)
            return
        client = self.manager.client
        client.set_endpoint(self.leader_id, *endpoint)
        timeout = self.manager.config.max_wait_ms + self.manager.socket_timeout_ms
        try:
            response = await client.send(
                self.leader_id, api_keys.FETCH, FETCH_VERSION, request, timeout_ms=timeout
            )
        except ClientError as exc:
            self.failures += 1
            level = logging.INFO if self.failures == 1 else logging.DEBUG
            log.log(level, "fetch from broker %d failed: %s", self.leader_id, exc)
            self.state.handle_error(sent, broker.now_ms())
            return
        self.failures = 0
        self.state.handle_response(sent, response, broker.now_ms())


class ReplicaFetcherManager:
    def __init__(self, broker: BrokerServer) -> None:
        self.broker = broker
        value = broker.config_value
        self.config = FetcherConfig(
            replica_id=broker.node_id,
            max_wait_ms=int(value("replica.fetch.wait.max.ms")),
            min_bytes=int(value("replica.fetch.min.bytes")),
            max_bytes=int(value("replica.fetch.response.max.bytes")),
            partition_max_bytes=int(value("replica.fetch.max.bytes")),
            backoff_ms=int(value("replica.fetch.backoff.ms")),
        )
        self.socket_timeout_ms = int(value("replica.socket.timeout.ms"))
        self.client = NetworkClient(
            client_id=f"replica-fetcher-{broker.node_id}",
            connect_timeout_ms=2000,
            reconnect_backoff_ms=50,
            reconnect_backoff_max_ms=1000,
        )
        self.loops: dict[int, _FetcherLoop] = {}
        self.stopped = False

    def broker_epoch(self) -> int:
        member = self.broker.member
        return -1 if member is None else member.broker_epoch

    def apply(self, changes: list[FollowerChange]) -> None:
        """Move each changed partition to the fetcher of its new leader (or out of them)."""
        if self.stopped:
            return
        for change in changes:
            for loop in self.loops.values():
                loop.state.remove(change.topic, change.index)
            if change.leader is None or change.leader < 0:
                continue
            p = self.broker.replicas.get(change.topic, change.index)
            if p is None or p.is_leader:
                continue
            fetcher = self.loops.get(change.leader)
            if fetcher is None:
                fetcher = self.loops[change.leader] = _FetcherLoop(self, change.leader)
                log.info("replica fetcher for broker %d started", change.leader)
            fetcher.state.add(p, change.leader_epoch)
            fetcher.wakeup.set()
        for leader_id in [b for b, loop in self.loops.items() if not len(loop.state)]:
            self.loops.pop(leader_id).task.cancel()
            log.info("replica fetcher for broker %d stopped: nothing to fetch from it", leader_id)

    async def stop(self) -> None:
        self.stopped = True
        loops, self.loops = list(self.loops.values()), {}
        for loop in loops:
            loop.task.cancel()
        for loop in loops:
            with contextlib.suppress(BaseException):
                await loop.task
        await self.client.close()
