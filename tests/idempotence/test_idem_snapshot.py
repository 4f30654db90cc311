"""Producer state snapshots: Kafka's byte layout (checked against a layout packed here by hand),
round trips, the CRC, how Kafka would read ours, and when a log writes and deletes them."""

from __future__ import annotations

import os
import struct

import pytest
from crc32c import crc32c
from idem_helpers import (
    expected_state,
    idem_batch,
    log_batches,
    open_log,
    plain_batch,
    snapshot_files,
)

from gregor.storage import producer_snapshot as snap
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    entries_to_state,
)

E = snap.SnapshotEntry
ENTRIES = [
    E(1000, 3, 41, 977, 4, 1_700_000_000_123, -1, -1),
    E(1001, 0, -1, -1, 0, 55, 7, -1),  # an epoch with no batch remembered
    E(-(2**63), -(2**15), 2**31 - 1, 2**63 - 1, 2**31 - 1, -1, 2**31 - 1, 2**62),  # extremes
]


def kafka_layout(entries: list[E]) -> bytes:
    """ProducerSnapshot v1, packed field by field from the schema (ProducerSnapshot.json)."""
    body = struct.pack(">i", len(entries))
    for e in entries:
        body += struct.pack(">q", e.producer_id) + struct.pack(">h", e.epoch)
        body += struct.pack(">i", e.last_sequence) + struct.pack(">q", e.last_offset)
        body += struct.pack(">i", e.offset_delta) + struct.pack(">q", e.timestamp)
        body += struct.pack(">i", e.coordinator_epoch) + struct.pack(
            ">q", e.current_txn_first_offset
        )
    return struct.pack(">hI", 1, crc32c(body)) + body


def test_bytes_are_kafkas_layout() -> None:
    assert snap.encode(ENTRIES) == kafka_layout(ENTRIES)
    assert (
        snap.encode([])
        == kafka_layout([])
        == b"\x00\x01" + struct.pack(">I", crc32c(b"\0\0\0\0")) + b"\0\0\0\0"
    )
    assert len(snap.encode(ENTRIES)) == 10 + 46 * len(ENTRIES)


def test_round_trip(tmp_path) -> None:
    assert snap.decode(snap.encode(ENTRIES)) == ENTRIES
    path = snap.write(str(tmp_path), 12345, ENTRIES)
    assert os.path.basename(path) == "00000000000000012345.snapshot"
    assert snap.read(path) == ENTRIES
    assert snap.list_offsets(str(tmp_path)) == [12345]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_every_damaged_byte_is_caught() -> None:
    data = snap.encode(ENTRIES)
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0x40
        with pytest.raises(snap.CorruptSnapshotError):
            snap.decode(bytes(damaged))
    for cut in (0, 5, 9, len(data) - 1):
        with pytest.raises(snap.CorruptSnapshotError):
            snap.decode(data[:cut])
    with pytest.raises(snap.CorruptSnapshotError, match="version"):
        snap.decode(b"\x00\x02" + data[2:])


def state_with_history() -> dict[int, ProducerStateEntry]:
    return {
        7: ProducerStateEntry(
            7, 2, [BatchMetadata(10 + 3 * i, 12 + 3 * i, 100 + 10 * i, 2, 500 + i) for i in range(5)],
            last_timestamp=504,
        ),
        8: ProducerStateEntry(8, 0, [BatchMetadata(0, 0, 3, 0, 9)], last_timestamp=9, current_txn_first_offset=3),
        9: ProducerStateEntry(9, 4, [], coordinator_epoch=2, last_timestamp=77),
        10: ProducerStateEntry(10, 1, [BatchMetadata(2**31 - 2, 1, 60, 3, 8)], last_timestamp=8),  # wraps
    }  # fmt: skip


def test_state_round_trips_with_all_five_batches(tmp_path) -> None:
    mgr = ProducerStateManager(str(tmp_path))
    mgr.producers = state_with_history()
    mgr.take_snapshot(200)
    entries = snap.read(os.path.join(tmp_path, snap.file_name(200)))
    assert len(entries) == 5 + 1 + 1 + 1
    assert entries_to_state(entries) == state_with_history()


def test_kafka_reads_our_snapshot_as_its_own(tmp_path) -> None:
    """Kafka's reader keeps the last entry per producer id: the producer's last batch, its epoch,
    timestamp and transaction, which is what Kafka itself would have written."""
    mgr = ProducerStateManager(str(tmp_path))
    mgr.producers = state_with_history()
    as_kafka = {e.producer_id: e for e in snap.decode(snap.encode(mgr.snapshot_entries()))}
    for pid, entry in state_with_history().items():
        kafka_would_write = E(
            pid, entry.producer_epoch, entry.last_seq, entry.last_data_offset, entry.last_offset_delta,
            entry.last_timestamp, entry.coordinator_epoch, entry.current_txn_first_offset,
        )  # fmt: skip
        assert as_kafka[pid] == kafka_would_write


def test_a_kafka_snapshot_loads(tmp_path) -> None:
    state = entries_to_state(ENTRIES[:2])
    assert state[1000].batches == [BatchMetadata(37, 41, 977, 4, 1_700_000_000_123)]
    assert state[1000].producer_epoch == 3 and state[1000].last_timestamp == 1_700_000_000_123
    assert state[1001].batches == [] and state[1001].producer_epoch == 0
    assert state[1001].coordinator_epoch == 7


SMALL = LogConfig(segment_bytes=600, index_interval_bytes=100, segment_index_bytes=4096)


def fill(log, rounds: int, pids=(1, 2, 3)) -> None:
    seqs = dict.fromkeys(pids, 0)
    for r in range(rounds):
        for pid in pids:
            log.append(idem_batch(pid, 0, seqs[pid], 1 + (r + pid) % 3, ts=1_000 + r))
            seqs[pid] += 1 + (r + pid) % 3
        log.append(plain_batch(2))


def test_snapshots_at_roll_and_close_and_only_a_few_kept(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    fill(log, 40)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 10
    snaps = snapshot_files(d)
    assert snaps and set(snaps) <= set(bases) and len(snaps) <= 3, (snaps, bases)
    assert snaps[-1] == bases[-1]
    log.close()
    assert snapshot_files(d)[-1] == log.log_end_offset
    assert len(snapshot_files(d)) <= 3


def test_corrupt_latest_snapshot_falls_back(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    fill(log, 30)
    log.close()
    before = log.producer_state.producers
    latest = snapshot_files(d)[-1]
    with open(os.path.join(d, snap.file_name(latest)), "r+b") as f:
        f.seek(12)
        f.write(b"\xff")
    log = open_log(d, SMALL)
    assert log.producer_state.producers == before == expected_state(log_batches(log))
    assert latest in snapshot_files(d)  # rewritten after the rebuild, sound
    snap.read(os.path.join(d, snap.file_name(latest)))
    log.close()


def test_a_rolls_snapshot_is_fsynced_with_the_rolled_segment(tmp_path) -> None:
    """At a roll the snapshot is written without fsync (the request path does not wait for the
    disk); the flush of the rolled segment fsyncs it, inline or on another thread."""
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    fill(log, 5)
    assert len(log.segments) > 1 and log.producer_state.unsynced == []  # Log.flush synced it
    taken: list[int] = []
    log.roll_flusher = lambda lg, up_to: taken.append(up_to)  # a flush left for later
    log.roll()
    base = log.segments[-1].base_offset
    assert taken == [base] and log.producer_state.unsynced == [base]
    fds = log.producer_state.pending_sync_fds()  # what a background flush fsyncs
    try:
        assert len(fds) == 2 and log.producer_state.unsynced == []
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    log.roll_flusher = lambda lg, up_to: None
    fill(log, 3)
    log.roll()
    assert log.producer_state.unsynced
    log.flush()
    assert log.producer_state.unsynced == []
    log.close()


def crash(log: Log) -> None:
    """A kill: no flush, no snapshot at close; the page cache keeps the bytes."""
    log.close_handles()


def test_a_recovery_that_found_producers_snapshots_the_log_end_straight_to_its_name(
    tmp_path, monkeypatch
) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    log.append(idem_batch(7, 0, 0, 3))
    log.append(plain_batch(2))
    end = log.log_end_offset
    crash(log)
    renamed: list[str] = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append(b), real(a, b))[1])
    log = open_log(d, SMALL, clean_shutdown=False)
    assert end in snapshot_files(d) and end in log.producer_state.unsynced  # for the next flush
    assert not any(p.endswith(".snapshot") for p in renamed)  # no temp file renamed over it
    state = log.producer_state.producers
    assert state == expected_state(log_batches(log)) and 7 in state
    assert snap.read(os.path.join(d, snap.file_name(end)))  # whole: its CRC holds
    crash(log)
    log = open_log(d, SMALL, clean_shutdown=False)
    assert log.producer_state.producers == state
    log.close()


def test_a_recovery_that_found_no_producer_writes_no_snapshot_and_loses_nothing(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    log.append(plain_batch(3))
    log.close()  # a clean close: a snapshot at 3
    log = open_log(d, SMALL)
    log.append(plain_batch(2))
    crash(log)
    log = open_log(d, SMALL, clean_shutdown=False)
    assert log.log_end_offset == 5
    assert snapshot_files(d) == [3]  # none at 5: the one at 3 and the batches after say as much
    assert log.producer_state.producers == {}
    log.append(idem_batch(9, 0, 0, 1))  # a producer comes: its state is kept as usual
    log.close()
    assert snapshot_files(d)[-1] == 6
    log = open_log(d, SMALL)
    assert log.producer_state.producers == expected_state(log_batches(log)) and 9 in (
        log.producer_state.producers
    )
    log.close()


def test_a_torn_snapshot_written_straight_to_its_name_is_refused_and_rebuilt(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    log.append(idem_batch(7, 0, 0, 3))
    crash(log)
    log = open_log(d, SMALL, clean_shutdown=False)  # snapshot at 3, not yet synced
    state = log.producer_state.producers
    crash(log)
    path = os.path.join(d, snap.file_name(3))
    with open(path, "r+b") as f:  # a machine crash tore it
        f.truncate(os.path.getsize(path) - 5)
    log = open_log(d, SMALL)  # even a clean start reads it, finds it torn, replays the log
    assert log.producer_state.producers == state == expected_state(log_batches(log))
    log.close()


def test_a_recovered_tail_without_producers_is_not_replayed_and_older_producers_stay(
    tmp_path, monkeypatch
) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    for seq in range(0, 12, 3):
        log.append(idem_batch(7, 0, seq, 3))  # rolls: a snapshot at each new segment's base
    log.roll()
    log.flush()
    active_base = log.active_segment.base_offset
    log.append(plain_batch(2))
    log.append(plain_batch(1))
    crash(log)
    replays: list[tuple[int, int]] = []
    real = ProducerStateManager.rebuild_from_log
    monkeypatch.setattr(
        ProducerStateManager,
        "rebuild_from_log",
        lambda self, segs, start, end, *a: (
            replays.append((start, end)),
            real(self, segs, start, end, *a),
        )[1],
    )
    log = open_log(d, SMALL, clean_shutdown=False, recovery_point=active_base)
    assert replays == []  # the tail recovery read holds no producer batch
    assert log.producer_state.producers == expected_state(log_batches(log))
    assert 7 in log.producer_state.producers
    log.append(idem_batch(7, 0, 12, 1))  # the producer carries on at its next sequence
    log.append(idem_batch(8, 0, 0, 1))
    end = log.log_end_offset
    crash(log)
    log = open_log(d, SMALL, clean_shutdown=False, recovery_point=active_base)
    assert replays == [(active_base, end)]  # now the tail has producers: replayed
    assert log.producer_state.producers == expected_state(log_batches(log))
    assert {7, 8} <= set(log.producer_state.producers)
    log.close()
