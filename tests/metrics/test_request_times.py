"""Kafka's six request times, measured by the measuring dispatcher around real connections
over socket pairs: a frame read behind a slow handler waits in the request queue, a ready
answer behind a waiting one waits in the response queue, and an answer the client does not
read waits in the send. Lower bounds only: a loaded machine makes each time longer."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Any

import pytest

from gregor.metrics.stats import Histogram, RequestStats
from gregor.protocol import api_keys
from gregor.runtime.connection import Connection, Later
from gregor.runtime.request_metrics import MeasuredDispatcher

pytestmark = pytest.mark.unit

SLOW_S = 0.06  # a handler's, a waiting answer's or a client's delay
BIG = 8 * 1024 * 1024  # an answer far larger than a socket pair's buffers


def frame(api_key: int, version: int) -> bytes:
    body = struct.pack(">hh", api_key, version) + b"rest"
    return struct.pack(">i", len(body)) + body


def times(requests: RequestStats, api_key: int, version: int) -> dict[str, Histogram]:
    return requests.of(api_key, version).times()


def serve(requests: RequestStats, inner: Any) -> tuple[socket.socket, Connection]:
    """A connection served by `inner` inside the measuring dispatcher; the client's socket."""
    server, client = socket.socketpair()
    server.setblocking(False)
    conn = Connection(
        server,
        asyncio.get_running_loop(),
        MeasuredDispatcher(inner, requests),
        max_request_bytes=1 << 20,
        max_queued_requests=100,
        on_close=lambda c: None,
        now_ms=lambda: 0,
    )
    conn._resume_reading()  # (start() sets TCP_NODELAY, which a socket pair has not)
    client.setblocking(False)
    return client, conn


async def read(client: socket.socket, size: int) -> bytes:
    got = b""
    while len(got) < size:
        got += await asyncio.get_running_loop().sock_recv(client, min(1 << 20, size - len(got)))
    return got


def test_a_frame_behind_a_slow_handler_waits_in_the_request_queue() -> None:
    requests = RequestStats()

    def inner(conn: Connection, f: memoryview) -> list[bytes]:
        if f[1] == api_keys.PRODUCE:
            time.sleep(SLOW_S)  # blocks the loop, as a slow handler would
        return [b"ok;"]

    async def run() -> None:
        client, _ = serve(requests, inner)
        client.sendall(frame(api_keys.PRODUCE, 9) + frame(api_keys.METADATA, 12))  # one read
        assert await read(client, 6) == b"ok;ok;"

    asyncio.run(run())
    slow, behind = times(requests, api_keys.PRODUCE, 9), times(requests, api_keys.METADATA, 12)
    assert slow["local"].sum >= SLOW_S * 1000 * 0.9
    assert behind["requestqueue"].sum >= SLOW_S * 1000 * 0.9
    assert slow["requestqueue"].count == behind["requestqueue"].count == 1
    # each answer has left: its total counts from its arrival, the queue included
    assert behind["total"].count == 1 and behind["total"].sum >= behind["requestqueue"].sum
    assert slow["total"].sum >= slow["local"].sum


def test_a_ready_answer_behind_a_waiting_one_waits_in_the_response_queue() -> None:
    requests = RequestStats()

    def inner(conn: Connection, f: memoryview) -> Any:
        if f[1] == api_keys.PRODUCE:  # acks=all, say: answered later
            later = Later()
            asyncio.get_running_loop().call_later(SLOW_S, later.set_result, [b"first;"])
            return later
        return [b"second;"]

    async def run() -> None:
        client, _ = serve(requests, inner)
        client.sendall(frame(api_keys.PRODUCE, 9) + frame(api_keys.METADATA, 12))
        assert await read(client, 13) == b"first;second;"  # in request order

    asyncio.run(run())
    waiting, ready = times(requests, api_keys.PRODUCE, 9), times(requests, api_keys.METADATA, 12)
    assert waiting["remote"].sum >= SLOW_S * 1000 * 0.9
    assert waiting["responsequeue"].count == 1 and waiting["responsequeue"].sum < SLOW_S * 1000
    assert ready["responsequeue"].sum >= SLOW_S * 1000 * 0.9
    assert ready["remote"].buckets[0] == 1  # answered at once
    assert ready["total"].sum >= ready["responsequeue"].sum
    assert waiting["total"].sum >= waiting["remote"].sum


def test_an_answer_the_client_does_not_read_waits_in_the_send() -> None:
    requests = RequestStats()
    big = bytes(BIG)

    async def run() -> None:
        client, conn = serve(requests, lambda c, f: [big])
        client.sendall(frame(api_keys.FETCH, 12))
        await asyncio.sleep(SLOW_S)  # the socket takes part of it, then is full
        assert conn.bytes_out < BIG
        assert len(await read(client, BIG)) == BIG
        while requests.of(api_keys.FETCH, 12).times()["total"].count == 0:
            await asyncio.sleep(0.001)  # the last write's report

    asyncio.run(run())
    fetch = times(requests, api_keys.FETCH, 12)
    assert fetch["responsesend"].count == 1
    assert fetch["responsesend"].sum >= SLOW_S * 1000 * 0.9
    assert fetch["total"].sum >= fetch["responsesend"].sum
    assert fetch["responsequeue"].sum < SLOW_S * 1000  # nothing before it


def test_a_timed_answer_behind_an_untimed_big_one_leaves_after_it() -> None:
    """Only some requests are timed (the first of each API and version, then one in 8): a timed
    answer queued behind an untimed one leaves only once the socket has taken both."""
    requests = RequestStats()
    big = bytes(BIG)

    def inner(conn: Connection, f: memoryview) -> list[bytes]:
        return [b"small;"] if f[1] == api_keys.METADATA else [big]

    async def run() -> None:
        client, conn = serve(requests, inner)
        # a timed fetch (the first), an untimed one, then a timed metadata (its first)
        client.sendall(
            frame(api_keys.FETCH, 12) + frame(api_keys.FETCH, 12) + frame(api_keys.METADATA, 12)
        )
        await asyncio.sleep(SLOW_S)  # nothing read: the socket is full inside the first fetch
        assert conn.bytes_out < BIG
        assert len(await read(client, BIG)) == BIG  # the first answer
        await asyncio.sleep(3 * SLOW_S)  # the socket is full inside the second
        assert conn.bytes_out < 2 * BIG
        assert len(await read(client, BIG + 6)) == BIG + 6
        while requests.of(api_keys.METADATA, 12).times()["total"].count == 0:
            await asyncio.sleep(0.001)

    asyncio.run(run())
    assert requests.of(api_keys.FETCH, 12).count == 2
    assert times(requests, api_keys.FETCH, 12)["total"].count == 1  # the second is not timed
    behind = times(requests, api_keys.METADATA, 12)
    assert behind["responsesend"].sum >= 4 * SLOW_S * 1000 * 0.9  # both waits
