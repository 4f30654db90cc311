"""Snapshots written off the event loop: the image is encoded on the loop, the `.checkpoint`
file written and fsynced on a worker thread, and only then, back on the loop, is it added to
the log and the log start moved up to it; one at a time; a snapshot that a newer one overtook
while it was written is thrown away; a failed write keeps the log whole. The store writes off
the loop only with the `in_thread` the servers give it (runtime/log_io.py); without it, on the
caller's thread."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from gregor.raft.log import SnapshotId
from gregor.raft.storage_log import DIR_NAME, snapshot_file_name
from gregor.runtime.log_io import in_thread
from tests.metadata.test_snapshot import Clock, checkpoints, open_store, start

SMALL = {"metadata_log_max_record_bytes_between_snapshots": "2000"}


class SlowWriter:
    """Writes with the log's own writer once released; records what the loop had done by then."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.real = store.node.log.write_snapshot_file
        self.release = threading.Event()
        self.started: list[SnapshotId] = []
        self.log_start_when_durable: list[int] = []
        self.fail = False

    def __call__(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self.started.append(snapshot_id)
        if not self.release.wait(10):
            raise TimeoutError("never released: the event loop was blocked by the write")
        if self.fail:
            raise OSError(28, "No space left on device")
        self.real(snapshot_id, data)
        self.log_start_when_durable.append(self.store.node.log.start_offset)


async def until(check: Any, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def create_until_a_snapshot_starts(ctl: Any) -> SnapshotId:
    for i in range(1000):
        ctl.create_topic(f"t{i}", [[1]], {})
        if ctl.store.snapshot_in_flight is not None:
            return ctl.store.snapshot_in_flight  # type: ignore[no-any-return]
    raise AssertionError("no snapshot started")


def test_the_loop_keeps_running_while_a_snapshot_is_written(tmp_path: Path) -> None:
    async def main() -> None:
        store, ctl = start(tmp_path, Clock(), **SMALL)
        store.in_thread = in_thread  # as the servers give it
        writer = SlowWriter(store)
        store.write_snapshot_file = writer
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        ticking = asyncio.ensure_future(ticker())
        sid = create_until_a_snapshot_starts(ctl)
        start_before = store.node.log.start_offset
        await until(lambda: writer.started)
        seen = ticks
        await asyncio.sleep(0.2)
        assert ticks > seen, "the event loop runs while the file is written"
        ctl.create_topic("during", [[1]], {})  # and commits go on
        assert "during" in store.topics
        assert (
            store.node.log.start_offset == start_before and store.node.log.latest_snapshot() is None
        )
        assert checkpoints(tmp_path) == [], "not there before it is durable"
        writer.release.set()
        await until(lambda: store.snapshot_in_flight is None)
        assert writer.log_start_when_durable == [start_before], "the log start moved only after"
        assert (
            store.node.log.latest_snapshot() == sid
            and store.node.log.start_offset == sid.end_offset
        )
        assert checkpoints(tmp_path) == [snapshot_file_name(sid)]
        ticking.cancel()
        image = store.image
        store.close()
        again = open_store(tmp_path, Clock())
        assert again.image.topics_by_name == image.topics_by_name
        again.close()

    asyncio.run(main())


def test_a_snapshot_overtaken_while_written_is_thrown_away(tmp_path: Path) -> None:
    async def main() -> None:
        store, ctl = start(tmp_path, Clock(), **SMALL)
        store.in_thread = in_thread  # as the servers give it
        writer = SlowWriter(store)
        store.write_snapshot_file = writer
        old = create_until_a_snapshot_starts(ctl)
        await until(lambda: writer.started)
        for i in range(3):
            ctl.create_topic(f"later-{i}", [[1]], {})
        assert store.snapshot_in_flight == old, "one at a time: no second one starts"
        new = store.snapshot()  # on this thread, newer
        assert new is not None and new.end_offset > old.end_offset
        writer.release.set()
        await until(lambda: store.snapshot_in_flight is None)
        assert (
            store.node.log.latest_snapshot() == new
            and store.node.log.start_offset == new.end_offset
        )
        assert checkpoints(tmp_path) == [snapshot_file_name(new)], "the older file is removed"
        store.close()

    asyncio.run(main())


def test_a_failed_write_keeps_the_log_and_is_retried(tmp_path: Path) -> None:
    async def main() -> None:
        store, ctl = start(tmp_path, Clock(), **SMALL)
        store.in_thread = in_thread  # as the servers give it
        writer = SlowWriter(store)
        writer.fail = True
        writer.release.set()
        store.write_snapshot_file = writer
        create_until_a_snapshot_starts(ctl)
        await until(lambda: store.snapshot_in_flight is None)
        assert store.node.log.latest_snapshot() is None and store.node.log.start_offset == 0
        assert not list((tmp_path / DIR_NAME).glob("*.checkpoint"))
        writer.fail = False
        ctl.create_topic("next", [[1]], {})  # the bytes still count: the next commit retries
        await until(
            lambda: (
                store.snapshot_in_flight is None and store.node.log.latest_snapshot() is not None
            )
        )
        assert store.node.log.start_offset == store.node.log.latest_snapshot().end_offset
        store.close()

    asyncio.run(main())


def test_without_in_thread_a_snapshot_is_written_on_the_callers_thread(tmp_path: Path) -> None:
    async def main() -> None:
        store, ctl = start(tmp_path, Clock(), **SMALL)
        for i in range(1000):
            ctl.create_topic(f"t{i}", [[1]], {})
            assert store.snapshot_in_flight is None, "nothing is left to a worker thread"
            if checkpoints(tmp_path):
                break
        sid = store.node.log.latest_snapshot()
        assert sid is not None and checkpoints(tmp_path) == [snapshot_file_name(sid)]
        assert store.node.log.start_offset == sid.end_offset, "the log start moved at once"
        store.close()

    asyncio.run(main())
