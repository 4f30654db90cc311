"""A new partition's files made off the event loop in one go (LogManager.prepare, sync_prepared,
adopt): the leader-epoch checkpoint holds the epoch the metadata names this broker leader in,
becoming leader in that epoch writes nothing more, and nothing is left for a later fsync."""

from __future__ import annotations

import os

import pytest

from gregor.storage import checkpoints
from gregor.storage.config import LogConfig
from gregor.storage.leader_epoch import FILE_NAME, LeaderEpochCache
from gregor.storage.log_manager import LogManager

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
def test_prepared_logs_are_synced_in_one_go_and_placed_without_a_deferred_fsync(tmp_path, count):
    d = str(tmp_path / "logs")
    os.makedirs(d)
    lm = LogManager([d], CONFIG)
    deferred: list[str] = []
    lm.deferred_sync = deferred.append
    prepared = [
        lm.prepare("t", i, None, first_epoch=4 if i % 2 == 0 else None) for i in range(count)
    ]
    made = [open_log() for _d, open_log in prepared]  # the worker thread's half
    LogManager.sync_prepared(made)
    for i, ((log_dir, _open), log_) in enumerate(zip(prepared, made, strict=True)):
        lm.adopt("t", i, log_dir, log_, synced=True)
    assert deferred == [], "every file and directory was fsynced by sync_prepared"
    for i in range(count):
        log_ = lm.get("t", i)
        assert log_ is not None
        expected = [(4, 0)] if i % 2 == 0 else []
        assert log_.leader_epochs.entries == expected
        path = os.path.join(d, f"t-{i}", FILE_NAME)
        assert checkpoints.read_epochs(path) == expected
    lm.shutdown()


def test_a_prepared_log_placed_unsynced_has_its_directory_and_checkpoint_fsynced_later(tmp_path):
    d = str(tmp_path / "logs")
    os.makedirs(d)
    lm = LogManager([d], CONFIG)
    deferred: list[str] = []
    lm.deferred_sync = deferred.append
    log_dir, open_log = lm.prepare("t", 0, None, first_epoch=1)
    log_ = open_log()
    lm.adopt("t", 0, log_dir, log_)
    # its directory, and its checkpoint: becoming leader in epoch 1 writes (and syncs) nothing
    assert deferred == [log_.directory, log_.leader_epochs.path]
    lm.shutdown()
