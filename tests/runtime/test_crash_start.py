"""A start after a crash, as the broker runs it (runtime/log_io.py): every torn tail is cut,
the leader epochs the logs no longer hold leave the cache at once and their checkpoint files
later, on a worker thread, never by a rename on the loop; the write of a partition's new epoch
(as it is led) makes the deferred trim of its file unnecessary."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from gregor.clock import ManualClock
from gregor.protocol.records.records import build_batch
from gregor.runtime import log_io
from gregor.storage import checkpoints
from gregor.storage.config import LogConfig
from gregor.storage.log_manager import LogManager

from .test_log_io import record_threads, until

PARTITIONS = 40
CONFIG = LogConfig(segment_bytes=1 << 20)


def manager(root: Path) -> LogManager:
    mgr = LogManager([str(root)], CONFIG, clock=ManualClock(1_000_000))
    mgr.deferred_sync = log_io.DeferredSyncs()  # as the broker sets them
    mgr.write_later = log_io.DeferredWrites()
    return mgr


def crashed_dir(root: Path) -> dict[int, int]:
    """PARTITIONS logs of 3 batches in epoch 1, each then led in epoch 2 from its end (the
    entry a crash leaves beyond the log end once the tail is cut), every other one with a torn
    batch after its last; killed (no clean close). Returns each log's end offset."""
    mgr = manager(root)
    mgr.startup()
    ends = {}
    for p in range(PARTITIONS):
        log = mgr.get_or_create("t", p)
        for i in range(3):
            log.append(build_batch([(b"k", b"v%d" % i)]), leader_epoch=1)
        ends[p] = log.log_end_offset
        log.leader_epochs.assign(2, log.log_end_offset)
        if p % 2:  # half of a batch of epoch 2, then the kill
            torn = build_batch([(b"k", b"x" * 200)], base_offset=ends[p], partition_leader_epoch=2)
            with open(log.active_segment.log_path, "ab") as f:
                f.write(torn[: len(torn) // 2])
    for log in mgr.logs.values():
        log.close_handles()
    return ends


@pytest.fixture
def crashed(tmp_path: Path) -> tuple[Path, dict[int, int]]:
    return tmp_path, crashed_dir(tmp_path)


def test_a_crash_start_cuts_every_torn_tail_and_trims_stale_epochs_off_the_loop(
    crashed: tuple[Path, dict[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, ends = crashed
    replaces = record_threads(monkeypatch, "replace")
    mgr = manager(root)
    batched = mgr.deferred_sync
    assert batched is not None
    synced: list[str] = []

    def deferred_sync(path: str) -> None:  # the broker's batched fsyncs, recorded
        synced.append(path)
        batched(path)

    mgr.deferred_sync = deferred_sync

    async def go() -> tuple[int, dict[int, list[tuple[int, int]]]]:
        mgr.call_soon_on_owner = asyncio.get_running_loop().call_soon_threadsafe
        mgr.startup()
        loop_thread = threading.get_ident()
        on_disk_at_start = {
            p: checkpoints.read_epochs(mgr.logs[("t", p)].leader_epochs.path)
            for p in range(PARTITIONS)
        }
        for p in range(0, PARTITIONS, 4):  # some are led at once, as the broker does
            log = mgr.logs[("t", p)]
            log.leader_epochs.assign(3, log.log_end_offset)
        await until(
            lambda: all(
                checkpoints.read_epochs(lg.leader_epochs.path) == lg.leader_epochs.entries
                for lg in mgr.logs.values()
            )
        )
        return loop_thread, on_disk_at_start

    loop_thread, on_disk_at_start = asyncio.run(go())
    assert not mgr.had_clean_shutdown[str(root)]
    for p in range(PARTITIONS):
        log = mgr.logs[("t", p)]
        assert log.log_end_offset == ends[p]  # the torn batch is gone, the rest is there
        assert os.path.getsize(log.active_segment.log_path) == log.active_segment.size
        assert [b.last_offset for b in log.active_segment.iter_batches()] == [0, 1, 2]
        # the file said epoch 2 began at the end until the deferred trim (or a new epoch) ran
        assert on_disk_at_start[p] == [(1, 0), (2, ends[p])]
        led = p % 4 == 0
        expected = [(1, 0), (3, ends[p])] if led else [(1, 0)]
        assert log.leader_epochs.entries == expected
        assert checkpoints.read_epochs(log.leader_epochs.path) == expected
    epoch_renames = [t for t, path in replaces if str(path).endswith("leader-epoch-checkpoint.tmp")]
    assert epoch_renames and loop_thread not in epoch_renames
    # the trims that ran were fsynced with the other checkpoints, not one by one on the worker
    trimmed = {mgr.logs[("t", p)].leader_epochs.path for p in range(PARTITIONS) if p % 4}
    assert trimmed <= set(synced)
    mgr.shutdown()
    again = manager(root)
    again.startup()  # clean now
    for p in range(PARTITIONS):
        log = again.logs[("t", p)]
        assert log.log_end_offset == ends[p]
        assert [b.last_offset for b in log.active_segment.iter_batches()] == [0, 1, 2]
        # epoch 3 holds no batch yet: opening drops it again (Kafka's truncateFromEnd)
        assert log.leader_epochs.entries == [(1, 0)]
    again.shutdown()


def test_deferred_writes_wait_for_the_loop_and_run_together_on_a_worker() -> None:
    ran: list[tuple[str, int]] = []
    writes = log_io.DeferredWrites()

    async def go() -> int:
        for name in ("a", "b", "c"):
            writes(lambda name=name: ran.append((name, threading.get_ident())))
        assert ran == []  # the loop is busy: nothing yet
        await until(lambda: len(ran) == 3)
        return threading.get_ident()

    loop_thread = asyncio.run(go())
    assert [name for name, _ in ran] == ["a", "b", "c"]
    threads = {t for _, t in ran}
    assert len(threads) == 1 and loop_thread not in threads  # one job, on a worker
    ran.clear()
    writes(lambda: ran.append(("now", threading.get_ident())))  # no loop: at once
    assert ran == [("now", threading.get_ident())]


def test_one_failing_deferred_write_does_not_keep_the_others_from_their_files() -> None:
    ran: list[str] = []
    writes = log_io.DeferredWrites()

    def fails() -> None:
        raise OSError(28, "No space left on device")

    async def go() -> None:
        writes(fails)
        writes(lambda: ran.append("after"))
        await until(lambda: ran == ["after"])

    asyncio.run(go())
