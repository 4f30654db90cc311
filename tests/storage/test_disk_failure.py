"""A failed write (ENOSPC, EIO) leaves the log as it was before the append, takes the log and
its whole dir offline (KAFKA_STORAGE_ERROR for appends and reads), and a reopen recovers
exactly the batches written before it. Failures are injected into the os calls the storage
layer makes; a real full filesystem is in tests/clients/test_disk_full.py."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch
from gregor.storage import checkpoints, segment
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.log_manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT, LogManager

from .storage_helpers import all_batches

CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=128, segment_index_bytes=65536)


def _batch(n: int = 3, size: int = 200) -> bytearray:
    return build_batch([(b"k", b"v" * size)] * n, base_timestamp=1000)


def _files(log_: Log) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(log_.directory)):
        with open(os.path.join(log_.directory, name), "rb") as f:
            out[name] = f.read()
    return out


class FailingWrite:
    """os.write of the segment module: writes `partial` bytes of the next call, then ENOSPC."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, partial: int) -> None:
        self.real = os.write
        self.partial = partial
        self.armed = True
        monkeypatch.setattr(segment.os, "write", self)

    def __call__(self, fd: int, data) -> int:
        if not self.armed:
            return self.real(fd, data)
        if self.partial:
            n, self.partial = self.real(fd, memoryview(data)[: self.partial]), 0
            return n
        self.armed = False
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_torn_write_is_cut_back_and_the_log_goes_offline(tmp_path, monkeypatch):
    log_ = Log.open(str(tmp_path / "t-0"), CONFIG)
    for _ in range(20):
        log_.append(_batch(), leader_epoch=0)
    before = (
        log_.log_end_offset,
        log_.active_segment.size,
        log_.active_segment.offset_index.entries,
    )
    size_on_disk = os.path.getsize(log_.active_segment.log_path)
    FailingWrite(monkeypatch, partial=100)
    with pytest.raises(KafkaError) as info:
        log_.append(_batch(), leader_epoch=0)
    assert info.value.code == errors.KAFKA_STORAGE_ERROR
    assert "No space left on device" in info.value.message
    assert log_.offline
    assert (
        log_.log_end_offset,
        log_.active_segment.size,
        log_.active_segment.offset_index.entries,
    ) == before
    assert os.path.getsize(log_.active_segment.log_path) == size_on_disk
    # No later append lands after the failure, even once the disk has room again.
    with pytest.raises(KafkaError) as again:
        log_.append(_batch(), leader_epoch=0)
    assert again.value.code == errors.KAFKA_STORAGE_ERROR
    with pytest.raises(KafkaError) as read:
        log_.read(0, 1 << 20)
    assert read.value.code == errors.KAFKA_STORAGE_ERROR
    log_.close_handles()
    monkeypatch.undo()
    reopened = Log.open(str(tmp_path / "t-0"), CONFIG, clean_shutdown=False)
    assert reopened.log_end_offset == before[0] == 60
    assert [rb.peek_offset_and_size(b)[0] for b in all_batches(reopened)] == list(range(0, 60, 3))
    reopened.append(_batch(), leader_epoch=0)
    assert reopened.log_end_offset == 63


def test_a_failure_after_the_write_rolls_the_bytes_and_indexes_back(tmp_path, monkeypatch):
    """The leader-epoch checkpoint of a new epoch is written after the batch: when it fails the
    batch is cut out again, indexes included."""
    log_ = Log.open(str(tmp_path / "t-0"), CONFIG)
    for _ in range(10):
        log_.append(_batch(), leader_epoch=0)
    seg = log_.active_segment
    files = _files(log_)
    entries = (seg.offset_index.entries, seg.time_index.entries)

    def no_space(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoints, "write_epochs", no_space)
    with pytest.raises(KafkaError) as info:
        log_.append(_batch(), leader_epoch=1)
    assert info.value.code == errors.KAFKA_STORAGE_ERROR
    assert log_.log_end_offset == 30
    assert (seg.offset_index.entries, seg.time_index.entries) == entries
    assert os.path.getsize(seg.log_path) == seg.size == len(files[os.path.basename(seg.log_path)])


def test_index_blocks_are_reserved_before_the_write(tmp_path, monkeypatch):
    """A full disk met while reserving index blocks changes nothing at all."""
    config = LogConfig(segment_bytes=64 << 20, index_interval_bytes=1, segment_index_bytes=1 << 20)
    log_ = Log.open(str(tmp_path / "t-0"), config)
    log_.append(_batch(), leader_epoch=0)
    size = log_.active_segment.size
    calls = []

    def no_space(fd, offset, length):
        calls.append((offset, length))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    small = build_batch([(b"k", b"v")], base_timestamp=1000)
    with pytest.raises(KafkaError) as info:
        for _ in range(20000):  # past the first reserved 64 KiB of either index
            log_.append(small, leader_epoch=0)
    assert info.value.code == errors.KAFKA_STORAGE_ERROR
    assert calls, "no block was reserved before index entries were written"
    seg = log_.active_segment
    assert seg.size == os.path.getsize(seg.log_path) > size
    # Every entry written lies in the reserved blocks, and the refused append added none.
    assert seg.time_index.entries * 12 <= 65536 and seg.offset_index.entries * 8 <= 65536
    assert seg.time_index.entries == (65536 // 12) - 1 or seg.offset_index.entries == 65536 // 8


def test_one_failed_log_takes_its_dir_offline_and_no_other(tmp_path, monkeypatch):
    d1, d2 = str(tmp_path / "d1"), str(tmp_path / "d2")
    logs = LogManager([d1, d2], CONFIG)
    logs.startup()
    told = []
    logs.dir_failure_listeners.append(told.append)
    parts = {i: logs.get_or_create("t", i) for i in range(4)}
    for lg in parts.values():
        lg.append(_batch(), leader_epoch=0)
    failing = parts[0]
    same_dir = [lg for i, lg in parts.items() if logs.dir_of("t", i) == logs.dir_of("t", 0)]
    other_dir = [lg for i, lg in parts.items() if logs.dir_of("t", i) != logs.dir_of("t", 0)]
    assert len(same_dir) == 2 and len(other_dir) == 2
    FailingWrite(monkeypatch, partial=0)
    with pytest.raises(KafkaError):
        failing.append(_batch(), leader_epoch=0)
    failed_dir = logs.dir_of("t", 0)
    assert told == [failed_dir]
    assert list(logs.offline_dirs) == [failed_dir]
    for lg in same_dir:
        assert lg.offline
        with pytest.raises(KafkaError) as info:
            lg.append(_batch(), leader_epoch=0)
        assert info.value.code == errors.KAFKA_STORAGE_ERROR
    for lg in other_dir:
        assert not lg.offline
        lg.append(_batch(), leader_epoch=0)
    # New partitions go to the dir still online.
    assert logs.dir_of("t", logs.get_or_create("t", 9).partition) != failed_dir
    logs.shutdown()
    # The failed dir gets no clean-shutdown marker (its next start recovers it) and no
    # checkpoint written after the failure; the other dir shuts down cleanly.
    other = d2 if failed_dir == os.path.abspath(d1) else d1
    assert not os.path.exists(os.path.join(failed_dir, CLEAN_SHUTDOWN_FILE))
    assert os.path.exists(os.path.join(other, CLEAN_SHUTDOWN_FILE))
    assert os.path.exists(os.path.join(other, RECOVERY_POINT_CHECKPOINT))
    again = LogManager([d1, d2], CONFIG)
    again.startup()
    assert {i: again.get("t", i).log_end_offset for i in range(4)} == {0: 3, 1: 3, 2: 3, 3: 3} | {
        i: 6 for i, lg in parts.items() if lg in other_dir
    }
    again.shutdown()


def test_a_failed_flush_takes_the_dir_offline(tmp_path, monkeypatch):
    logs = LogManager([str(tmp_path / "d")], CONFIG)
    logs.startup()
    lg = logs.get_or_create("t", 0)
    lg.append(_batch(), leader_epoch=0)

    def eio(_fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(segment.os, "fsync", eio)
    assert logs.flush_due(now_ms=lg.last_flush_ms + CONFIG.flush_ms + 1) == 0
    assert lg.offline and logs.offline_dirs


SIGBUS_CHILD = textwrap.dedent(
    """
    import os, sys
    from gregor.protocol.errors import KafkaError
    from gregor.protocol.records.records import build_batch
    from gregor.storage.config import LogConfig
    from gregor.storage.log import Log

    d = sys.argv[1]
    lg = Log.open(os.path.join(d, "t-0"), LogConfig(index_interval_bytes=1, segment_index_bytes=1 << 20))
    batch = build_batch([(b"k", b"v" * 100)], base_timestamp=1000)
    lg.append(batch, leader_epoch=0)  # the next one gets the first index entries
    fd = os.open(os.path.join(d, "ballast"), os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        pass
    try:
        for _ in range(100000):
            lg.append(batch, leader_epoch=0)
    except KafkaError as exc:
        print("refused", exc.code, lg.log_end_offset)
    """
)


def test_a_full_disk_is_an_error_not_sigbus(tmp_path):
    """Index entries written through the map into a sparse file's hole on a full filesystem
    would raise SIGBUS and kill the broker; reserved blocks make it an error instead."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        child = subprocess.run(
            [sys.executable, "-c", SIGBUS_CHILD, str(mount)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        subprocess.run(["umount", str(mount)], check=False)
    assert child.returncode == 0, f"child died with {child.returncode}: {child.stderr[-2000:]}"
    assert child.stdout.startswith(f"refused {errors.KAFKA_STORAGE_ERROR} "), child.stdout
