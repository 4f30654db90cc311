"""An idle connection holds no receive buffer: the server's periodic sweep lets the chunk of
every connection with nothing half received go (`Connection.trim`), and the next request is
read into a new one. A frame half received when the sweep runs keeps its buffer."""

from __future__ import annotations

import asyncio
import struct

import pytest

from gregor.runtime.connection import Connection
from gregor.runtime.server import Server

pytestmark = pytest.mark.client


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def echo(conn: Connection, frame: memoryview) -> list[bytes]:
    return [framed(b"re:" + bytes(frame))]


async def answer(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def sweeps_then_reads() -> None:
    server = Server(echo, host="127.0.0.1", port=0, max_idle_ms=2000)  # a sweep every 0.5 s
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        two = framed(b"two")
        writer.write(framed(b"one") + two[:5])
        assert await answer(reader) == b"re:one"
        await asyncio.sleep(0.7)  # a sweep while "two" is half received
        (conn,) = server.connections
        assert conn.receive_buffer_bytes > 0, "a frame half received lost its buffer"
        writer.write(two[5:])
        assert await answer(reader) == b"re:two"
        await asyncio.sleep(0.7)  # a sweep with nothing pending
        assert conn.receive_buffer_bytes == 0, "an idle connection kept its receive buffer"
        writer.write(framed(b"three") + framed(b"four"))
        assert await answer(reader) == b"re:three"
        assert await answer(reader) == b"re:four"
        assert server.connections == {conn}
    finally:
        writer.close()
        await server.stop()


def test_the_sweep_lets_an_idle_connection_s_receive_buffer_go_and_it_reads_on() -> None:
    asyncio.run(sweeps_then_reads())
