"""The log manager and the checkpoint files: Kafka's text formats, the clean-shutdown marker,
several log dirs, many partitions, deletion, and the leader-epoch checkpoint."""

from __future__ import annotations

import os

import pytest

from gregor.clock import ManualClock
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch
from gregor.storage import checkpoints
from gregor.storage.config import LogConfig
from gregor.storage.leader_epoch import LeaderEpochCache
from gregor.storage.log import Log
from gregor.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LogManager,
)

from .storage_helpers import all_batches, read_file

CONFIG = LogConfig(
    segment_bytes=4096,
    index_interval_bytes=256,
    segment_index_bytes=65536,
    file_delete_delay_ms=1000,
)


def _batch(n: int = 1, size: int = 100) -> bytearray:
    return build_batch([(b"k", b"v" * size)] * n, base_timestamp=1000)


def test_checkpoint_files_are_kafkas_text_format(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    lm = LogManager(dirs, CONFIG)
    lm.startup()
    for p in range(4):
        log = lm.get_or_create("orders", p)
        for _ in range(p * 20):
            log.append(_batch(), now_ms=0)
        log.update_high_watermark(p * 10)
    lm.get_or_create("my.topic-with-dash", 0).append(_batch(3), now_ms=0)
    lm.get("orders", 3).update_high_watermark(60)
    lm.get("orders", 3).increment_log_start_offset(33)
    lm.checkpoint()
    for d in dirs:
        mine = sorted(tp for tp, _log in lm.partitions() if lm.dir_of(*tp) == d)
        assert mine
        for name, value in [
            (RECOVERY_POINT_CHECKPOINT, lambda log: log.recovery_point),
            (LOG_START_OFFSET_CHECKPOINT, lambda log: log.log_start_offset),
            (REPLICATION_OFFSET_CHECKPOINT, lambda log: log.high_watermark),
        ]:
            text = read_file(os.path.join(d, name)).decode()
            lines = text.split("\n")
            assert lines[0] == "0" and lines[1] == str(len(mine)) and lines[-1] == ""
            assert lines[2:-1] == [f"{t} {p} {value(lm.get(t, p))}" for t, p in mine]
    # A few values that are known, not just consistent.
    d = lm.dir_of("orders", 3)
    starts = checkpoints.read_offsets(os.path.join(d, LOG_START_OFFSET_CHECKPOINT))
    hws = checkpoints.read_offsets(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT))
    assert starts[("orders", 3)] == 33 and hws[("orders", 3)] == 60
    assert not any(n.endswith(".tmp") for d in dirs for n in os.listdir(d))
    lm.shutdown()


def test_clean_shutdown_marker_and_restart(tmp_path):
    d = str(tmp_path / "data")
    clock = ManualClock(1_000_000)
    lm = LogManager([d], CONFIG, clock=clock)
    lm.startup()
    assert lm.had_clean_shutdown[d] is False  # a new dir has no marker
    log = lm.get_or_create("t", 0)
    for _ in range(100):
        log.append(_batch(2), now_ms=0)
    log.update_high_watermark(150)
    log.increment_log_start_offset(40)
    content = all_batches(log)
    lm.shutdown()
    marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
    assert os.path.exists(marker)
    again = LogManager([d], CONFIG, clock=clock)
    again.startup()
    assert again.had_clean_shutdown[d] is True
    assert not os.path.exists(marker)  # removed at start: a crash from now on is unclean
    log = again.get("t", 0)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (40, 150, 200)
    assert log.recovery_point == 200
    assert all_batches(log) == content
    # Killed now (no shutdown): the next start recovers, from the checkpointed recovery point.
    log.append(_batch(), now_ms=0)
    again.checkpoint()
    log.close_handles()
    third = LogManager([d], CONFIG, clock=clock)
    third.startup()
    assert third.had_clean_shutdown[d] is False
    log = third.get("t", 0)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (40, 150, 201)
    assert all_batches(log)[:-1] == content


def test_partitions_spread_over_log_dirs(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    lm = LogManager(dirs, CONFIG)
    lm.startup()
    for p in range(10):
        lm.get_or_create("t", p)
    counts = {d: sum(1 for tp, _ in lm.partitions() if lm.dir_of(*tp) == d) for d in dirs}
    assert counts == {dirs[0]: 5, dirs[1]: 5}
    for d in dirs:
        on_disk = sorted(n for n in os.listdir(d) if n.startswith("t-"))
        assert on_disk == sorted(f"t-{p}" for p in range(10) if lm.dir_of("t", p) == d)
    lm.get_or_create("t", 0).append(_batch(), now_ms=0)
    lm.shutdown()
    again = LogManager(dirs, CONFIG)
    again.startup()
    assert {tp: again.dir_of(*tp) for tp, _ in again.partitions()} == {
        tp: lm.dir_of(*tp) for tp in lm.logs
    }
    assert again.get("t", 0).log_end_offset == 1
    # A new partition goes to the dir with fewer partitions.
    again.delete("t", 1)
    emptier = lm.dir_of("t", 1)
    assert again.get_or_create("u", 0) and again.dir_of("u", 0) == emptier


def test_delete_removes_the_partition(tmp_path):
    d = str(tmp_path / "data")
    lm = LogManager([d], CONFIG)
    lm.startup()
    log = lm.get_or_create("gone", 3)
    for _ in range(50):
        log.append(_batch(), now_ms=0)
    lm.get_or_create("kept", 0).append(_batch(), now_ms=0)
    assert os.path.isdir(os.path.join(d, "gone-3"))
    lm.delete("gone", 3)
    assert lm.get("gone", 3) is None
    assert [n for n in os.listdir(d) if n.startswith("gone")] == []
    lm.checkpoint()
    assert ("gone", 3) not in checkpoints.read_offsets(os.path.join(d, RECOVERY_POINT_CHECKPOINT))
    lm.delete("gone", 3)  # deleting again is harmless
    lm.shutdown()
    again = LogManager([d], CONFIG)
    again.startup()
    assert again.get("gone", 3) is None and again.get("kept", 0).log_end_offset == 1
    # A rename left behind by a crash mid-delete is removed at start.
    os.makedirs(os.path.join(d, "x-0.0123abcd-delete"))
    again.shutdown()
    third = LogManager([d], CONFIG)
    third.startup()
    assert not os.path.exists(os.path.join(d, "x-0.0123abcd-delete"))
    assert [tp for tp, _ in third.partitions()] == [("kept", 0)]


def test_retention_deletes_after_file_delete_delay(tmp_path):
    d = str(tmp_path / "data")
    clock = ManualClock(1_000_000)
    lm = LogManager([d], CONFIG, clock=clock)
    lm.startup()
    log = lm.get_or_create("t", 0)
    for _ in range(100):
        log.append(_batch(), now_ms=0)
    first = log.segments[0]
    assert log.delete_oldest_segments(2) == 2
    assert log.log_start_offset == log.segments[0].base_offset
    deleted = [n for n in os.listdir(log.directory) if n.endswith(".deleted")]
    assert f"{first.base_offset:020d}.log.deleted" in deleted
    assert lm.purge_deleted() == 0  # file.delete.delay.ms has not passed
    clock.advance(1000)
    assert lm.purge_deleted() == 2
    assert not any(n.endswith(".deleted") for n in os.listdir(log.directory))


def test_flush_due_by_flush_ms(tmp_path):
    d = str(tmp_path / "data")
    config = LogConfig(flush_ms=5000, segment_index_bytes=65536)
    lm = LogManager([d], config)
    lm.startup()
    a, b = lm.get_or_create("a", 0), lm.get_or_create("b", 0)
    a.append(_batch(), now_ms=0)
    start = a.last_flush_ms
    assert lm.flush_due(start + 4999) == 0 and a.recovery_point == 0
    assert lm.flush_due(start + 5000) == 1  # only `a` has something to flush
    assert a.recovery_point == 1 and b.recovery_point == 0


def test_ten_thousand_partitions_open_with_few_fds(memory_tmp):
    d = str(memory_tmp / "data")
    os.mkdir(d)
    tiny = bytes(build_batch([(b"k", b"v")], base_timestamp=5))
    n = 10_000
    for p in range(n):
        pd = os.path.join(d, f"t-{p}")
        os.mkdir(pd)
        with open(os.path.join(pd, "00000000000000000000.log"), "wb") as f:
            if p % 10 == 0:
                f.write(tiny)
        # As a clean shutdown leaves them (empty: one small batch makes no index entry).
        open(os.path.join(pd, "00000000000000000000.index"), "wb").close()
        open(os.path.join(pd, "00000000000000000000.timeindex"), "wb").close()
    open(os.path.join(d, CLEAN_SHUTDOWN_FILE), "w").close()

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def maps() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for line in f if d in line)

    # First a clean start; then, as the first left no marker (nor shut down), an unclean one.
    for clean in (True, False):
        before = fds()
        lm = LogManager([d], LogConfig())  # Kafka's defaults: 10 MiB indexes
        lm.startup()
        assert lm.had_clean_shutdown[d] is clean
        assert len(lm.logs) == n
        assert fds() - before <= 5
        assert maps() == 0
        assert lm.get("t", 20).log_end_offset == 1 and lm.get("t", 21).log_end_offset == 0
        assert lm.get("t", 9990).read_bytes(0, 100) == tiny
        # Using a partition opens its files; closing its handles gives them back.
        log = lm.get("t", 7)
        log.append(_batch(), now_ms=0)
        assert fds() - before <= 7
        log.close_handles()
        lm.get("t", 9990).close_handles()
        assert fds() - before <= 5 and maps() == 0
    assert lm.get("t", 7).log_end_offset == 2


def test_leader_epoch_checkpoint(tmp_path):
    d = str(tmp_path / "t-0")
    log = Log.open(d, CONFIG, now_ms=0)
    path = os.path.join(d, "leader-epoch-checkpoint")
    for epoch, count in [(0, 10), (0, 5), (2, 7), (5, 3), (3, 4)]:  # epoch 3 after 5 is stale
        for _ in range(count):
            log.append(_batch(), leader_epoch=epoch, now_ms=0)
    # Every batch carries the epoch it was appended with, in its header.
    epochs = [rb.read_header(b).partition_leader_epoch for b in all_batches(log)]
    assert epochs == [0] * 15 + [2] * 7 + [5] * 3 + [3] * 4
    assert read_file(path).decode() == "0\n3\n0 0\n2 15\n5 22\n"
    assert log.leader_epochs.end_offset_for(0, log.log_end_offset) == (0, 15)
    assert log.leader_epochs.end_offset_for(1, log.log_end_offset) == (0, 15)
    assert log.leader_epochs.end_offset_for(2, log.log_end_offset) == (2, 22)
    assert log.leader_epochs.end_offset_for(5, log.log_end_offset) == (5, 29)  # the latest: log end
    log.truncate_to(22)  # epoch 5 began at 22: gone
    assert read_file(path).decode() == "0\n2\n0 0\n2 15\n"
    log.truncate_to(18)
    assert read_file(path).decode() == "0\n2\n0 0\n2 15\n"
    log.append(_batch(), leader_epoch=6, now_ms=0)
    assert read_file(path).decode() == "0\n3\n0 0\n2 15\n6 18\n"
    log.update_high_watermark(19)
    log.increment_log_start_offset(16)
    assert read_file(path).decode() == "0\n2\n2 16\n6 18\n"
    log.close()
    # Read back on open; a damaged file is ignored, not fatal.
    assert LeaderEpochCache(d).entries == [(2, 16), (6, 18)]
    with open(path, "w") as f:
        f.write("0\n5\n1 2\n")
    assert LeaderEpochCache(d).entries == []


def test_damaged_offset_checkpoint_is_ignored(tmp_path):
    d = str(tmp_path / "data")
    lm = LogManager([d], CONFIG)
    lm.startup()
    lm.get_or_create("t", 0).append(_batch(), now_ms=0)
    lm.shutdown()
    with open(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT), "w") as f:
        f.write("0\n3\nt 0 1\n")  # says 3 entries, has 1
    again = LogManager([d], CONFIG)
    again.startup()
    assert again.get("t", 0).log_end_offset == 1
    with pytest.raises(checkpoints.CheckpointError):
        checkpoints.read_offsets(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT))


def test_leader_epochs_come_back_from_recovered_batches(tmp_path):
    """A crash between a write and the epoch checkpoint leaves batches of an epoch the file
    does not name; unclean recovery reads the epochs back from the batches (as Kafka's does)."""
    d = str(tmp_path / "t-0")
    log = Log.open(d, CONFIG, now_ms=0)
    for epoch in (0, 0, 1, 1, 4):
        log.append(_batch(2), leader_epoch=epoch, now_ms=0)
    path = os.path.join(d, "leader-epoch-checkpoint")
    assert read_file(path).decode() == "0\n3\n0 0\n1 4\n4 8\n"
    log.close_handles()
    checkpoints.write_epochs(path, [(0, 0)])  # as if the process died before the last two writes
    log = Log.open(d, CONFIG, clean_shutdown=False, now_ms=0)
    assert log.leader_epochs.entries == [(0, 0), (1, 4), (4, 8)]
    assert read_file(path).decode() == "0\n3\n0 0\n1 4\n4 8\n"
    assert log.leader_epochs.end_offset_for(1, log.log_end_offset) == (1, 8)


def test_an_older_checkpoint_snapshot_never_replaces_a_newer_one(tmp_path):
    """The broker writes checkpoints on a worker thread: a snapshot taken earlier but written
    later must not roll the files back."""
    mgr = LogManager([str(tmp_path)])
    mgr.startup()
    log = mgr.get_or_create("t", 0)
    for i in range(3):
        log.append(build_batch([(b"k", b"v%d" % i)]))
    log.update_high_watermark(log.log_end_offset)
    older = mgr.checkpoint_snapshot()
    log.increment_log_start_offset(2)
    newer = mgr.checkpoint_snapshot()
    mgr.write_checkpoints(newer)
    mgr.write_checkpoints(older)  # arrives late: ignored
    assert checkpoints.read_offsets(str(tmp_path / LOG_START_OFFSET_CHECKPOINT)) == {("t", 0): 2}
    mgr.shutdown()


def test_many_logs_stop_with_one_syncfs_per_log_dir_and_no_fsync_each(tmp_path, monkeypatch):
    if checkpoints.load_syncfs() is None:
        pytest.skip("no syncfs(2) on this platform: each log is fsynced as before")
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    lm = LogManager(dirs, CONFIG, clock=ManualClock(1_000_000))
    lm.startup()
    logs = [lm.get_or_create("t", p) for p in range(40)]
    for log in logs:
        for _ in range(30):  # a few segments each, with index entries and producer state
            log.append(_batch(2), now_ms=0)
    contents = [all_batches(log) for log in logs]
    calls = {"fsync": 0, "syncfs": 0}
    real_fsync, real_syncfs = os.fsync, checkpoints._syncfs

    def fsync(fd):
        calls["fsync"] += 1
        real_fsync(fd)

    def syncfs(fd):
        calls["syncfs"] += 1
        return real_syncfs(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(checkpoints, "_syncfs", syncfs)
    lm.shutdown()
    monkeypatch.undo()
    assert calls["syncfs"] == 2  # one per log dir
    # per log dir, not per log: 3 checkpoint files and the marker, each with its dir
    assert calls["fsync"] == 8 * len(dirs)
    again = LogManager(dirs, CONFIG, clock=ManualClock(1_000_000))
    again.startup()
    assert all(again.had_clean_shutdown[d] for d in dirs)
    for p, content in enumerate(contents):
        log = again.get("t", p)
        assert log.recovery_point == log.log_end_offset == 60  # nothing to recover next time
        assert all_batches(log) == content
