"""connections.max.idle.ms's sweep runs a step per connection (in 0.5 ms slices on the loop:
thousands of connections would hold it for milliseconds in one piece) and closes exactly the
connections idle since before the cutoff."""

from __future__ import annotations

import asyncio
import struct

import pytest

from gregor.runtime.connection import Connection
from gregor.runtime.server import Server

pytestmark = pytest.mark.client


def echo(conn: Connection, frame: memoryview) -> list[bytes]:
    return [struct.pack(">i", len(frame)) + bytes(frame)]


async def sweep() -> None:
    server = Server(echo, host="127.0.0.1", port=0)
    await server.start()
    streams = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(12)]
    try:
        while len(server.connections) < 12:
            await asyncio.sleep(0.01)
        conns = sorted(server.connections, key=id)
        for i, conn in enumerate(conns):
            conn.last_active_ms = 1_000 if i % 3 == 0 else 5_000  # every third one is old
        steps = server.idle_sweep_steps(2_000)
        yielded = 0
        try:
            while True:
                next(steps)
                yielded += 1
        except StopIteration as done:
            closed = done.value
        assert yielded == 12  # one step per connection
        assert closed == 4
        assert [c.closed for c in conns] == [i % 3 == 0 for i in range(12)]
        await asyncio.sleep(0.05)
        assert server.connections == {c for c in conns if not c.closed}
        assert len(server.connections) == 8
    finally:
        for _, writer in streams:
            writer.close()
        await server.stop()


def test_the_idle_sweep_closes_old_idle_connections_a_step_each() -> None:
    asyncio.run(sweep())
