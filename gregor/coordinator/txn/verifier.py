"""The produce path's check of a transactional batch with the transaction coordinator (KIP-890
part 1), wherever that coordinator is, sans I/O: what Kafka's AddPartitionsToTxnManager decides
(the driver sends).

    verifier = TxnVerifier(node_id, transactions, image=lambda: store.image,
                           reachable=links.reachable)     # None: no network (one node)
    answer = verifier.verify(tid, pid, epoch, "orders", 2, abortable_supported=True)
    # an int, the Produce error code (0: append), or a Pending of one
    result = verifier.poll(now_ms)           # one AddPartitionsToTxn per coordinator broker
    verifier.on_response(out, answer, now_ms)     # or on_error(out, exc, now_ms)

The coordinator of a transactional id leads its `__transaction_state` partition. When that is
this broker (or there is no network: one node), `TransactionCoordinator.verify_partition`
answers at once. When it is another broker, the partition is queued for an AddPartitionsToTxn
v5 request with `verify_only` to that broker; what is queued by the next poll (the driver's
next turn of the event loop) goes out as one request per coordinator broker (one entry per
transactional id). No coordinator known, or the request failed: COORDINATOR_NOT_AVAILABLE /
NETWORK_EXCEPTION, which the produce path answers as NOT_ENOUGH_REPLICAS, so the producer
retries (`produce_error`, as Kafka maps them). Nothing waits for a time: a request's timeout
is its transport's.

Order: a second batch of the same producer for the same partition that arrives while the first
one's check is in flight waits for that same check (one Pending per transactional id, producer
id, epoch and partition), and a Pending calls its waiters in the order they began waiting, so
the batches are appended in the order they came.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gregor.coordinator.txn import codes
from gregor.coordinator.txn.runtime import TRANSACTION_TOPIC, produce_error
from gregor.metadata.image import MetadataImage
from gregor.protocol import api_keys
from gregor.protocol.messages import AddPartitionsToTxnRequest
from gregor.protocol.outbound import Outbound, Poll, unique_batches
from gregor.replication.pending import Pending

log = logging.getLogger("gregor.txn.verify")

TopicPartition = tuple[str, int]
ADD_PARTITIONS_TO_TXN_VERSION = 5  # verify_only (v4+), TRANSACTION_ABORTABLE (v5)


class VerifyingCoordinator(Protocol):
    """What the verifier needs of the TransactionCoordinator (coordinator/txn/runtime.py)."""

    @property
    def num_partitions(self) -> int | None: ...

    def partition_for(self, transactional_id: str) -> int: ...

    def is_leader_for(self, transactional_id: str) -> bool: ...

    def verify_partition(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
        *,
        abortable_supported: bool = False,
    ) -> int: ...


@dataclass
class _Check:
    """The partitions of one producer's transaction to verify with one coordinator."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    waiting: dict[TopicPartition, Pending] = field(default_factory=dict)

    def resolve(self, by_tp: dict[TopicPartition, int]) -> None:
        for tp, pending in self.waiting.items():
            pending.complete(by_tp.get(tp, codes.NONE))


def _noop() -> None:
    pass


class TxnVerifier:
    def __init__(
        self,
        node_id: int,
        transactions: VerifyingCoordinator,
        image: Callable[[], MetadataImage],
        reachable: Callable[[int], bool] | None,
    ) -> None:
        """`reachable(broker)`: registered with an endpoint; None: no network (one node)."""
        self.node_id = node_id
        self.transactions = transactions
        self.image = image
        self.reachable = reachable
        self._pending: dict[tuple[str, int, int, TopicPartition], Pending] = {}
        self.queued: dict[int, dict[tuple[str, int, int], _Check]] = {}
        self.wakeup: Callable[[], None] = _noop  # set by the driver

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
        tid, pid, epoch = transactional_id, producer_id, producer_epoch
        leader = self._coordinator(tid)
        if leader == self.node_id:  # here (loaded, or the coordinator says it is loading)
            return self.transactions.verify_partition(
                tid, pid, epoch, topic, partition, abortable_supported=abortable_supported
            )
        if leader is None:
            return produce_error(codes.COORDINATOR_NOT_AVAILABLE, abortable_supported)
        tp = (topic, partition)
        key = (tid, pid, epoch, tp)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = Pending("transaction verification")
            pending.add_done_callback(lambda _code: self._pending.pop(key, None))
            check = self.queued.setdefault(leader, {}).setdefault(
                (tid, pid, epoch), _Check(tid, pid, epoch)
            )
            check.waiting[tp] = pending
            self.wakeup()
        return _mapped(pending, abortable_supported)

    def _coordinator(self, transactional_id: str) -> int | None:
        """The broker to ask about the id (this one without a network, or when it leads the
        id's `__transaction_state` partition); None when none can be asked."""
        if self.reachable is None or self.transactions.is_leader_for(transactional_id):
            return self.node_id
        if self.transactions.num_partitions is None:
            return None
        index = self.transactions.partition_for(transactional_id)
        part = self.image().partition(TRANSACTION_TOPIC, index)
        if part is None or part.leader < 0:
            return None
        leader = part.leader
        if leader != self.node_id and not self.reachable(leader):
            return None
        return leader

    def poll(self, now_ms: int) -> Poll:
        """Everything queued: one request per coordinator broker (more only when one
        transactional id is queued twice for it, with another producer id or epoch)."""
        queued, self.queued = self.queued, {}
        out = []
        for broker_id, checks in queued.items():
            for batch in unique_batches(checks.values(), lambda c: c.transactional_id):
                request = AddPartitionsToTxnRequest(transactions=[_wire(c) for c in batch])
                out.append(
                    Outbound(
                        api_keys.ADD_PARTITIONS_TO_TXN,
                        ADD_PARTITIONS_TO_TXN_VERSION,
                        request,
                        destination=broker_id,
                        context=batch,
                    )
                )
        return Poll(out, None)

    def on_error(self, out: Outbound, error: Exception, now_ms: int) -> None:
        log.info("verifying transactions with broker %s failed: %s", out.destination, error)
        for c in out.context:
            c.resolve(dict.fromkeys(c.waiting, codes.NETWORK_EXCEPTION))

    def on_response(self, out: Outbound, answer: Any, now_ms: int) -> None:
        checks: list[_Check] = out.context
        if answer.error_code != codes.NONE:
            for c in checks:
                c.resolve(dict.fromkeys(c.waiting, answer.error_code))
            return
        answered: dict[str, dict[TopicPartition, int]] = {}
        for result in answer.results_by_transaction:
            by_tp = answered.setdefault(result.transactional_id, {})
            for t in result.topic_results:
                for p in t.results_by_partition:
                    by_tp[(t.name, p.partition_index)] = p.partition_error_code
        for c in checks:
            c.resolve(answered.get(c.transactional_id, {}))  # left out: verified, as in Kafka


def _mapped(pending: Pending, abortable_supported: bool) -> Pending:
    """A Pending of the Produce error code for this waiter (the check's code, mapped for it)."""
    out = Pending("transaction verification")
    pending.add_done_callback(lambda code: out.complete(produce_error(code, abortable_supported)))
    return out


def _wire(c: _Check) -> Any:
    by_topic: dict[str, list[int]] = {}
    for topic, index in c.waiting:
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
