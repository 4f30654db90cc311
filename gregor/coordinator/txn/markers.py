"""Transaction markers on their way to partition leaders, sans I/O (what Kafka's
TransactionMarkerChannelManager decides; the driver sends).

    markers = MarkerChannel(node_id, image=lambda: store.image, write_local=write_here,
                            reachable=links.reachable)    # None: no network (one node)
    markers.write_markers(tid, pid, epoch, coordinator_epoch, committed, partitions, done)
    result = markers.poll(now_ms)           # one WriteTxnMarkers per destination broker
    markers.on_response(out, answer, now_ms)        # or on_error(out, exc, now_ms)

It is the `MarkerWriter` of `gregor.coordinator.txn.runtime`. Each partition is routed by the
metadata image at the time of the call:

    not in the image (its topic was deleted)  UNKNOWN_TOPIC_OR_PARTITION: the shard counts the
                                              marker as done, as Kafka drops it
    led here                                  written in place (`write_local`): its code at
                                              once, or a Pending of it (the marker waits for
                                              the ISR, as one sent to a broker does)
    no leader now, or a leader with no        NOT_LEADER_OR_FOLLOWER: retried
      registered endpoint
    led by another broker                     queued for that broker

Queued markers leave at the next poll (the driver's next turn of the event loop), one
WriteTxnMarkers request per destination broker carrying every transaction queued for it by
then (Kafka batches per broker the same way; a request never holds one producer id twice,
since the answer is keyed by it). `done` is called once per call, with an error code for every
partition: at once when nothing went out, otherwise when the last destination has answered.

Nothing is retried here. The shard retries what it deems retriable after its backoff
(`marker_retry_backoff_ms`), and each retry is routed afresh, so it goes to the partition's
current leader. What this module does is make the codes say what happened:

    the request failed (disconnected,      NETWORK_EXCEPTION for each of its partitions
      timed out, the broker is down)
    UNKNOWN_TOPIC_OR_PARTITION while the   NOT_LEADER_OR_FOLLOWER (the leader has not created
      image still has the partition          it yet, or metadata is moving): retried
    COORDINATOR_LOAD_IN_PROGRESS,          NOT_LEADER_OR_FOLLOWER, as Kafka's receiving broker
      COORDINATOR_NOT_AVAILABLE,             answers them for `__consumer_offsets`
      NOT_COORDINATOR
    a partition the answer leaves out      UNKNOWN_SERVER_ERROR (the shard retries slowly)
    anything else                          as answered (INVALID_PRODUCER_EPOCH and
                                           TRANSACTION_COORDINATOR_FENCED make the shard stop)

A broker without a network (`reachable` None: one node, its own quorum) writes every partition
the image names in place, and answers before returning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.coordinator.txn import codes
from gregor.metadata.image import MetadataImage
from gregor.protocol import api_keys
from gregor.protocol.messages import WriteTxnMarkersRequest
from gregor.protocol.outbound import Outbound, Poll, unique_batches
from gregor.replication.pending import Pending

log = logging.getLogger("gregor.txn.markers")

TopicPartition = tuple[str, int]
Done = Callable[[dict[TopicPartition, int]], None]
# (topic, partition, producer id, producer epoch, coordinator epoch, committed) -> error code,
# or a Pending of it
LocalWriter = Callable[[str, int, int, int, int, bool], int | Pending]

WRITE_TXN_MARKERS_VERSION = 1
RETRY_AS_NOT_LEADER = frozenset(
    {codes.COORDINATOR_LOAD_IN_PROGRESS, codes.COORDINATOR_NOT_AVAILABLE, codes.NOT_COORDINATOR}
)


@dataclass
class _Call:
    """One `write_markers` call: its answers so far and how many destinations still owe one."""

    done: Done
    errors: dict[TopicPartition, int] = field(default_factory=dict)
    waiting: int = 0

    def answer(self, errors: dict[TopicPartition, int]) -> None:
        self.errors.update(errors)
        self.waiting -= 1
        assert self.waiting >= 0, "a destination answered twice"
        if self.waiting == 0:
            self.done(self.errors)


@dataclass
class _Marker:
    """One transaction's markers for one destination broker."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: list[TopicPartition]
    call: _Call


def _noop() -> None:
    pass


class MarkerChannel:
    def __init__(
        self,
        node_id: int,
        image: Callable[[], MetadataImage],
        write_local: LocalWriter,
        reachable: Callable[[int], bool] | None,
    ) -> None:
        """`reachable(broker)`: registered with an endpoint; None: no network (one node)."""
        self.node_id = node_id
        self.image = image
        self.write_local = write_local
        self.reachable = reachable
        self.queued: dict[int, list[_Marker]] = {}
        self.unreachable: set[int] = set()  # brokers whose last request failed (for the log)
        self.wakeup: Callable[[], None] = _noop  # set by the driver

    def write_markers(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        partitions: list[TopicPartition],
        done: Done,
    ) -> None:
        call = _Call(done, waiting=1)  # the 1 is this call's own part, answered below
        remote: dict[int, list[TopicPartition]] = {}
        image = self.image()
        for tp in partitions:
            part = image.partition(*tp)
            if part is None:
                log.info("transactional id %s: %s-%d no longer exists; its marker is skipped",
                         transactional_id, *tp)  # fmt: skip
                call.errors[tp] = codes.UNKNOWN_TOPIC_OR_PARTITION
            elif self.reachable is None or part.leader == self.node_id:
                code = self.write_local(
                    tp[0], tp[1], producer_id, producer_epoch, coordinator_epoch, committed
                )
                if isinstance(code, Pending):
                    call.waiting += 1
                    code.add_done_callback(self._local_answer(call, tp))
                else:
                    call.errors[tp] = self._outcome(tp, code)
            elif part.leader < 0 or not self.reachable(part.leader):
                call.errors[tp] = codes.NOT_LEADER_OR_FOLLOWER
            else:
                remote.setdefault(part.leader, []).append(tp)
        for broker_id, tps in remote.items():
            marker = _Marker(producer_id, producer_epoch, coordinator_epoch, committed, tps, call)
            self.queued.setdefault(broker_id, []).append(marker)
            call.waiting += 1
        if remote:
            self.wakeup()
        call.answer({})

    def _local_answer(self, call: _Call, tp: TopicPartition) -> Callable[[int], None]:
        return lambda code: call.answer({tp: self._outcome(tp, code)})

    def _outcome(self, tp: TopicPartition, code: int) -> int:
        """The code the shard should see for a marker answered `code` (see the table above)."""
        if code == codes.UNKNOWN_TOPIC_OR_PARTITION and self.image().partition(*tp) is not None:
            return codes.NOT_LEADER_OR_FOLLOWER
        if code in RETRY_AS_NOT_LEADER:
            return codes.NOT_LEADER_OR_FOLLOWER
        return code

    def poll(self, now_ms: int) -> Poll:
        """Everything queued: one request per destination broker (more only when one producer
        id is queued twice for it)."""
        queued, self.queued = self.queued, {}
        out = []
        for broker_id, markers in queued.items():
            for batch in unique_batches(markers, lambda m: m.producer_id):
                request = WriteTxnMarkersRequest(markers=[_wire(m) for m in batch])
                out.append(
                    Outbound(
                        api_keys.WRITE_TXN_MARKERS,
                        WRITE_TXN_MARKERS_VERSION,
                        request,
                        destination=broker_id,
                        context=batch,
                    )
                )
        return Poll(out, None)

    def on_error(self, out: Outbound, error: Exception, now_ms: int) -> None:
        broker_id = out.destination
        assert broker_id is not None
        if broker_id not in self.unreachable:
            self.unreachable.add(broker_id)
            log.info("transaction markers to broker %d failed (%s); retrying", broker_id, error)
        for m in out.context:
            m.call.answer(dict.fromkeys(m.partitions, codes.NETWORK_EXCEPTION))

    def on_response(self, out: Outbound, answer: Any, now_ms: int) -> None:
        broker_id = out.destination
        if broker_id in self.unreachable:
            self.unreachable.discard(broker_id)
            log.info("transaction markers reach broker %d again", broker_id)
        answered: dict[int, dict[TopicPartition, int]] = {}
        for result in answer.markers:
            by_tp = answered.setdefault(result.producer_id, {})
            for t in result.topics:
                for p in t.partitions:
                    by_tp[(t.name, p.partition_index)] = p.error_code
        for m in out.context:
            got = answered.get(m.producer_id, {})
            m.call.answer(
                {
                    tp: self._outcome(tp, got.get(tp, codes.UNKNOWN_SERVER_ERROR))
                    for tp in m.partitions
                }
            )


def _wire(m: _Marker) -> WriteTxnMarkersRequest.WritableTxnMarker:
    by_topic: dict[str, list[int]] = {}
    for topic, index in m.partitions:
        by_topic.setdefault(topic, []).append(index)
    return WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=m.producer_id,
        producer_epoch=m.producer_epoch,
        transaction_result=m.committed,
        topics=[
            WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
            for name, indexes in by_topic.items()
        ],
        coordinator_epoch=m.coordinator_epoch,
    )
