"""Transaction markers wait for their ISR (handlers/txn_markers.py DelayedMarkers), as Kafka
appends them with acks=all: a WriteTxnMarkers answer, and a marker this broker's coordinator
writes in place, come once the high watermark passes the marker; NOT_LEADER_OR_FOLLOWER if the
leadership moves first. Time is driven by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gregor.handlers.txn_markers import write_marker, write_markers
from gregor.protocol import errors
from gregor.protocol.messages import WriteTxnMarkersRequest as W
from gregor.protocol.records.records import build_batch
from gregor.replication.partition import Partition
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperationPurgatory

from .helpers import NOW, Cluster, host, manager, registration

PID = 5


def open_transaction(tmp_path: Path) -> tuple[Any, Partition]:
    """Partition t-0 led here (replicas 1 and 2), with producer 5's transaction open in it."""
    rm = manager(tmp_path, 1, Cluster())
    p = host(rm, registration(1, 0, (1, 2)))
    batch = build_batch(
        [(b"k", b"v")], base_timestamp=NOW, producer_id=PID, producer_epoch=0, base_sequence=0,
        transactional=True,
    )  # fmt: skip
    p.append_as_leader(batch, -1, NOW)
    p.fetch_for_follower(2, 102, 1, -1, 0, 0, 1 << 20, True, NOW)  # the batch is replicated
    assert p.log.high_watermark == 1
    return rm, p


def request() -> W:
    topic = W.WritableTxnMarkerTopic(name="t", partition_indexes=[0])
    marker = W.WritableTxnMarker(
        producer_id=PID, producer_epoch=0, transaction_result=True, topics=[topic],
        coordinator_epoch=0,
    )  # fmt: skip
    return W(markers=[marker])


def test_write_txn_markers_is_answered_once_the_marker_is_on_the_isr(tmp_path: Path) -> None:
    rm, p = open_transaction(tmp_path)
    purgatory = DelayedOperationPurgatory("test")
    answer = write_markers(rm, None, purgatory, NOW, request())  # type: ignore[arg-type]
    assert isinstance(answer, Pending) and not answer.done, "appended, not yet replicated"
    assert p.log.log_end_offset == 2
    p.fetch_for_follower(2, 102, 2, -1, 0, 0, 1 << 20, True, NOW)
    assert answer.done
    code = answer.value.markers[0].topics[0].partitions[0].error_code
    assert code == errors.NONE and purgatory.delayed() == 0


def test_a_marker_written_in_place_fails_when_the_leadership_moves(tmp_path: Path) -> None:
    rm, p = open_transaction(tmp_path)
    purgatory = DelayedOperationPurgatory("test")
    answer = write_marker(rm, None, purgatory, NOW, "t", 0, PID, 0, 0, True)  # type: ignore[arg-type]
    assert isinstance(answer, Pending) and not answer.done
    host(rm, registration(2, 1, (1, 2), partition_epoch=1))  # broker 2 leads now
    assert answer.done and answer.value == errors.NOT_LEADER_OR_FOLLOWER


def test_a_marker_not_replicated_in_time_times_out(tmp_path: Path) -> None:
    rm, _p = open_transaction(tmp_path)
    purgatory = DelayedOperationPurgatory("test")
    answer = write_marker(rm, None, purgatory, NOW, "t", 0, PID, 0, 0, True)  # type: ignore[arg-type]
    assert isinstance(answer, Pending)
    deadline = purgatory.next_deadline_ms()
    assert deadline is not None
    purgatory.expire(deadline)
    assert answer.done and answer.value == errors.REQUEST_TIMED_OUT
