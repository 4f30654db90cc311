"""A dispatcher's `LaterAnswer` (runtime/connection.py): the connection writes the answer at the
moment it is given, not at a later turn of the loop, and still in request order; a failed one
closes the connection. Over a real loopback socket."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from gregor.runtime.connection import Connection, LaterAnswer


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes:
    head = sock.recv(4, socket.MSG_WAITALL)
    (size,) = struct.unpack(">i", head)
    return sock.recv(size, socket.MSG_WAITALL)


async def serving(dispatch):
    """(client socket, the server's Connection) on a loopback pair."""
    loop = asyncio.get_running_loop()
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    server.setblocking(False)
    conn = Connection(
        server,
        loop,
        dispatch,
        max_request_bytes=1 << 20,
        max_queued_requests=16,
        on_close=lambda c: None,
        now_ms=lambda: 0,
    )
    conn.start()
    return client, conn


@pytest.mark.client
def test_a_later_answer_is_written_when_given_and_in_request_order() -> None:
    async def go() -> None:
        later = LaterAnswer()
        seen: list[bytes] = []

        def dispatch(conn, request):
            seen.append(bytes(request))
            return later if bytes(request) == b"first" else [frame(b"answer to second")]

        client, conn = await serving(dispatch)
        client.sendall(frame(b"first") + frame(b"second"))
        while len(seen) < 2:
            await asyncio.sleep(0.01)
        client.settimeout(0.2)
        with pytest.raises(TimeoutError):  # the second waits behind the first
            client.recv(1)
        later.give([frame(b"answer to first")])
        client.settimeout(5)
        # no turn of the loop since the give: the connection wrote both answers in it
        assert read_frame(client) == b"answer to first"
        assert read_frame(client) == b"answer to second"
        conn.close("done")
        client.close()

    asyncio.run(go())


@pytest.mark.client
def test_a_failed_later_answer_closes_the_connection() -> None:
    async def go() -> None:
        later = LaterAnswer()
        asked: list[bytes] = []

        def dispatch(conn, request):
            asked.append(bytes(request))
            return later

        client, conn = await serving(dispatch)
        client.sendall(frame(b"request"))
        while not asked:
            await asyncio.sleep(0.01)
        later.fail("no answer in time")
        assert conn.closed
        client.settimeout(5)
        assert client.recv(1) == b""
        client.close()

    asyncio.run(go())
