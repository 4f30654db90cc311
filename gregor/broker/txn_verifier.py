"""The produce path's check of a transactional batch with the transaction coordinator (KIP-890
part 1), wherever that coordinator is: what Kafka's AddPartitionsToTxnManager does.

    verifier = TxnVerifier(node_id, transactions, links)      # links: InterBroker, or None
    answer = verifier.verify(tid, pid, epoch, "orders", 2, abortable_supported=True)
    # an int, the Produce error code (0: append), or a Pending of one

The coordinator of a transactional id leads its `__transaction_state` partition. When that is
this broker (or there is no network: one node), `TransactionCoordinator.verify_partition`
answers at once. When it is another broker, the partition is asked about in an
AddPartitionsToTxn v5 request with `verify_only` to that broker; requests queued in one turn of
the event loop go out as one request per coordinator broker (one entry per transactional id).
No coordinator known, or the request failed: COORDINATOR_NOT_AVAILABLE / NETWORK_EXCEPTION,
which the produce path answers as NOT_ENOUGH_REPLICAS, so the producer retries
(`runtime.produce_error`, as Kafka maps them).

Order: a second batch of the same producer for the same partition that arrives while the first
one's check is in flight waits for that same check (one future per transactional id, producer
id, epoch and partition), and futures wake their waiters in the order they began waiting, so
the batches are appended in the order they came.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from gregor.coordinator.txn import codes
from gregor.coordinator.txn.runtime import TRANSACTION_TOPIC, TransactionCoordinator, produce_error
from gregor.protocol import api_keys
from gregor.protocol.messages import AddPartitionsToTxnRequest
from gregor.protocol.outbound import unique_batches
from gregor.replication.pending import Pending
from gregor.runtime.inter_broker import InterBroker

log = logging.getLogger("gregor.txn.verify")

TopicPartition = tuple[str, int]
ADD_PARTITIONS_TO_TXN_VERSION = 5  # verify_only (v4+), TRANSACTION_ABORTABLE (v5)


@dataclass
class _Check:
    """The partitions of one producer's transaction to verify with one coordinator."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    futures: dict[TopicPartition, asyncio.Future[int]] = field(default_factory=dict)

    def resolve(self, by_tp: dict[TopicPartition, int]) -> None:
        for tp, fut in self.futures.items():
            if not fut.done():
                fut.set_result(by_tp.get(tp, codes.NONE))


class TxnVerifier:
    def __init__(
        self, node_id: int, transactions: TransactionCoordinator, links: InterBroker | None
    ) -> None:
        self.node_id = node_id
        self.transactions = transactions
        self.links = links
        self._pending: dict[tuple[str, int, int, TopicPartition], asyncio.Future[int]] = {}
        self._queued: dict[int, dict[tuple[str, int, int], _Check]] = {}
        self._flush_scheduled = False

    def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
        *,
        abortable_supported: bool = False,
    ) -> int | Pending:
        local = self.transactions.verify_partition
        if self.links is None or self.transactions.is_leader_for(transactional_id):
            return local(
                transactional_id,
                producer_id,
                producer_epoch,
                topic,
                partition,
                abortable_supported=abortable_supported,
            )
        leader = self._coordinator(transactional_id)
        if leader == self.node_id:  # led here but not loaded yet: the coordinator says so
            return local(
                transactional_id,
                producer_id,
                producer_epoch,
                topic,
                partition,
                abortable_supported=abortable_supported,
            )
        if leader is None:
            return produce_error(codes.COORDINATOR_NOT_AVAILABLE, abortable_supported)
        tp = (topic, partition)
        key = (transactional_id, producer_id, producer_epoch, tp)
        fut = self._pending.get(key)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._pending[key] = fut
            fut.add_done_callback(lambda _f: self._pending.pop(key, None))
            check = self._queued.setdefault(leader, {}).setdefault(
                (transactional_id, producer_id, producer_epoch),
                _Check(transactional_id, producer_id, producer_epoch),
            )
            check.futures[tp] = fut
            self._schedule_flush()
        return _mapped(fut, abortable_supported)

    def _coordinator(self, transactional_id: str) -> int | None:
        """The broker leading the id's `__transaction_state` partition, if it can be asked."""
        assert self.links is not None
        if self.transactions.num_partitions is None:
            return None
        leader = self.links.leader(
            TRANSACTION_TOPIC, self.transactions.partition_for(transactional_id)
        )
        if leader is None or leader < 0:
            return None
        if leader != self.node_id and not self.links.reachable(leader):
            return None
        return leader

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        queued, self._queued = self._queued, {}
        assert self.links is not None or not queued
        for broker_id, checks in queued.items():
            for batch in unique_batches(checks.values(), lambda c: c.transactional_id):
                assert self.links is not None
                self.links.spawn(self._send(broker_id, batch))

    async def _send(self, broker_id: int, checks: list[_Check]) -> None:
        assert self.links is not None
        request = AddPartitionsToTxnRequest(transactions=[_wire(c) for c in checks])
        try:
            response = await self.links.send(
                broker_id, api_keys.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION, request
            )
        except Exception as exc:  # noqa: BLE001 - ClientError mostly; the producer retries
            log.info("verifying transactions with broker %d failed: %s", broker_id, exc)
            for c in checks:
                c.resolve(dict.fromkeys(c.futures, codes.NETWORK_EXCEPTION))
            return
        if response.error_code != codes.NONE:
            for c in checks:
                c.resolve(dict.fromkeys(c.futures, response.error_code))
            return
        answered: dict[str, dict[TopicPartition, int]] = {}
        for result in response.results_by_transaction:
            by_tp = answered.setdefault(result.transactional_id, {})
            for t in result.topic_results:
                for p in t.results_by_partition:
                    by_tp[(t.name, p.partition_index)] = p.partition_error_code
        for c in checks:
            c.resolve(answered.get(c.transactional_id, {}))  # left out: verified, as in Kafka


def _mapped(fut: asyncio.Future[int], abortable_supported: bool) -> Pending:
    """A Pending of the Produce error code for this waiter (the produce handler's
    continuation waits on it without an event loop)."""
    out = Pending("transaction verification")

    def relay(f: asyncio.Future[int]) -> None:
        out.complete(produce_error(f.result(), abortable_supported))

    fut.add_done_callback(relay)
    return out


def _wire(c: _Check) -> Any:
    by_topic: dict[str, list[int]] = {}
    for topic, index in c.futures:
        by_topic.setdefault(topic, []).append(index)
    return AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
        transactional_id=c.transactional_id,
        producer_id=c.producer_id,
        producer_epoch=c.producer_epoch,
        verify_only=True,
        topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=name, partitions=indexes)
            for name, indexes in by_topic.items()
        ],
    )
