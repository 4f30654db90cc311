"""Leader-epoch checkpoint writes of truncations handed to `write_later` (storage/leader_epoch.py):
the file follows the cache once the deferred write runs, never goes back to an older state when
a new epoch is written in between, and a close writes one still waiting."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from gregor.storage import checkpoints
from gregor.storage.leader_epoch import LeaderEpochCache


def deferred_cache(tmp_path: Path) -> tuple[LeaderEpochCache, list[Callable[[], None]]]:
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in ((1, 0), (2, 100), (3, 200)):
        cache.assign(epoch, start)
    waiting: list[Callable[[], None]] = []
    cache.write_later = waiting.append
    return cache, waiting


def on_disk(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return checkpoints.read_epochs(cache.path)


def test_a_truncation_is_written_when_the_deferred_write_runs(tmp_path: Path) -> None:
    cache, waiting = deferred_cache(tmp_path)
    cache.truncate_from_start(150)
    cache.truncate_from_end(300)  # nothing to drop: no write
    cache.truncate_from_start(180)
    assert len(waiting) == 1  # one write waits, whatever the truncations since
    assert on_disk(cache) == [(1, 0), (2, 100), (3, 200)]  # not yet
    waiting.pop()()
    assert on_disk(cache) == cache.entries == [(2, 180), (3, 200)]


def test_a_new_epoch_is_written_at_once_and_a_late_deferred_write_keeps_it(tmp_path: Path) -> None:
    cache, waiting = deferred_cache(tmp_path)
    cache.truncate_from_start(150)
    cache.assign(4, 300)
    assert on_disk(cache) == [(2, 150), (3, 200), (4, 300)]  # written by the assign
    waiting.pop()()  # the truncation's write, late: nothing older comes back
    assert on_disk(cache) == [(2, 150), (3, 200), (4, 300)]
    cache.truncate_from_end(250)
    waiting.pop()()
    assert on_disk(cache) == [(2, 150), (3, 200)]


def test_close_writes_a_waiting_write_and_a_deleted_dir_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    cache, waiting = deferred_cache(tmp_path / "p")
    cache.truncate_from_end(150)
    cache.flush_pending()
    assert on_disk(cache) == [(1, 0), (2, 100)]
    waiting.pop()()  # already written: nothing more
    cache.truncate_from_end(50)
    shutil.rmtree(tmp_path / "p")  # the partition was deleted meanwhile
    waiting.pop()()
    assert not (tmp_path / "p").exists()
