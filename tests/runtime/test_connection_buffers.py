"""A connection between requests holds no receive buffer: once every byte received has been
framed and handed on, its chunk goes and the next read takes a new one. A frame half received
keeps its buffer until the rest arrives."""

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


async def requests_then_idle() -> None:
    server = Server(echo, host="127.0.0.1", port=0)
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        two = framed(b"two")
        writer.write(framed(b"one") + two[:5])
        assert await answer(reader) == b"re:one"
        (conn,) = server.connections
        assert conn.receive_buffer_bytes > 0, "a frame half received lost its buffer"
        writer.write(two[5:])
        assert await answer(reader) == b"re:two"
        assert conn.receive_buffer_bytes == 0, "a connection between requests kept its buffer"
        writer.write(framed(b"three") + framed(b"four"))
        assert await answer(reader) == b"re:three"
        assert await answer(reader) == b"re:four"
        assert conn.receive_buffer_bytes == 0
        big = framed(bytes(100_000))  # larger than a chunk: a buffer of its own, then none
        writer.write(big)
        assert await answer(reader) == b"re:" + bytes(100_000)
        assert conn.receive_buffer_bytes == 0
        assert server.connections == {conn}
    finally:
        writer.close()
        await server.stop()


def test_a_connection_between_requests_holds_no_receive_buffer() -> None:
    asyncio.run(requests_then_idle())
