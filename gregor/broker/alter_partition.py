"""The ISR changes of the partitions this broker leads, sent to the active controller as
AlterPartition (v3, KIP-903: each ISR member with its broker epoch) over the controller
channel (Kafka's AlterPartitionManager).

    sender = AlterPartitionSender(broker, member)
    replicas.on_isr_update = sender.submit        # Partition proposes, this sends
    await sender.stop()

Changes queue by partition and go out together in one request; a partition's next change
waits while one of its own is in flight. Each answer goes back to its Partition
(`on_alter_partition_result`), which says whether to send it again. The whole request is sent
again after a back-off when it gets no answer, or a top-level error (NOT_CONTROLLER,
STALE_BROKER_EPOCH while this broker registers again, ...), or while there is no active
controller or this broker is not registered; a change the partition has given up on meanwhile
(new metadata) is dropped then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING

from gregor.broker.controller_channel import ControllerChannel
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import AlterPartitionRequest
from gregor.replication.partition import IsrUpdate, Partition
from gregor.runtime.client import ClientError

if TYPE_CHECKING:
    from gregor.broker.broker import BrokerServer
    from gregor.broker.cluster_member import ClusterMember

log = logging.getLogger("gregor.alter_partition")

ALTER_PARTITION_VERSION = 3
RETRY_BACKOFF_S = 0.2  # doubling while nothing gets through, up to RETRY_BACKOFF_MAX_S
RETRY_BACKOFF_MAX_S = 2.0
Key = tuple[uuid.UUID, int]


class AlterPartitionSender:
    def __init__(self, broker: BrokerServer, member: ClusterMember) -> None:
        self.broker = broker
        self.member = member
        self.channel = ControllerChannel(
            member.store,
            member.driver.endpoint,
            client_id=f"broker-{broker.node_id}-alter-partition",
        )
        self.queued: dict[Key, tuple[Partition, IsrUpdate]] = {}
        self.in_flight: set[Key] = set()
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.failures = 0  # requests in a row with no answer (or a top-level error)

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._run())

    def submit(self, p: Partition, update: IsrUpdate) -> None:
        self.queued[(update.topic_id, update.partition)] = (p, update)
        self.wakeup.set()

    async def _run(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            batch = {
                k: v
                for k, v in self.queued.items()
                if k not in self.in_flight and v[0].pending is v[1]
            }
            for key in list(self.queued):
                if key not in self.in_flight:
                    del self.queued[key]
            if not batch:
                continue
            self.in_flight |= batch.keys()
            try:
                retry = await self._send(batch)
            except Exception:
                log.exception("sending ISR changes failed")
                retry = batch
            finally:
                self.in_flight -= batch.keys()
            for key, item in retry.items():
                if item[0].pending is item[1]:
                    self.queued.setdefault(key, item)
            if retry:
                backoff = RETRY_BACKOFF_S * 2 ** max(0, self.failures - 1)
                await asyncio.sleep(min(backoff, RETRY_BACKOFF_MAX_S))
            if self.queued:
                self.wakeup.set()

    async def _send(
        self, batch: dict[Key, tuple[Partition, IsrUpdate]]
    ) -> dict[Key, tuple[Partition, IsrUpdate]]:
        """Send `batch`; the changes to send again."""
        member = self.member
        controller = self.channel.controller_id()
        if member.broker_epoch < 0 or controller is None:
            self.failures += 1
            return batch
        R = AlterPartitionRequest
        topics: dict[uuid.UUID, list[object]] = {}
        for (topic_id, index), (_p, u) in batch.items():
            topics.setdefault(topic_id, []).append(
                R.PartitionData(
                    partition_index=index,
                    leader_epoch=u.leader_epoch,
                    new_isr_with_epochs=[
                        R.BrokerState(broker_id=b, broker_epoch=e)
                        for b, e in zip(u.new_isr, u.broker_epochs, strict=True)
                    ],
                    leader_recovery_state=0,
                    partition_epoch=u.partition_epoch,
                )
            )
        request = R(
            broker_id=self.broker.node_id,
            broker_epoch=member.broker_epoch,
            topics=[R.TopicData(topic_id=tid, partitions=parts) for tid, parts in topics.items()],
        )
        try:
            answer = await self.channel.send(
                api_keys.ALTER_PARTITION, ALTER_PARTITION_VERSION, request
            )
        except ClientError as exc:
            self.failures += 1
            log.log(
                self._level(), "AlterPartition to controller %d got no answer: %s", controller, exc
            )
            return batch
        if answer.error_code != errors.NONE:
            self.failures += 1
            log.log(
                self._level(),
                "AlterPartition refused by controller %d: %s",
                controller,
                errors.name_of(answer.error_code),
            )
            return batch
        self.failures = 0
        retry = {}
        now = self.broker.now_ms()
        answered: set[Key] = set()
        for t in answer.topics:
            for pd in t.partitions:
                key = (t.topic_id, pd.partition_index)
                item = batch.get(key)
                if item is None:
                    continue
                answered.add(key)
                p, update = item
                again = p.on_alter_partition_result(
                    update, pd.error_code, pd.leader_epoch, pd.partition_epoch, tuple(pd.isr), now
                )
                if again:
                    retry[key] = item
        for key in batch.keys() - answered:
            retry[key] = batch[key]
        return retry

    def _level(self) -> int:
        """The first failure in a row is worth an INFO line, the rest DEBUG ones."""
        return logging.INFO if self.failures == 1 else logging.DEBUG

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task
        await self.channel.close()
