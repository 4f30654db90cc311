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


async def large_frames_in_a_row() -> None:
    server = Server(echo, host="127.0.0.1", port=0)
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        payloads = [bytes([i]) * 600_000 for i in (1, 2, 3)] + [b"small", bytes([4]) * 300_000]
        writer.write(b"".join(framed(p) for p in payloads))  # pipelined, in one write
        for p in payloads:
            assert await answer(reader) == b"re:" + p
        (conn,) = server.connections
        assert conn.receive_buffer_bytes == 0
    finally:
        writer.close()
        await server.stop()


def test_a_large_frame_after_a_large_one_is_received_straight_into_its_own_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The read after a large frame takes only the next size prefix, so the next large frame
    has no head received into the chunk to copy into its own buffer."""
    heads: list[int] = []
    start_big = Connection._start_big

    def spy(conn: Connection, size: int, head: memoryview) -> None:
        heads.append(len(head))
        start_big(conn, size, head)

    monkeypatch.setattr(Connection, "_start_big", spy)
    asyncio.run(large_frames_in_a_row())
    assert len(heads) == 4  # the three large frames and the one after the small frame
    assert heads[1:3] == [0, 0], f"bytes copied from the chunk into large frames: {heads}"
