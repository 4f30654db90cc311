"""The ISR changes of the partitions this broker leads, on their way to the active controller
as AlterPartition v3 (KIP-903: each ISR member with its broker epoch), sans I/O (Kafka's
AlterPartitionManager without its channel).

    sender = IsrChangeSender(broker_id=1, broker_epoch=lambda: member.broker_epoch)
    replicas.on_isr_update = sender.submit          # a Partition proposes a change
    result = sender.poll(now_ms)                    # Poll: the request to send, next deadline
    sender.on_response(out, answer, now_ms)         # or sender.on_error(out, exc, now_ms)

Changes queue by partition and go out together in one request, one request at a time: a
partition's next change waits while one of its own is in flight. Each answer goes back to its
Partition (`on_alter_partition_result`), which says whether to send it again. The whole
request is sent again after a back-off when it gets no answer, or a top-level error
(NOT_CONTROLLER, STALE_BROKER_EPOCH while this broker registers again, ...), or while this
broker is not registered or no controller is known (the driver's channel fails the send); a
change the partition has given up on meanwhile (new metadata) is dropped then.

Back-off: 200 ms after a request with a change to send again, doubling with each request in a
row that got no answer (or a top-level error), up to 2 s; an answer resets it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from gregor.protocol import api_keys, errors
from gregor.protocol.messages import AlterPartitionRequest
from gregor.protocol.outbound import Outbound, Poll
from gregor.replication.partition import IsrUpdate, Partition

log = logging.getLogger("gregor.alter_partition")

ALTER_PARTITION_VERSION = 3
RETRY_BACKOFF_MS = 200  # doubling while nothing gets through, up to RETRY_BACKOFF_MAX_MS
RETRY_BACKOFF_MAX_MS = 2000
Key = tuple[uuid.UUID, int]
Batch = dict[Key, tuple[Partition, IsrUpdate]]


def _noop() -> None:
    pass


class IsrChangeSender:
    def __init__(self, broker_id: int, broker_epoch: Callable[[], int]) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.queued: Batch = {}
        self.in_flight: Batch | None = None  # the one request out, by partition
        self.failures = 0  # requests in a row with no answer (or a top-level error)
        self.backoff_until_ms = 0
        self.wakeup: Callable[[], None] = _noop  # set by the driver

    def submit(self, p: Partition, update: IsrUpdate) -> None:
        self.queued[(update.topic_id, update.partition)] = (p, update)
        self.wakeup()

    def poll(self, now_ms: int) -> Poll:
        if self.in_flight is not None:
            return Poll()  # the answer wakes us
        if now_ms < self.backoff_until_ms:
            return Poll([], self.backoff_until_ms)
        batch = {k: v for k, v in self.queued.items() if v[0].pending is v[1]}
        self.queued.clear()  # what its partition gave up on is dropped
        if not batch:
            return Poll()
        epoch = self.broker_epoch()
        if epoch < 0:  # not registered (yet, or again)
            self._failed(batch, now_ms, "this broker is not registered")
            return Poll([], self.backoff_until_ms)
        self.in_flight = batch
        return Poll([self._request(batch, epoch)], None)

    def _request(self, batch: Batch, broker_epoch: int) -> Outbound:
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
        body = R(
            broker_id=self.broker_id,
            broker_epoch=broker_epoch,
            topics=[R.TopicData(topic_id=tid, partitions=parts) for tid, parts in topics.items()],
        )
        return Outbound(api_keys.ALTER_PARTITION, ALTER_PARTITION_VERSION, body, context=batch)

    def on_error(self, out: Outbound, error: Exception, now_ms: int) -> None:
        batch = self._take(out)
        self._failed(batch, now_ms, f"no answer from the controller: {error}")

    def on_response(self, out: Outbound, answer: Any, now_ms: int) -> None:
        batch = self._take(out)
        if answer.error_code != errors.NONE:
            self._failed(batch, now_ms, f"refused: {errors.name_of(answer.error_code)}")
            return
        self.failures = 0
        retry: Batch = {}
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
                    update,
                    pd.error_code,
                    pd.leader_epoch,
                    pd.partition_epoch,
                    tuple(pd.isr),
                    now_ms,
                )
                if again:
                    retry[key] = item
        for key in batch.keys() - answered:
            retry[key] = batch[key]
        self._retry_later(retry, now_ms)

    def _take(self, out: Outbound) -> Batch:
        batch: Batch = out.context
        assert self.in_flight is batch, "one AlterPartition in flight at a time"
        self.in_flight = None
        return batch

    def _failed(self, batch: Batch, now_ms: int, why: str) -> None:
        self.failures += 1
        level = logging.INFO if self.failures == 1 else logging.DEBUG  # the first in a row
        log.log(level, "AlterPartition for %d partition(s) not sent: %s", len(batch), why)
        self._retry_later(batch, now_ms)

    def _retry_later(self, retry: Batch, now_ms: int) -> None:
        """Queue `retry` again (a newer change queued meanwhile wins), after the back-off."""
        for key, item in retry.items():
            if item[0].pending is item[1]:
                self.queued.setdefault(key, item)
        if retry:
            backoff = RETRY_BACKOFF_MS * 2 ** max(0, self.failures - 1)
            self.backoff_until_ms = now_ms + min(backoff, RETRY_BACKOFF_MAX_MS)
