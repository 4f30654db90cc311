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
from gregor.replication.partition import ReplicaManager

log = logging.getLogger("gregor.txn")

R = WriteTxnMarkersResponse
OFFSETS_TOPIC = "__consumer_offsets"


def write_marker(
    replicas: ReplicaManager,
    groups: GroupCoordinator,
    now_ms: int,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    committed: bool,
) -> int:
    """Append one marker; the error code (0 when written)."""
    try:
        p = replicas.leader(topic, partition)
        p.write_txn_marker(producer_id, producer_epoch, coordinator_epoch, committed, now_ms)
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
        return exc.code
    except Exception:
        log.exception("writing a transaction marker to %s-%d failed", topic, partition)
        return errors.UNKNOWN_SERVER_ERROR
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
    return errors.NONE


@handles(api_keys.WRITE_TXN_MARKERS)
def handle(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    results = []
    for m in request.markers:
        topics = []
        for t in m.topics:
            parts = [
                R.WritableTxnMarkerPartitionResult(
                    partition_index=index,
                    error_code=write_marker(
                        services.replicas,
                        services.groups,
                        services.now_ms(),
                        t.name,
                        index,
                        m.producer_id,
                        m.producer_epoch,
                        m.coordinator_epoch,
                        m.transaction_result,
                    ),
                )
                for index in t.partition_indexes
            ]
            topics.append(R.WritableTxnMarkerTopicResult(name=t.name, partitions=parts))
        results.append(R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
    return R(markers=results)
