"""Answers that wait (runtime/connection.py `Later`): written the moment they complete, in
request order, and those one event completes for a connection leave in one send."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

from gregor.runtime.connection import Connection, Later


class CountingSocket(socket.socket):
    """A socket that counts its sendmsg calls."""

    sends = 0

    def sendmsg(self, *args: Any, **kwargs: Any) -> int:
        self.sends += 1
        return super().sendmsg(*args, **kwargs)


FRAME = struct.pack(">i", 1) + b"x"


def test_answers_completed_by_another_connections_request_leave_in_order_and_together() -> None:
    async def run() -> tuple[bytes, bytes, int]:
        loop = asyncio.get_running_loop()
        a_server, a_client = socket.socketpair()
        raw, b_client = socket.socketpair()
        b_server = CountingSocket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=raw.detach())
        waiting: list[Later] = []

        def dispatch(conn: Connection, frame: memoryview) -> Any:
            if conn.sock is b_server:
                later = Later()
                waiting.append(later)
                return later
            # A request on the other connection completes B's answers: 2nd, 1st, then 3rd.
            for i in (1, 0, 2):
                waiting[i].set_result([b"answer-%d;" % i])
            assert b_server.sends == 0  # written once this dispatch ends
            return [b"done"]

        for sock in (a_server, b_server):
            conn = Connection(
                sock,
                loop,
                dispatch,
                max_request_bytes=1 << 20,
                max_queued_requests=100,
                on_close=lambda c: None,
                now_ms=lambda: 0,
            )
            sock.setblocking(False)
            conn._resume_reading()  # (start() sets TCP_NODELAY, which a socketpair has not)
        b_client.sendall(FRAME * 3)
        while len(waiting) < 3:
            await asyncio.sleep(0.001)
        a_client.sendall(FRAME)
        a_client.setblocking(False)
        b_client.setblocking(False)
        done = await loop.sock_recv(a_client, 100)
        answers = b""
        while len(answers) < 27:
            answers += await loop.sock_recv(b_client, 100)
        return done, answers, b_server.sends

    done, answers, sends = asyncio.run(run())
    assert done == b"done"
    assert answers == b"answer-0;answer-1;answer-2;"
    assert sends == 1
