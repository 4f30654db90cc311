"""The Raft log over our segment files (`__cluster_metadata-0`), and the file quorum-state store."""

from __future__ import annotations

import json
import os
import random

from gregor.clock import ManualClock
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import read_batch_records
from gregor.raft import wire
from gregor.raft.control import LEADER_CHANGE_KEY
from gregor.raft.log import Batch, SnapshotId
from gregor.raft.node import RaftNode
from gregor.raft.quorum_state import Kind
from gregor.raft.storage_log import DIR_NAME, StorageRaftLog
from gregor.raft.store import ElectionState, FileQuorumStateStore
from gregor.storage.config import LogConfig

SMALL = LogConfig(segment_bytes=400)  # a few batches per segment


def fill(log: StorageRaftLog) -> None:
    """epoch 1 at 0-2 (one batch of two, one of one), epoch 3 at 3-5 (a control batch first)."""
    log.append(Batch(0, 1, (b"a", b"b")))
    log.append(Batch(2, 1, (b"c",)))
    log.append(Batch(3, 3, (b"leader 1",), control=True))
    log.append(Batch(4, 3, (b"d", b"e")))


def test_append_and_read_back(tmp_path):
    log = StorageRaftLog.open(str(tmp_path), SMALL)
    fill(log)
    assert (log.start_offset, log.end_offset, log.last_epoch) == (0, 6, 3)
    assert log.read(0, 1 << 20) == [
        Batch(0, 1, (b"a", b"b")),
        Batch(2, 1, (b"c",)),
        Batch(3, 3, (b"leader 1",), control=True),
        Batch(4, 3, (b"d", b"e")),
    ]
    assert log.read(1, 1) == [Batch(0, 1, (b"a", b"b"))]  # the batch holding 1, at least one
    assert log.read(6, 100) == []
    # on disk: record batches v2 carrying the Raft epoch as partition leader epoch
    data = open(os.path.join(tmp_path, DIR_NAME, "00000000000000000000.log"), "rb").read()
    headers = [h for _, h in rb.iter_headers(data)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers][:2] == [(0, 1), (2, 1)]
    header, records = read_batch_records(data, sum(h.size for h in headers[:2]))
    assert header.is_control and records[0].key == LEADER_CHANGE_KEY  # Kafka's LEADER_CHANGE


def test_reads_of_the_recent_tail_answer_what_the_segments_hold(tmp_path):
    """The last batches appended are answered from memory: the same batches, cut at the same
    byte limits, as a read of the segments (a second log over the same files); a truncation
    and a snapshot installed forget them."""
    log = StorageRaftLog.open(str(tmp_path), SMALL)
    rng = random.Random(7)
    offset = 0
    for i in range(40):
        records = tuple(
            bytes([97 + i % 26]) * rng.randrange(1, 40) for _ in range(rng.randrange(1, 4))
        )
        log.append(Batch(offset, 1 + i // 10, records))
        offset += len(records)
    log.flush()
    disk = StorageRaftLog.open(str(tmp_path), SMALL)
    assert disk._tail == {}
    starts = []
    while not starts or starts[-1] < disk.end_offset:
        starts += [b.next_offset for b in disk.read(starts[-1] if starts else 0, 1 << 20)]
    assert len(disk._log.segments) > 3, "reads cross segments"
    for start in [0, *starts[:-1]]:
        for max_bytes in (1, 100, 250, 1 << 20):
            assert log.read(start, max_bytes) == disk.read(start, max_bytes), (start, max_bytes)
    assert log._tail, "the tail is kept"
    disk.close()
    log.truncate_to(5)
    assert log._tail == {}
    log.append(Batch(log.end_offset, 9, (b"new",)))
    assert log.read(log.end_offset - 1, 100) == [Batch(log.end_offset - 1, 9, (b"new",))]
    log.install_snapshot(SnapshotId(200, 9), b"state")
    assert log._tail == {} and log.read(200, 100) == []


def test_a_fetch_answer_from_the_tail_sends_the_bytes_the_segments_hold(tmp_path):
    """A leader's Fetch answer of its last appends carries the record batches as written (the
    append's timestamp and CRC), not batches built again; what the segments hold is built as
    before, and both decode to the same batches."""
    log = StorageRaftLog.open(str(tmp_path), SMALL, clock=ManualClock(1_700_000_000_000))
    fill(log)
    data = open(os.path.join(tmp_path, DIR_NAME, "00000000000000000000.log"), "rb").read()
    tail = log.read(0, 1 << 20)
    assert all(b.encoded is not None for b in tail)
    sent = wire.encode_batches(tuple(tail))
    assert sent == data[: len(sent)]
    assert [h.base_timestamp for _, h in rb.iter_headers(sent)] == [1_700_000_000_000] * 4
    assert wire.decode_batches(sent) == tuple(tail)
    log.flush()
    disk = StorageRaftLog.open(str(tmp_path), SMALL)
    from_disk = tuple(disk.read(0, 1 << 20))
    assert all(b.encoded is None for b in from_disk) and from_disk == tuple(tail)
    assert wire.decode_batches(wire.encode_batches(from_disk)) == tuple(tail)
    disk.close()


def test_the_log_reads_time_only_from_its_clock(tmp_path):
    """The injected clock stamps the batches and is the segments' own: their creation, a roll
    by `segment.ms`, the flush time; no other clock is read."""
    clock = ManualClock(now_ms=1_000_000)
    log = StorageRaftLog.open(str(tmp_path), LogConfig(segment_ms=60_000), clock)
    inner = log._log
    assert inner.clock is clock and inner.segments[0].created_ms == 1_000_000
    log.append(Batch(0, 1, (b"a",)))
    clock.advance(60_001)
    log.append(Batch(1, 1, (b"b",)))  # the first segment's data is over a minute old: rolled
    assert [seg.base_offset for seg in inner.segments] == [0, 1]
    assert inner.segments[1].created_ms == 1_060_001
    log.flush()
    assert inner.last_flush_ms == 1_060_001
    data = open(os.path.join(tmp_path, DIR_NAME, "00000000000000000001.log"), "rb").read()
    [(_, header)] = list(rb.iter_headers(data))
    assert header.max_timestamp == 1_060_001
    log.close()


def test_end_offset_for_epoch_and_truncation(tmp_path):
    log = StorageRaftLog.open(str(tmp_path), SMALL)
    fill(log)
    assert log.end_offset_for_epoch(1) == (1, 3)
    assert log.end_offset_for_epoch(2) == (1, 3)  # epoch 2 is unknown: the largest below it
    assert log.end_offset_for_epoch(3) == (3, 6)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.truncate_to(3) == 3
    assert (log.end_offset, log.last_epoch) == (3, 1)
    assert log.end_offset_for_epoch(3) == (1, 3)
    log.append(Batch(3, 4, (b"f",)))
    assert log.read(3, 100) == [Batch(3, 4, (b"f",))]


def test_flush_and_reopen(tmp_path):
    log = StorageRaftLog.open(str(tmp_path), SMALL)
    fill(log)
    assert log.flushed_offset == 0
    log.flush()
    assert log.flushed_offset == 6
    log.close()
    again = StorageRaftLog.open(str(tmp_path), SMALL)
    assert (again.end_offset, again.last_epoch) == (6, 3)
    assert again.end_offset_for_epoch(1) == (1, 3)
    assert [b.records for b in again.read(0, 1 << 20)] == [
        (b"a", b"b"),
        (b"c",),
        (b"leader 1",),
        (b"d", b"e"),
    ]


def test_reopen_after_a_crash_cuts_a_torn_tail(tmp_path):
    log = StorageRaftLog.open(str(tmp_path), LogConfig())
    fill(log)
    log.flush(3)
    path = os.path.join(tmp_path, DIR_NAME, "00000000000000000000.log")
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # the last batch was only half written when the power went
        f.truncate(size - 5)
    again = StorageRaftLog.open(str(tmp_path), LogConfig())  # no close: an unclean start
    assert (again.end_offset, again.last_epoch) == (4, 3)
    assert again.read(3, 100) == [Batch(3, 3, (b"leader 1",), control=True)]


def test_snapshots_move_the_log_start_and_survive_a_restart(tmp_path):
    log = StorageRaftLog.open(str(tmp_path), SMALL)
    fill(log)
    for i in range(6, 20):
        log.append(Batch(i, 3, (b"x%d" % i,)))
    log.flush()
    log.create_snapshot(SnapshotId(12, 3), b"state")
    log.delete_before_snapshot()
    assert (log.start_offset, log.end_offset) == (12, 20)
    assert log.read(12, 1)[0].base_offset == 12
    assert log.read_snapshot(SnapshotId(12, 3)) == b"state"
    assert os.path.exists(
        os.path.join(tmp_path, DIR_NAME, "00000000000000000012-0000000003.checkpoint")
    )
    assert not os.path.exists(os.path.join(tmp_path, DIR_NAME, "00000000000000000000.log"))
    log.close()
    again = StorageRaftLog.open(str(tmp_path), SMALL)
    assert (again.start_offset, again.end_offset, again.latest_snapshot()) == (
        12,
        20,
        SnapshotId(12, 3),
    )
    assert again.end_offset_for_epoch(3) == (3, 20)


def test_install_a_fetched_snapshot(tmp_path):
    log = StorageRaftLog.open(str(tmp_path), SMALL)
    fill(log)
    log.install_snapshot(SnapshotId(40, 5), b"leader state")
    assert (log.start_offset, log.end_offset, log.last_epoch) == (40, 40, 5)
    assert log.end_offset_for_epoch(5) == (5, 40)
    log.append(Batch(40, 6, (b"y",)))
    log.flush()
    log.close()
    again = StorageRaftLog.open(str(tmp_path), SMALL)
    assert (again.start_offset, again.end_offset, again.last_epoch) == (40, 41, 6)
    assert again.read_snapshot(SnapshotId(40, 5)) == b"leader state"


def test_a_snapshot_past_the_log_end_empties_the_log_on_open(tmp_path):
    log = StorageRaftLog.open(str(tmp_path), SMALL)
    fill(log)
    log.flush()
    log._write_snapshot(SnapshotId(30, 4), b"s")  # a crash between writing and truncating
    log.close()
    again = StorageRaftLog.open(str(tmp_path), SMALL)
    assert (again.start_offset, again.end_offset, again.last_epoch) == (30, 30, 4)


def test_file_quorum_state_store(tmp_path):
    store = FileQuorumStateStore(str(tmp_path), voters=[3, 1, 2])
    assert store.read() is None
    store.write(ElectionState(7, None, 2))
    assert FileQuorumStateStore(str(tmp_path)).read() == ElectionState(7, None, 2)
    body = json.load(open(os.path.join(tmp_path, "quorum-state")))
    assert (body["leaderEpoch"], body["leaderId"], body["votedId"]) == (7, -1, 2)
    assert body["currentVoters"] == [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}]


def test_a_single_voter_node_over_storage_commits_and_restarts(tmp_path):
    def start(now: int) -> RaftNode:
        log = StorageRaftLog.open(str(tmp_path), SMALL)
        store = FileQuorumStateStore(log.directory, voters=[1])
        return RaftNode(1, [1], log, store, random.Random(now), now)

    node = start(0)
    committed = list(node.poll(0).committed)
    assert node.state is Kind.LEADER and node.epoch == 1
    for i in range(5):
        node.append([b"rec%d" % i], i)
    committed += node.poll(100).committed
    assert [e.data for e in committed if not e.control] == [b"rec%d" % i for i in range(5)]
    node.log.close()  # type: ignore[attr-defined]

    node = start(1000)
    assert node.state is Kind.RESIGNED and node.epoch == 1  # it led epoch 1: never again
    again = list(node.poll(1000).committed)
    assert node.state is Kind.LEADER and node.epoch == 2
    assert [e.data for e in again if not e.control] == [b"rec%d" % i for i in range(5)]
    assert [(e.offset, e.epoch) for e in again if e.control] == [(0, 1), (6, 2)]
