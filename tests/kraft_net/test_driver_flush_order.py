"""What a RaftDriver runs while the metadata log's fsync is under way: a follower's replay of
newly committed entries and work handed to `after_flush` (a broker creating new partitions) wait
for that fsync to be reported, so the loop leaves the GIL to the flush thread and the
acknowledging Fetch goes out first; a leader replays at once (its commit answers clients)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from gregor.raft.node import Effects, Entry
from gregor.runtime.raft_driver import RaftDriver

pytestmark = pytest.mark.unit


class GatedLog:
    """A log whose fsyncs wait for the test to open the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def begin_flush(self, offset: int) -> tuple[Any, Any]:
        return (lambda: self.gate.wait(10)), (lambda: None)


class StubNode:
    def __init__(self, leader: bool, events: list[str]) -> None:
        self.is_leader = leader
        self.events = events

    def flushed(self, now_ms: int, offset: int) -> Effects:
        self.events.append(f"flushed {offset}")
        return Effects()


async def hosted_then_stop(driver: RaftDriver, events: list[str]) -> None:
    """Wait (bounded) for the hosting queued behind the flush, then stop the flush thread."""
    for _ in range(200):
        if "hosting" in events:
            break
        await asyncio.sleep(0.01)
    assert driver._flusher is not None
    driver._flusher.stop()


def run(leader: bool) -> list[str]:
    events: list[str] = []

    async def main() -> None:
        log = GatedLog()

        def on_commit(entries: list[Entry]) -> None:
            events.append("replay " + ",".join(str(e.offset) for e in entries))

        driver = RaftDriver(2, log, store=None, on_commit=on_commit)  # type: ignore[arg-type]
        driver.node = StubNode(leader, events)  # type: ignore[assignment]
        driver._flush(3)
        driver._commit([Entry(0, 1, b"a")])
        driver.after_flush(lambda: events.append("hosting"))
        driver._commit([Entry(1, 1, b"b"), Entry(2, 1, b"c")])
        await asyncio.sleep(0.05)
        events.append("gate opens")
        log.gate.set()
        await hosted_then_stop(driver, events)

    asyncio.run(main())
    return events


def test_a_follower_replays_and_hosts_only_once_its_flush_is_reported_in_order() -> None:
    # What was committed meanwhile is replayed together, in order, before the work queued after it
    assert run(leader=False) == ["gate opens", "flushed 3", "replay 0,1,2", "hosting"]


def test_a_leader_replays_at_once_while_its_flush_is_under_way() -> None:
    assert run(leader=True) == ["replay 0", "replay 1,2", "gate opens", "flushed 3", "hosting"]


def test_a_failed_flush_still_lets_the_replay_and_the_hosting_run() -> None:
    events: list[str] = []

    class FailingLog(GatedLog):
        def begin_flush(self, offset: int) -> tuple[Any, Any]:
            def sync() -> None:
                raise OSError(5, "EIO")

            return sync, (lambda: None)

    async def main() -> None:
        def on_commit(entries: list[Entry]) -> None:
            events.append("replay " + ",".join(str(e.offset) for e in entries))

        driver = RaftDriver(2, FailingLog(), store=None, on_commit=on_commit)  # type: ignore[arg-type]
        driver.node = StubNode(False, events)  # type: ignore[assignment]
        driver._flush(3)
        driver._commit([Entry(0, 1, b"a")])
        driver.after_flush(lambda: events.append("hosting"))
        await hosted_then_stop(driver, events)

    asyncio.run(main())
    assert events == ["replay 0", "hosting"]  # never told the node it is durable
