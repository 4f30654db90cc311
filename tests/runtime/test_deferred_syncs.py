"""Leader-epoch checkpoints are written at once and fsynced on a worker thread, in batches:
becoming leader of thousands of partitions waits for no fsync on the event loop."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from gregor.runtime import log_io
from gregor.storage import checkpoints
from gregor.storage.leader_epoch import LeaderEpochCache
from gregor.storage.log_manager import LogManager


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Every fsync and syncfs: (what, on the calling test's thread)."""
    seen: list[tuple[str, bool]] = []
    main = threading.get_ident()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        seen.append(("fsync", threading.get_ident() == main))
        real_fsync(fd)

    def syncfs(fd: int) -> int:
        seen.append(("syncfs", threading.get_ident() == main))
        return 0

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(log_io, "_syncfs", syncfs)
    return seen


@pytest.mark.parametrize("partitions", [3, 200])
def test_epoch_checkpoints_are_written_at_once_and_synced_off_the_loop(
    tmp_path, fsyncs, partitions
) -> None:
    caches = []
    for i in range(partitions):
        d = tmp_path / f"t-{i}"
        d.mkdir()
        caches.append(LeaderEpochCache(str(d)))

    async def become_leader() -> None:
        syncs = log_io.DeferredSyncs()
        for cache in caches:
            cache.sync_later = syncs
            cache.assign(3, 10)
            assert checkpoints.read_epochs(cache.path) == [(3, 10)]  # written at once
        assert fsyncs == []  # nothing synced on the loop
        while syncs._running:
            await asyncio.sleep(0.01)

    asyncio.run(become_leader())
    assert fsyncs and not any(on_loop for _, on_loop in fsyncs)
    kinds = {kind for kind, _ in fsyncs}
    # a few files: a fsync each and its directory; many: one syncfs for the file system
    assert kinds == ({"fsync"} if partitions < 32 else {"syncfs"})


def test_a_batch_fsyncs_each_file_and_directory_once(tmp_path, monkeypatch) -> None:
    """A new partition hands over its directory and its checkpoint inside it: each is fsynced
    once, and so is the log dir holding them (not the partition's directory twice); a path gone
    meanwhile (a deleted partition) is skipped with its directory."""
    synced: list[str] = []
    real_open, real_fsync = os.open, os.fsync
    names: dict[int, str] = {}

    def opened(path: str, flags: int, *args: object) -> int:
        fd = real_open(path, flags, *args)
        names[fd] = str(path)
        return fd

    def fsync(fd: int) -> None:
        synced.append(names[fd])
        real_fsync(fd)

    monkeypatch.setattr(os, "open", opened)
    monkeypatch.setattr(os, "fsync", fsync)
    parts = []
    for i in range(3):
        d = tmp_path / f"t-{i}"
        d.mkdir()
        (d / "leader-epoch-checkpoint").write_text("0\n0\n")
        parts += [str(d), str(d / "leader-epoch-checkpoint")]
    gone = tmp_path / "gone" / "leader-epoch-checkpoint"
    log_io.sync_files([*parts, str(gone)])
    assert sorted(synced) == sorted([*parts, str(tmp_path)])


def test_without_a_loop_or_a_syncer_the_fsync_is_immediate(tmp_path, fsyncs) -> None:
    cache = LeaderEpochCache(str(tmp_path))
    cache.assign(1, 0)
    assert len(fsyncs) == 2  # the file and its directory
    cache.sync_later = log_io.DeferredSyncs()
    cache.assign(2, 5)
    assert len(fsyncs) == 4 and checkpoints.read_epochs(cache.path) == [(1, 0), (2, 5)]


def test_a_log_manager_hands_its_logs_the_syncer(tmp_path) -> None:
    logs = LogManager([str(tmp_path)])
    logs.deferred_sync = syncs = log_io.DeferredSyncs()
    logs.startup()
    log_ = logs.get_or_create("t", 0)
    assert log_.leader_epochs.sync_later is syncs
    logs.shutdown()


def test_with_a_syncer_the_file_follows_every_change_in_place_or_renamed(tmp_path) -> None:
    import random

    rng = random.Random(7)
    cache = LeaderEpochCache(str(tmp_path))
    cache.sync_later = lambda path: None
    epoch, offset, renames = 0, 0, 0
    for _ in range(300):
        inode = os.stat(cache.path).st_ino if os.path.exists(cache.path) else None
        size = os.path.getsize(cache.path) if inode else 0
        step = rng.random()
        if step < 0.6:
            epoch, offset = epoch + 1, offset + rng.randint(0, 10 ** rng.randint(0, 6))
            cache.assign(epoch, offset)
        elif step < 0.8:
            cache.truncate_from_end(rng.randint(0, offset + 1))
        else:
            cache.truncate_from_start(rng.randint(0, offset + 1))
        assert checkpoints.read_epochs(cache.path) == cache.entries
        if inode is not None and os.stat(cache.path).st_ino != inode:
            renames += 1
            assert os.path.getsize(cache.path) < size  # only a shorter file is renamed over
    assert 0 < renames < 150
