"""Helpers of the tests of Raft drivers over loopback in one process: a `Cluster` of RaftDrivers
on their own logs (election and fetch timeouts of a few hundred ms), and `wait_for` a condition
inside the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from gregor.raft import FileQuorumStateStore, RaftConfig, StorageRaftLog
from gregor.raft.node import Entry
from gregor.runtime.raft_driver import RaftDriver

CONFIG = RaftConfig(
    election_timeout_ms=300,
    fetch_timeout_ms=600,
    election_backoff_max_ms=300,
    request_timeout_ms=500,
    fetch_max_wait_ms=200,
    append_linger_ms=5,
)
IDS = (1, 2, 3)


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.drivers: dict[int, RaftDriver] = {}
        self.committed: dict[int, list[bytes]] = {i: [] for i in IDS}
        self.voters: dict[int, tuple[str, int]] = {}

    def make(self, node_id: int) -> RaftDriver:
        raft_log = StorageRaftLog.open(str(self.root / f"node-{node_id}"))
        store = FileQuorumStateStore(raft_log.directory, list(IDS))
        self.committed[node_id] = []

        def on_commit(entries: list[Entry], into: list[bytes] = self.committed[node_id]) -> None:
            into.extend(e.data for e in entries if not e.control)

        driver = RaftDriver(
            node_id, raft_log, store, config=CONFIG, cluster_id="c1", on_commit=on_commit
        )
        self.drivers[node_id] = driver
        return driver

    async def start(self) -> dict[int, int]:
        """Make, bind and start a driver per id, each knowing the others as voters (`voters`);
        the port each listens on."""
        ports = {i: await self.make(i).bind("127.0.0.1", 0) for i in IDS}
        self.voters = {i: ("127.0.0.1", p) for i, p in ports.items()}
        for d in self.drivers.values():
            await d.start(self.voters)
        return ports

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[int]:
        """Started (`start`), until every driver left is stopped; gives the one leader."""
        await self.start()
        try:
            yield await self.leader()
        finally:
            for d in self.drivers.values():
                await d.stop()

    async def leader(self, timeout_s: float = 5.0) -> int:
        """The one leader, once there is exactly one."""
        await wait_for("a leader", lambda: len(self.leaders()) == 1, timeout_s)
        return self.leaders()[0]

    def leaders(self) -> list[int]:
        return [i for i, d in self.drivers.items() if d.node is not None and d.node.is_leader]


async def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 10.0) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - start
