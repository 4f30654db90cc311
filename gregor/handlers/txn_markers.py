"""WriteTxnMarkers v1: a transaction coordinator asks this broker to end transactions in the
partitions it leads.

Each marker is a COMMIT or ABORT control batch of the producer, appended to every listed
partition (the producer state checks its epoch and the coordinator epoch: an older coordinator
gets TRANSACTION_COORDINATOR_FENCED, an older producer epoch INVALID_PRODUCER_EPOCH). A marker in
a `__consumer_offsets` partition also settles the transaction's offset commits there, whichever
broker's coordinator sent it. A partition we do not lead answers UNKNOWN_TOPIC_OR_PARTITION /
NOT_LEADER_OR_FOLLOWER; the sending coordinator retries it unless its metadata no longer has the
partition (gregor/coordinator/txn/markers.py). `write_marker` is also what this broker's own
transaction coordinator calls for the partitions it leads, without a round trip.

A marker is answered once it is on every ISR member (acks=all, as Kafka appends markers;
`DelayedMarkers` in the purgatory, woken by the partition's high watermark): the coordinator
writes its Complete* record on that answer, and a marker answered at the append could be lost
with its leader (a leader in a stale epoch, say), leaving the transaction open in that
partition forever. A marker whose leadership goes first answers NOT_LEADER_OR_FOLLOWER, one
still waiting after MARKER_WRITE_TIMEOUT_MS REQUEST_TIMED_OUT: the coordinator retries both.
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.coordinator.runtime import GroupCoordinator
from gregor.handlers.context import RequestContext
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import WriteTxnMarkersResponse
from gregor.replication.partition import Partition, ReplicaManager
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperation, DelayedOperationPurgatory
from gregor.security.acls import CLUSTER_ACTION

log = logging.getLogger("gregor.txn")

R = WriteTxnMarkersResponse
OFFSETS_TOPIC = "__consumer_offsets"
MARKER_WRITE_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms, which WriteTxnMarkers waits with
# (the answer to fill in, the partition, its marker's end offset, the leader epoch it went in at)
Awaiting = tuple[Any, Partition, int, int]


class DelayedMarkers(DelayedOperation):
    """Markers appended here, waiting to be on every ISR member (module docstring)."""

    __slots__ = ("waiting", "answer")

    def __init__(self, waiting: list[Awaiting], deadline_ms: int) -> None:
        super().__init__(deadline_ms)
        self.waiting = waiting
        self.answer = Pending("txn markers")

    def try_complete(self) -> bool:
        left = []
        for w in self.waiting:
            result, p, end, epoch = w
            code = p.acks_all_status(end, epoch)
            if code is None:
                left.append(w)
            else:
                result.error_code = code
        self.waiting = left
        return not left

    def on_expiration(self) -> None:
        for result, *_ in self.waiting:
            result.error_code = errors.REQUEST_TIMED_OUT

    def on_complete(self) -> None:
        self.answer.complete(None)


def _await(
    purgatory: DelayedOperationPurgatory, waiting: list[Awaiting], now_ms: int
) -> Pending | None:
    """None if every marker is settled now (its answer filled in); else a Pending done when
    they all are."""
    if not waiting:
        return None
    op = DelayedMarkers(waiting, now_ms + MARKER_WRITE_TIMEOUT_MS)
    if purgatory.try_complete_else_watch(op, dict.fromkeys(w[1] for w in waiting)):
        return None
    return op.answer


class _Answer:
    __slots__ = ("error_code",)

    def __init__(self) -> None:
        self.error_code = errors.NONE


def write_marker(
    replicas: ReplicaManager,
    groups: GroupCoordinator,
    purgatory: DelayedOperationPurgatory,
    now_ms: int,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    committed: bool,
) -> int | Pending:
    """Append one marker; the error code once it is settled (0: on every ISR member), or a
    Pending of it."""
    answer = _Answer()
    answer.error_code, appended = append_marker(
        replicas, groups, now_ms, topic, partition, producer_id, producer_epoch,
        coordinator_epoch, committed,
    )  # fmt: skip
    waiting = [] if appended is None else [(answer, *appended)]
    held = _await(purgatory, waiting, now_ms)
    if held is None:
        return answer.error_code
    settled = Pending(f"marker {topic}-{partition}")
    held.add_done_callback(lambda _none: settled.complete(answer.error_code))
    return settled


def append_marker(
    replicas: ReplicaManager,
    groups: GroupCoordinator,
    now_ms: int,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    committed: bool,
) -> tuple[int, tuple[Partition, int, int] | None]:
    """Append one marker: (the error code, None) if refused; else (0, (the partition, the
    marker's end offset, the leader epoch it was appended in)), to wait on."""
    try:
        p = replicas.leader(topic, partition)
        info = p.write_txn_marker(producer_id, producer_epoch, coordinator_epoch, committed, now_ms)
    except KafkaError as exc:
        if exc.code not in (errors.UNKNOWN_TOPIC_OR_PARTITION, errors.NOT_LEADER_OR_FOLLOWER):
            log.warning(
                "%s marker of producer %d (epoch %d) refused by %s-%d: %s",
                "COMMIT" if committed else "ABORT",
                producer_id,
                producer_epoch,
                topic,
                partition,
                exc,
            )
        return exc.code, None
    except Exception:
        log.exception("writing a transaction marker to %s-%d failed", topic, partition)
        return errors.UNKNOWN_SERVER_ERROR, None
    if topic == OFFSETS_TOPIC:
        # The marker is in the log whatever happens here; loading would settle the offsets.
        try:
            groups.complete_transaction(partition, producer_id, committed)
        except Exception:
            log.exception(
                "settling the transactional offsets of producer %d in %s-%d failed",
                producer_id,
                topic,
                partition,
            )
    return errors.NONE, (p, info.last_offset + 1, p.leader_epoch)


@handles(api_keys.WRITE_TXN_MARKERS)
def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    if not ctx.authorize_cluster(CLUSTER_ACTION):  # sent by transaction coordinators only
        return _cluster_refused(request)
    return write_markers(
        services.replicas, services.groups, services.purgatory, services.now_ms(), request
    )


def write_markers(
    replicas: ReplicaManager,
    groups: GroupCoordinator,
    purgatory: DelayedOperationPurgatory,
    now_ms: int,
    request: Any,
) -> WriteTxnMarkersResponse | Pending:
    """Every marker of a WriteTxnMarkers request, in order; the response once each is settled
    (or a Pending of it)."""
    results = []
    waiting: list[Awaiting] = []
    for m in request.markers:
        topics = []
        for t in m.topics:
            parts = []
            for index in t.partition_indexes:
                code, appended = append_marker(
                    replicas, groups, now_ms, t.name, index, m.producer_id, m.producer_epoch,
                    m.coordinator_epoch, m.transaction_result,
                )  # fmt: skip
                result = R.WritableTxnMarkerPartitionResult(partition_index=index, error_code=code)
                if appended is not None:
                    waiting.append((result, *appended))
                parts.append(result)
            topics.append(R.WritableTxnMarkerTopicResult(name=t.name, partitions=parts))
        results.append(R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
    response = R(markers=results)
    held = _await(purgatory, waiting, now_ms)
    if held is None:
        return response
    answer = Pending("WriteTxnMarkers")
    held.add_done_callback(lambda _none: answer.complete(response))
    return answer


def _cluster_refused(request: Any) -> Any:
    """CLUSTER_AUTHORIZATION_FAILED for every partition of every marker (as Kafka)."""
    R = WriteTxnMarkersResponse
    return R(
        markers=[
            R.WritableTxnMarkerResult(
                producer_id=m.producer_id,
                topics=[
                    R.WritableTxnMarkerTopicResult(
                        name=t.name,
                        partitions=[
                            R.WritableTxnMarkerPartitionResult(
                                partition_index=p, error_code=errors.CLUSTER_AUTHORIZATION_FAILED
                            )
                            for p in t.partition_indexes
                        ],
                    )
                    for t in m.topics
                ],
            )
            for m in request.markers
        ]
    )
