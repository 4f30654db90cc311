"""Transactional offset commits through the coordinator runtime over real storage (a
`BrokerServer` built but not listening): the batch on disk is the producer's transactional
batch, the offsets stay pending across a crash and a restart until the marker, and a marker is
applied the same way whether the runtime is told of it or loading meets it in the log."""

from __future__ import annotations

from pathlib import Path

from test_runtime import NOW, broker

from gregor.broker.broker import BrokerServer
from gregor.coordinator.group import codes
from gregor.coordinator.group.records import OffsetCommitRecord, decode, partition_for
from gregor.coordinator.group.results import OffsetCommitRequest, TxnOffsetCommitRequest
from gregor.coordinator.runtime import OFFSETS_TOPIC
from gregor.protocol.records.batch import iter_headers
from gregor.protocol.records.records import build_control_batch, read_batch_records
from gregor.replication.partition import Partition
from gregor.storage.producer_state import AppendOrigin

PID, EPOCH = 4242, 3
UNSTABLE = codes.UNSTABLE_OFFSET_COMMIT
GROUP = "g"
INDEX = partition_for(GROUP, 3)  # test_runtime's broker has 3 __consumer_offsets partitions


def txn_request(
    offsets: list[tuple[str, int, int, int, str | None]], epoch: int = EPOCH, group: str = GROUP
) -> TxnOffsetCommitRequest:
    return TxnOffsetCommitRequest(group, PID, epoch, -1, "", None, offsets, "my-txn")


def fetch(b: BrokerServer, stable: bool) -> list[tuple[int, int]]:
    res = b.services.groups.fetch_offsets(GROUP, [("t", [0, 1])], stable)
    assert res.error == codes.NONE
    return [(o.offset, o.error) for o in res.offsets]


def load(b: BrokerServer) -> None:
    while b.services.groups.runtime.loading:
        b.services.groups.poll(NOW)


def offsets_partition(b: BrokerServer) -> Partition:
    p = b.replicas.get(OFFSETS_TOPIC, INDEX)
    assert p is not None
    return p


def append_marker(b: BrokerServer, committed: bool, now_ms: int) -> None:
    """What the broker does with a WriteTxnMarkers for this partition, before it tells the
    coordinator: the control batch, appended as a coordinator's write."""
    p = offsets_partition(b)
    p.log.append(
        build_control_batch(PID, EPOCH, 0, committed, now_ms),
        leader_epoch=p.leader_epoch, now_ms=now_ms, origin=AppendOrigin.COORDINATOR,
    )  # fmt: skip
    p.maybe_increment_high_watermark()


def start_with_pending_commit(tmp_path: Path) -> BrokerServer:
    """A plain commit of t-0 at 5, then a transaction commits t-0 at 10 and t-1 at 11."""
    b = broker(tmp_path)
    b.services.groups.ensure_offsets_topic()
    plain = OffsetCommitRequest(GROUP, -1, "", None, -1, [("t", 0, 5, -1, "")])
    assert b.services.groups.commit_offsets(plain, NOW).error == codes.NONE
    res = b.services.groups.txn_offset_commit(
        txn_request([("t", 0, 10, 2, "m"), ("t", 1, 11, -1, None)]), NOW + 1
    )
    assert res.error == codes.NONE and [e for *_, e in res.partitions] == [0, 0]
    return b


def test_the_transactional_batch_on_disk(tmp_path: Path) -> None:
    b = start_with_pending_commit(tmp_path)
    p = offsets_partition(b)
    data = p.log.read_bytes(0, 1 << 20)
    headers = [h for _, h in iter_headers(data)]
    assert len(headers) == 2
    plain, txn = headers
    assert (plain.producer_id, plain.is_transactional) == (-1, False)
    assert (txn.producer_id, txn.producer_epoch, txn.base_sequence) == (PID, EPOCH, 0)
    assert txn.is_transactional and not txn.is_control and txn.records_count == 2, (
        "ONE transactional batch"
    )
    pos = next(pos for pos, h in iter_headers(data) if h.is_transactional)
    _, recs = read_batch_records(data, pos)
    decoded = [decode(r.key, r.value) for r in recs if r.key is not None]
    assert [(r.topic, r.partition, r.value.offset if r.value else None) for r in decoded if isinstance(r, OffsetCommitRecord)] == [
        ("t", 0, 10), ("t", 1, 11),
    ]  # fmt: skip
    # The partition's producer state sees an open transaction, as for any transactional write.
    entry = p.log.producer_state.last_entry(PID)
    assert entry is not None and entry.current_txn_first_offset == txn.base_offset
    assert fetch(b, stable=True) == [(-1, UNSTABLE), (-1, UNSTABLE)]
    assert fetch(b, stable=False) == [(5, 0), (-1, 0)]
    b.logs.shutdown()


def test_pending_across_a_crash_then_committed_by_the_marker(tmp_path: Path) -> None:
    start_with_pending_commit(tmp_path)
    # Killed before the marker: never shut down. The next broker recovers and loads.
    b2 = broker(tmp_path)
    load(b2)
    assert fetch(b2, stable=True) == [(-1, UNSTABLE), (-1, UNSTABLE)], "pending after the restart"
    assert fetch(b2, stable=False) == [(5, 0), (-1, 0)]
    # The transaction coordinator re-sends its marker; the broker appends it, then tells us.
    append_marker(b2, committed=True, now_ms=NOW + 2)
    assert fetch(b2, stable=True) == [(-1, UNSTABLE), (-1, UNSTABLE)], "applied only when told"
    b2.services.groups.complete_transaction(INDEX, PID, committed=True)
    assert fetch(b2, stable=True) == [(10, 0), (11, 0)]
    found = b2.services.groups.fetch_offsets(GROUP, [("t", [0])]).offsets[0]
    assert (found.leader_epoch, found.metadata) == (2, "m")
    b2.logs.shutdown()
    # Loading meets the marker in the log: the same outcome.
    b3 = broker(tmp_path)
    load(b3)
    assert fetch(b3, stable=True) == [(10, 0), (11, 0)]
    b3.logs.shutdown()


def test_abort_and_a_plain_commit_after_the_transactional_one(tmp_path: Path) -> None:
    b = start_with_pending_commit(tmp_path)
    later = OffsetCommitRequest(GROUP, -1, "", None, -1, [("t", 1, 50, -1, "")])
    assert b.services.groups.commit_offsets(later, NOW + 2).error == codes.NONE
    append_marker(b, committed=True, now_ms=NOW + 3)
    b.services.groups.complete_transaction(INDEX, PID, committed=True)
    assert fetch(b, stable=True) == [(10, 0), (50, 0)], "t-1's plain commit is later in the log"
    # A second transaction, aborted.
    assert (
        b.services.groups.txn_offset_commit(txn_request([("t", 0, 99, -1, "")]), NOW + 4).error
        == codes.NONE
    )
    append_marker(b, committed=False, now_ms=NOW + 5)
    b.services.groups.complete_transaction(INDEX, PID, committed=False)
    assert fetch(b, stable=True) == [(10, 0), (50, 0)]
    b.logs.shutdown()
    b2 = broker(tmp_path)
    load(b2)
    assert fetch(b2, stable=True) == [(10, 0), (50, 0)]
    b2.logs.shutdown()


def test_a_marker_during_loading_is_read_from_the_log(tmp_path: Path) -> None:
    b = start_with_pending_commit(tmp_path)
    b.logs.shutdown()
    b2 = broker(tmp_path)
    assert b2.services.groups.coordinator_error(GROUP) == codes.COORDINATOR_LOAD_IN_PROGRESS
    res = b2.services.groups.txn_offset_commit(txn_request([("t", 0, 12, -1, "")]), NOW + 2)
    assert [e for *_, e in res.partitions] == [codes.COORDINATOR_LOAD_IN_PROGRESS]
    append_marker(b2, committed=False, now_ms=NOW + 2)
    b2.services.groups.complete_transaction(
        INDEX, PID, committed=False
    )  # loading: the log will say it
    load(b2)
    assert fetch(b2, stable=True) == [(5, 0), (-1, 0)], "aborted, once"
    b2.logs.shutdown()


def test_an_older_producer_epoch_is_fenced(tmp_path: Path) -> None:
    b = start_with_pending_commit(tmp_path)
    end = offsets_partition(b).log.log_end_offset
    res = b.services.groups.txn_offset_commit(
        txn_request([("t", 0, 7, -1, "")], epoch=EPOCH - 1), NOW + 2
    )
    # Kafka's log refuses a coordinator's write of an old epoch with INVALID_PRODUCER_EPOCH, and
    # TxnOffsetCommit passes that on.
    assert res.error == codes.INVALID_PRODUCER_EPOCH
    assert [e for *_, e in res.partitions] == [codes.INVALID_PRODUCER_EPOCH]
    assert offsets_partition(b).log.log_end_offset == end, "nothing written"
    # The same producer and epoch may commit again in its transaction (no sequence checks).
    assert (
        b.services.groups.txn_offset_commit(txn_request([("t", 0, 13, -1, "")]), NOW + 3).error
        == codes.NONE
    )
    append_marker(b, committed=True, now_ms=NOW + 4)
    b.services.groups.complete_transaction(INDEX, PID, committed=True)
    assert fetch(b, stable=True) == [(13, 0), (11, 0)]
    b.logs.shutdown()


def test_other_partitions_and_unknown_producers_are_left_alone(tmp_path: Path) -> None:
    b = start_with_pending_commit(tmp_path)
    b.services.groups.complete_transaction(
        (INDEX + 1) % 3, PID, committed=True
    )  # another partition
    b.services.groups.complete_transaction(INDEX, PID + 1, committed=True)  # another producer
    b.services.groups.complete_transaction(99, PID, committed=True)  # not ours at all
    assert fetch(b, stable=True) == [(-1, UNSTABLE), (-1, UNSTABLE)]
    assert (
        b.services.groups.txn_offset_commit(txn_request([("t", 0, 1, -1, "")], group=""), NOW).error
        == codes.INVALID_GROUP_ID
    )
    b.logs.shutdown()
