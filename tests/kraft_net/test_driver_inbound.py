"""The controller listener answers KRaft requests in the turn it reads them: an answer the node
gives at once is written then, a parked Fetch's when the node gives it, with no task per
request; answers keep their order per connection; one the node never gives closes the
connection after the request timeout and the fetch wait.

A single voter (leader of itself) on a clock the test moves, asked over a raw socket by an
observer (node 7) that fetches the metadata log."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from gregor.protocol import codec
from gregor.raft import FileQuorumStateStore, StorageRaftLog, wire
from gregor.raft import messages as m
from gregor.raft.node import NotLeader
from gregor.runtime.raft_driver import RaftDriver
from tests.kraft_net.helpers import CONFIG, wait_for

OBSERVER = 7


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


@contextlib.asynccontextmanager
async def leader_of_itself(tmp_path: Path, clock: Clock) -> AsyncIterator[RaftDriver]:
    raft_log = StorageRaftLog.open(str(tmp_path / "node-1"))
    store = FileQuorumStateStore(raft_log.directory, [1])
    driver = RaftDriver(1, raft_log, store, config=CONFIG, cluster_id="c1", clock=clock)
    port = await driver.bind("127.0.0.1", 0)
    await driver.start({1: ("127.0.0.1", port)})
    try:
        clock.now_ms += 10 * CONFIG.election_timeout_ms
        await wait_for("a leader", lambda: driver.node is not None and driver.node.is_leader)
        await wait_for("its first commit", lambda: driver.node.high_watermark is not None)  # type: ignore[union-attr]
        yield driver
    finally:
        await driver.stop()


class Peer:
    """A raw connection to the listener: requests written, answers read in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.sent: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        self.next_id = 1

    def send(self, request: m.Request) -> int:
        key, version, body = wire.to_request(request)
        correlation_id = self.next_id
        self.next_id += 1
        self.sent[correlation_id] = (key, version)
        self.writer.write(b"".join(codec.encode_request(key, version, correlation_id, "t", body)))
        return correlation_id

    async def read(self) -> tuple[int, m.Response]:
        size = int.from_bytes(await self.reader.readexactly(4), "big")
        frame = await self.reader.readexactly(size)
        correlation_id = int.from_bytes(frame[:4], "big")
        key, version = self.sent.pop(correlation_id)
        _, body = codec.decode_response(key, version, frame)
        return correlation_id, wire.from_response(key, version, body, correlation_id)


async def connect(driver: RaftDriver) -> Peer:
    assert driver.server is not None
    return Peer(*await asyncio.open_connection("127.0.0.1", driver.server.port))


def fetch(driver: RaftDriver, max_wait_ms: int) -> m.FetchRequest:
    """The observer's Fetch from the leader's log end: nothing new to read."""
    node = driver.node
    assert node is not None
    return m.FetchRequest(
        "c1",
        OBSERVER,
        node.epoch,
        driver.log.end_offset,
        driver.log.last_epoch,
        0,
        max_wait_ms,
        1 << 20,
        0,
    )


def count_tasks(loop: asyncio.AbstractEventLoop, created: list[Any]) -> None:
    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        created.append(task)
        return task

    loop.set_task_factory(factory)  # type: ignore[arg-type]


def test_inbound_fetches_are_answered_with_no_task_per_request(tmp_path: Path) -> None:
    """A burst of Fetches, answered at once, and parked ones woken by an append: the listener
    creates no task for any of them."""

    async def main() -> None:
        clock = Clock()
        async with leader_of_itself(tmp_path, clock) as driver:
            peer = await connect(driver)
            created: list[Any] = []
            count_tasks(asyncio.get_running_loop(), created)
            at_once = [peer.send(fetch(driver, 0)) for _ in range(20)]
            answers = [await peer.read() for _ in at_once]
            assert [c for c, _ in answers] == at_once
            assert all(isinstance(a, m.FetchResponse) and a.error_code == 0 for _, a in answers)
            parked = [peer.send(fetch(driver, 60_000)) for _ in range(5)]
            await wait_for("parked", lambda: len(driver.node._parked) == 5)  # type: ignore[union-attr]
            assert not isinstance(driver.append([b"new"]), NotLeader)
            woken = [await peer.read() for _ in parked]
            assert [c for c, _ in woken] == parked
            assert all(a.batches for _, a in woken)  # type: ignore[union-attr]
            assert created == [], created
            peer.writer.close()

    asyncio.run(main())


def test_a_parked_fetch_is_answered_in_order_ahead_of_later_answers_on_its_connection(
    tmp_path: Path,
) -> None:
    """A parked Fetch, then a DescribeQuorum and a Fetch the node answers at once, on one
    connection: the later two wait behind the parked one, which the append wakes with it."""

    async def main() -> None:
        clock = Clock()
        async with leader_of_itself(tmp_path, clock) as driver:
            peer = await connect(driver)
            first = peer.send(fetch(driver, 60_000))
            await wait_for("parked", lambda: len(driver.node._parked) == 1)  # type: ignore[union-attr]
            second = peer.send(m.DescribeQuorumRequest(0))
            third = peer.send(fetch(driver, 0))
            (conn,) = driver.server.connections  # type: ignore[union-attr]
            await wait_for("all three handled", lambda: driver._next_inbound_id == 3)
            assert conn.bytes_out == 0  # the two answered at once wait behind the parked Fetch
            assert not isinstance(driver.append([b"new"]), NotLeader)
            answers = [await peer.read() for _ in range(3)]
            assert [c for c, _ in answers] == [first, second, third]
            woken, described, at_once = (a for _, a in answers)
            assert isinstance(woken, m.FetchResponse) and woken.batches
            assert isinstance(described, m.DescribeQuorumResponse) and described.leader_id == 1
            assert isinstance(at_once, m.FetchResponse) and not at_once.batches
            peer.writer.close()

    asyncio.run(main())


def test_a_request_the_node_never_answers_closes_its_connection(tmp_path: Path) -> None:
    """The leader's clock stands still, so its parked Fetch is never due: after the request
    timeout and the fetch wait the listener closes that connection (as a dead node would), and
    forgets the request; another connection is served meanwhile."""

    async def main() -> None:
        clock = Clock()
        async with leader_of_itself(tmp_path, clock) as driver:
            stuck = [await connect(driver) for _ in range(2)]
            other = await connect(driver)
            for n, peer in enumerate(stuck, 1):
                peer.send(fetch(driver, 60_000))
                await wait_for("parked", lambda n=n: len(driver.node._parked) == n)  # type: ignore[union-attr]
                await asyncio.sleep(0.1)  # the second one's deadline comes later
            for peer in stuck:
                await wait_for("the close", peer.reader.at_eof, 10.0)
                assert await peer.reader.read() == b""  # closed, no answer
            assert driver._inbound == {}
            asked = other.send(m.DescribeQuorumRequest(0))
            assert (await other.read())[0] == asked
            for peer in (other, *stuck):
                peer.writer.close()

    asyncio.run(main())


def test_a_parked_fetch_is_dropped_when_the_driver_stops(tmp_path: Path) -> None:
    async def main() -> None:
        clock = Clock()
        async with leader_of_itself(tmp_path, clock) as driver:
            peer = await connect(driver)
            peer.send(fetch(driver, 60_000))
            await wait_for("parked", lambda: len(driver.node._parked) == 1)  # type: ignore[union-attr]
            await driver.stop()
            assert await peer.reader.read() == b""
            assert driver._inbound == {}
            peer.writer.close()

    asyncio.run(main())
