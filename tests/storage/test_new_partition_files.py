"""A new partition's files made off the event loop (LogManager.prepare, then adopt): the
leader-epoch checkpoint holds the epoch the metadata names this broker leader in, becoming leader
in that epoch writes nothing more, and nothing is fsynced until the log's first flush, which
syncs the new files and directories before its data (log.py `creation_syncs`)."""

from __future__ import annotations

import asyncio
import os

import pytest

from gregor.protocol.records.records import build_batch
from gregor.runtime import log_io
from gregor.storage import checkpoints
from gregor.storage import log as log_module
from gregor.storage.config import LogConfig
from gregor.storage.leader_epoch import FILE_NAME, LeaderEpochCache
from gregor.storage.log_manager import LogManager
from gregor.storage.segment import LogSegment

pytestmark = pytest.mark.unit

CONFIG = LogConfig(segment_bytes=4096, segment_index_bytes=65536)


def test_a_checkpoint_made_with_its_first_epoch_holds_it_and_assigning_it_again_writes_nothing(
    tmp_path,
):
    cache = LeaderEpochCache(str(tmp_path))
    synced: list[str] = []
    cache.sync_later = synced.append
    cache.create_file((7, 0))
    assert cache.entries == [(7, 0)]
    assert checkpoints.read_epochs(cache.path) == [(7, 0)]
    cache.assign(7, 0)  # becoming leader in the epoch the file was made for
    assert synced == [], "nothing written, nothing to fsync"
    cache.assign(8, 5)  # a later epoch is written as before
    assert checkpoints.read_epochs(cache.path) == [(7, 0), (8, 5)]
    assert synced == [cache.path]


def test_a_checkpoint_made_without_an_epoch_is_empty_and_never_overwritten_by_create(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    cache.create_file()
    assert checkpoints.read_epochs(cache.path) == [] and cache.entries == []
    cache.assign(3, 0)
    again = LeaderEpochCache(str(tmp_path))
    again.create_file((9, 0))  # the file exists: left as it is
    assert checkpoints.read_epochs(cache.path) == [(3, 0)] and again.entries == [(3, 0)]


@pytest.mark.parametrize("count", [3, 40])
def test_prepared_logs_hold_their_first_epoch_and_placing_them_fsyncs_nothing(tmp_path, count):
    d = str(tmp_path / "logs")
    os.makedirs(d)
    lm = LogManager([d], CONFIG)
    deferred: list[str] = []
    lm.deferred_sync = deferred.append
    prepared = [
        lm.prepare("t", i, None, first_epoch=4 if i % 2 == 0 else None) for i in range(count)
    ]
    made = [open_log() for _d, open_log in prepared]  # the worker thread's half
    for i, ((log_dir, _open), log_) in enumerate(zip(prepared, made, strict=True)):
        lm.adopt("t", i, log_dir, log_)
    assert deferred == [], "nothing handed to a later fsync: the first flush syncs them"
    for i in range(count):
        log_ = lm.get("t", i)
        assert log_ is not None
        assert log_.creation_syncs == [log_.leader_epochs.path, log_.directory, d]
        expected = [(4, 0)] if i % 2 == 0 else []
        assert log_.leader_epochs.entries == expected
        path = os.path.join(d, f"t-{i}", FILE_NAME)
        assert not os.path.exists(path), "made by the first flush or the close, not before"
    lm.shutdown()
    for i in range(count):  # a clean close made each, holding its epochs
        expected = [(4, 0)] if i % 2 == 0 else []
        assert checkpoints.read_epochs(os.path.join(d, f"t-{i}", FILE_NAME)) == expected


def test_a_new_directorys_checkpoint_is_made_by_make_file_or_off_the_loop(tmp_path):
    """In a directory made just now the first epoch is recorded without a file; `make_file`
    makes it, once, holding the entries; an epoch assigned or cut before then makes it on the
    worker (`write_later`), never on the caller's thread; later writes are as before."""
    first = LeaderEpochCache(str(tmp_path / "a"), new=True)
    os.makedirs(os.path.dirname(first.path))
    synced: list[str] = []
    first.sync_later = synced.append
    first.write_later = _refused("write_later")
    first.create_file((7, 0))
    assert first.entries == [(7, 0)] and not os.path.exists(first.path)
    first.assign(7, 0)  # becoming leader in that epoch: nothing to write
    assert synced == [] and not os.path.exists(first.path)
    first.make_file()
    assert checkpoints.read_epochs(first.path) == [(7, 0)]
    first.assign(8, 3)  # written in place, on this thread, as before
    first.make_file()  # made already: nothing
    assert checkpoints.read_epochs(first.path) == [(7, 0), (8, 3)] and synced == [first.path]
    follower = LeaderEpochCache(str(tmp_path / "b"), new=True)
    os.makedirs(os.path.dirname(follower.path))
    follower.sync_later = synced.append
    deferred: list = []
    follower.write_later = deferred.append
    follower.create_file()  # not led here: no epoch yet
    follower.assign(3, 0)  # its first fetched batch
    follower.assign(4, 2)
    follower.truncate_from_end(2)
    assert len(deferred) == 1 and not os.path.exists(follower.path), "one write, on the worker"
    deferred.pop()()
    assert checkpoints.read_epochs(follower.path) == [(3, 0)]
    follower.make_file()  # made already: nothing
    assert checkpoints.read_epochs(follower.path) == [(3, 0)]
    later = LeaderEpochCache(str(tmp_path / "c"), new=True)
    os.makedirs(os.path.dirname(later.path))
    later.write_later = deferred.append
    later.create_file((1, 0))
    later.assign(2, 4)
    later.make_file()  # the first flush ran before the worker: holds the new epoch too
    assert checkpoints.read_epochs(later.path) == [(1, 0), (2, 4)]
    deferred.pop()()  # then the worker's write: the same entries
    assert checkpoints.read_epochs(later.path) == [(1, 0), (2, 4)]
    gone = LeaderEpochCache(str(tmp_path / "gone"), new=True)
    gone.create_file((1, 0))
    gone.make_file()  # the directory was deleted meanwhile: nothing, no error
    assert not os.path.exists(gone.path)


def test_a_new_logs_first_flush_fsyncs_its_files_and_directories_before_its_data(
    tmp_path, monkeypatch
):
    """The recovery point moves only once the checkpoint, the partition's directory and the
    log dir's entry for it are durable: below it, a crash start trusts the log and its epochs."""
    d = str(tmp_path / "logs")
    os.makedirs(d)
    lm = LogManager([d], CONFIG)
    log_dir, open_log = lm.prepare("t", 0, None, first_epoch=2)
    log_ = open_log()
    lm.adopt("t", 0, log_dir, log_)
    synced: list[str] = []
    made_when_synced: list[bool] = []

    def fsync_if_exists(path: str) -> bool:
        synced.append(path)
        made_when_synced.append(os.path.exists(path))
        return True

    monkeypatch.setattr(log_module, "fsync_if_exists", fsync_if_exists)
    real_flush = LogSegment.flush
    monkeypatch.setattr(LogSegment, "flush", lambda seg: (synced.append("data"), real_flush(seg)))
    log_.flush()  # empty: nothing to make durable, the recovery point stays
    assert synced == [] and log_.creation_syncs
    assert not os.path.exists(log_.leader_epochs.path)
    log_.append(build_batch([(b"k", b"v")]), leader_epoch=2)
    log_.flush()
    assert synced == [log_.leader_epochs.path, log_.directory, d, "data"]
    assert made_when_synced == [True] * 3, "the checkpoint made before its fsync"
    assert checkpoints.read_epochs(log_.leader_epochs.path) == [(2, 0)]
    assert log_.recovery_point == 1 and log_.creation_syncs == []
    log_.append(build_batch([(b"k", b"v")]), leader_epoch=2)
    log_.flush()
    assert synced[4:] == ["data"], "once only"
    lm.shutdown()


def test_a_background_flush_fsyncs_a_new_logs_files_first(tmp_path, monkeypatch) -> None:
    d = str(tmp_path / "logs")
    os.makedirs(d)
    lm = LogManager([d], CONFIG)
    lm.get_or_create("t", 0)
    log_ = lm.get("t", 0)
    assert log_ is not None and log_.creation_syncs == [log_.directory, d]
    log_.append(build_batch([(b"k", b"v")]), leader_epoch=0)
    synced: list[str] = []
    monkeypatch.setattr(checkpoints, "fsync_if_exists", lambda p: bool(synced.append(p)))

    async def flush() -> None:
        log_io.flush_after_roll(log_, 1)
        while log_.recovery_point < 1:
            await asyncio.sleep(0.01)

    asyncio.run(asyncio.wait_for(flush(), 30))
    assert synced == [log_.directory, d] and log_.creation_syncs == []
    lm.shutdown()


def _state(log_: log_module.Log) -> tuple:
    return (
        [(s.base_offset, s.size) for s in log_.segments],
        log_.log_start_offset,
        log_.log_end_offset,
        log_.recovery_point,
        log_.high_watermark,
        log_.leader_epochs.entries,
    )


def _files(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


def test_a_new_log_is_made_without_listing_or_reading_what_cannot_be_there(tmp_path, monkeypatch):
    """Log.create makes the directory and the segment file without a listing, a stat or a read
    of a checkpoint, and makes what Log.open makes of an empty directory: the same state, the
    same files byte for byte, the same log after appends and a restart."""
    opened = log_module.Log.open(str(tmp_path / "opened-0"), CONFIG)
    with monkeypatch.context() as m:
        for name in ("listdir", "scandir", "stat", "makedirs"):
            m.setattr(os, name, _refused(name))
        m.setattr(checkpoints, "read_lines", _refused("read_lines"))
        created = log_module.Log.create(str(tmp_path / "created-0"), CONFIG)
    assert _state(created) == _state(opened)
    assert _files(created.directory) == _files(opened.directory)
    for log_ in (created, opened):
        log_.append(build_batch([(b"k", b"v")] * 3), leader_epoch=2)
        log_.flush()
        log_.close()
    assert _files(created.directory) == _files(opened.directory)
    again = log_module.Log.open(created.directory, CONFIG)
    assert (again.log_end_offset, again.leader_epochs.entries) == (3, [(2, 0)])
    again.close()


def _refused(name: str):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{name}{args} while making a new log")

    return refuse


def test_a_directory_there_already_is_opened_with_what_it_holds(tmp_path):
    """Log.create over a partition directory left from before (a creation cut short, a log
    not loaded) opens it as Log.open does, keeping its records."""
    d = str(tmp_path / "t-0")
    first = log_module.Log.open(d, CONFIG)
    first.append(build_batch([(b"k", b"v")] * 2), leader_epoch=1)
    first.flush()
    first.close()
    again = log_module.Log.create(d, CONFIG)
    assert (again.log_end_offset, again.leader_epochs.entries) == (2, [(1, 0)])
    again.close()
    missing_parent = log_module.Log.create(str(tmp_path / "gone" / "t-0"), CONFIG)
    assert missing_parent.log_end_offset == 0  # made as open makes it
    missing_parent.close()


def test_a_background_flush_makes_a_prepared_logs_checkpoint_before_its_fsync(
    tmp_path, monkeypatch
) -> None:
    d = str(tmp_path / "logs")
    os.makedirs(d)
    lm = LogManager([d], CONFIG)
    log_dir, open_log = lm.prepare("t", 0, None, first_epoch=5)
    lm.adopt("t", 0, log_dir, open_log())
    log_ = lm.get("t", 0)
    assert log_ is not None and not os.path.exists(log_.leader_epochs.path)
    log_.append(build_batch([(b"k", b"v")]), leader_epoch=5)
    found: list[tuple[str, list[tuple[int, int]] | None]] = []

    def fsync_if_exists(path: str) -> bool:
        made = os.path.isfile(path) and path == log_.leader_epochs.path
        found.append((path, checkpoints.read_epochs(path) if made else None))
        return True

    monkeypatch.setattr(checkpoints, "fsync_if_exists", fsync_if_exists)

    async def flush() -> None:
        log_io.flush_after_roll(log_, 1)
        while log_.recovery_point < 1:
            await asyncio.sleep(0.01)

    asyncio.run(asyncio.wait_for(flush(), 30))
    assert found == [(log_.leader_epochs.path, [(5, 0)]), (log_.directory, None), (d, None)]
    lm.shutdown()
