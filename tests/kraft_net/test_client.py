"""NetworkClient against a real gregor broker, and against small local servers that misbehave
(hang up, stay silent, answer with the wrong correlation id, come up late)."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

import gregor
from gregor.protocol import api_keys, codec
from gregor.protocol.messages import ApiVersionsRequest, MetadataRequest
from gregor.runtime.client import (
    DisconnectedError,
    NetworkClient,
    RequestTimeoutError,
)

# The quorum's and brokers-to-controller RPCs; DescribeQuorum (55) is served to clients too.
KRAFT_KEYS = {52, 53, 54, 56, 59, 62, 63, 67}


@pytest.fixture(scope="module")
def broker() -> Any:
    with gregor.Broker() as b:
        yield b


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_real_broker_pipelined_metadata_and_api_versions(broker: Any, loop: str) -> None:
    async def main() -> None:
        client = NetworkClient(
            {1: (broker.host, broker.port)}, client_id="test-client", api_versions=True
        )
        try:
            # ApiVersions v3 handshake on connect; the client listener hides the KRaft APIs.
            await client.send(1, api_keys.METADATA, 12, MetadataRequest(topics=[]))
            conn = client.connection(1)
            assert conn is not None and conn.api_versions is not None
            assert conn.api_versions[api_keys.METADATA] == (0, 13)
            assert KRAFT_KEYS.isdisjoint(conn.api_versions)
            assert conn.api_versions[api_keys.DESCRIBE_QUORUM] == (0, 2)
            # Pipelined: 20 requests in flight on one connection, of flexible and older versions.
            calls = [
                client.send(1, api_keys.METADATA, v, MetadataRequest(topics=[]))
                for v in (1, 4, 9, 12) * 5
            ] + [client.send(1, api_keys.API_VERSIONS, 0, ApiVersionsRequest())]
            answers = await asyncio.gather(*calls)
            assert client.connection(1) is conn
            for answer in answers[:-1]:
                assert [b.port for b in answer.brokers] == [broker.port]
            assert answers[-1].error_code == 0 and KRAFT_KEYS.isdisjoint(
                {a.api_key for a in answers[-1].api_keys}
            )
        finally:
            await client.close()
        assert client.connection(1) is None

    (uvloop.run if loop == "uvloop" else asyncio.run)(main())


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _serve(handler: Handler) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _read_request(reader: asyncio.StreamReader) -> tuple[int, int, int]:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    frame = await reader.readexactly(size)
    key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
    return key, version, correlation_id


def _api_versions_response(correlation_id: int) -> bytes:
    return codec.join(codec.encode_response(18, 0, correlation_id, codec.api_versions_body()))


def test_disconnect_fails_in_flight_requests_and_reconnects() -> None:
    async def main() -> None:
        served: list[tuple[int, int, int]] = []
        connections = []

        async def hang_up_after_two(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            connections.append(writer)
            for _ in range(2 if len(connections) == 1 else 1):
                served.append(await _read_request(reader))
            writer.close()

        server, port = await _serve(hang_up_after_two)
        client = NetworkClient({7: ("127.0.0.1", port)}, reconnect_backoff_ms=10)
        try:
            results = await asyncio.gather(
                client.send(7, 18, 0, ApiVersionsRequest()),
                client.send(7, 18, 0, ApiVersionsRequest()),
                return_exceptions=True,
            )
            assert [type(r) for r in results] == [DisconnectedError, DisconnectedError]
            assert [c for _, _, c in served] == [0, 1]  # pipelined, correlation ids in order
            # A new connection next time, with fresh correlation ids.
            with pytest.raises(DisconnectedError):
                await client.send(7, 18, 0, ApiVersionsRequest())
            assert len(connections) == 2 and served[-1][2] == 0
        finally:
            await client.close()
            server.close()

    asyncio.run(main())


def test_timeout_closes_the_connection() -> None:
    async def main() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _read_request(reader)
            await _read_request(reader)
            await reader.read()  # never answers

        server, port = await _serve(silent)
        client = NetworkClient({1: ("127.0.0.1", port)}, request_timeout_ms=150)
        try:
            start = time.monotonic()
            first = client.send(1, 18, 0, ApiVersionsRequest())
            second = client.send(1, 18, 0, ApiVersionsRequest(), timeout_ms=5000)
            results = await asyncio.gather(first, second, return_exceptions=True)
            elapsed = time.monotonic() - start
            assert isinstance(results[0], RequestTimeoutError)
            assert isinstance(results[1], DisconnectedError)  # closed behind the timed-out one
            assert 0.1 < elapsed < 2.0
            assert client.connection(1) is None
        finally:
            await client.close()
            server.close()

    asyncio.run(main())


def test_each_request_times_out_at_its_own_deadline_on_one_connection() -> None:
    """One timer watches a connection's requests: a request sent after another with a later
    deadline still times out at its own, and a request answered in time leaves no timeout
    behind for the requests sent after it."""

    async def main() -> None:
        async def answer_the_first_only(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            _, _, cid = await _read_request(reader)
            writer.write(_api_versions_response(cid))
            await reader.read()  # never answers again

        server, port = await _serve(answer_the_first_only)
        client = NetworkClient({1: ("127.0.0.1", port)})
        try:
            # answered well before its 300 ms: the next request's 3 s are its own
            await client.send(1, 18, 0, ApiVersionsRequest(), timeout_ms=300)
            late = asyncio.ensure_future(client.send(1, 18, 0, ApiVersionsRequest(), 3_000))
            await asyncio.sleep(0.6)
            assert not late.done(), "timed out at the answered request's deadline"
            # sent after `late`, due long before it
            early = client.send(1, 18, 0, ApiVersionsRequest(), timeout_ms=200)
            results = await asyncio.wait_for(
                asyncio.gather(early, late, return_exceptions=True), timeout=2.0
            )
            assert isinstance(results[0], RequestTimeoutError), results
            assert isinstance(results[1], DisconnectedError), results  # closed with it
        finally:
            await client.close()
            server.close()

    asyncio.run(main())


def test_responses_match_requests_in_order_and_wrong_correlation_breaks() -> None:
    async def main() -> None:
        async def answer_all_then_lie(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            ids = [(await _read_request(reader))[2] for _ in range(3)]
            await asyncio.sleep(0.05)  # all three in flight at once
            for cid in ids:
                writer.write(_api_versions_response(cid))
            _, _, cid = await _read_request(reader)
            writer.write(_api_versions_response(cid + 100))
            await writer.drain()
            await reader.read()

        server, port = await _serve(answer_all_then_lie)
        client = NetworkClient({1: ("127.0.0.1", port)})
        try:
            answers = await asyncio.gather(
                *[client.send(1, 18, 0, ApiVersionsRequest()) for _ in range(3)]
            )
            assert all(a.error_code == 0 and a.api_keys for a in answers)
            with pytest.raises(DisconnectedError, match="correlation id"):
                await client.send(1, 18, 0, ApiVersionsRequest())
        finally:
            await client.close()
            server.close()

    asyncio.run(main())


def test_reconnect_backoff_then_success_when_the_node_comes_up() -> None:
    async def main() -> None:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                try:
                    _, _, cid = await _read_request(reader)
                except asyncio.IncompleteReadError:
                    return
                writer.write(_api_versions_response(cid))

        # Reserve a port, then close it: nothing listens there yet.
        probe, port = await _serve(answer)
        probe.close()
        await probe.wait_closed()
        client = NetworkClient(
            {1: ("127.0.0.1", port)}, reconnect_backoff_ms=200, reconnect_backoff_max_ms=400
        )
        try:
            with pytest.raises(DisconnectedError, match="cannot connect"):
                await client.send(1, 18, 0, ApiVersionsRequest())
            start = time.monotonic()
            with pytest.raises(DisconnectedError):
                await client.send(1, 18, 0, ApiVersionsRequest())
            assert time.monotonic() - start >= 0.18  # waited out the backoff first
            server = await asyncio.start_server(answer, "127.0.0.1", port)
            try:
                start = time.monotonic()
                answer_body = await client.send(1, 18, 0, ApiVersionsRequest())
                assert answer_body.error_code == 0
                assert 0.3 <= time.monotonic() - start < 1.5  # the doubled backoff, 400 ms
                assert client.connection(1) is not None
            finally:
                await client.close()
                server.close()
        finally:
            await client.close()

    asyncio.run(main())


def test_close_fails_waiting_requests_and_refuses_new_ones() -> None:
    async def main() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()

        server, port = await _serve(silent)
        client = NetworkClient({1: ("127.0.0.1", port)})
        pending = asyncio.ensure_future(client.send(1, 18, 0, ApiVersionsRequest()))
        await asyncio.sleep(0.05)
        await client.close()
        with pytest.raises(DisconnectedError, match="client closed"):
            await pending
        with pytest.raises(DisconnectedError):
            await client.send(1, 18, 0, ApiVersionsRequest())
        server.close()

    asyncio.run(main())


def test_submitted_requests_answer_through_callbacks_in_order() -> None:
    """`submit` writes on the open connection at once and hands each answer (or the failure
    of a connection that closes) to its callback; with no connection open it sends nothing."""

    async def main() -> None:
        ready = asyncio.Event()

        async def answer_three_then_hang_up(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            for _ in range(3):
                _, _, cid = await _read_request(reader)
                writer.write(_api_versions_response(cid))
            ids = [(await _read_request(reader))[2] for _ in range(2)]
            writer.write(_api_versions_response(ids[0]))
            await writer.drain()
            await ready.wait()
            writer.close()

        server, port = await _serve(answer_three_then_hang_up)
        client = NetworkClient({1: ("127.0.0.1", port)})
        answers: list[tuple[str, Any]] = []

        def done(tag: str) -> Callable[[Any, BaseException | None], None]:
            def record(body: Any, error: BaseException | None) -> None:
                answers.append((tag, type(error) if error else body.error_code))

            return record

        try:
            assert not client.submit(1, 18, 0, ApiVersionsRequest(), None, done("x"))
            assert answers == []
            await client.send(1, 18, 0, ApiVersionsRequest())  # opens the connection
            assert client.submit(1, 18, 0, ApiVersionsRequest(), None, done("a"))
            assert client.submit(1, 18, 0, ApiVersionsRequest(), 5000, done("b"))
            while len(answers) < 2:
                await asyncio.sleep(0.01)
            assert answers == [("a", 0), ("b", 0)]
            assert client.submit(1, 18, 0, ApiVersionsRequest(), None, done("c"))
            assert client.submit(1, 18, 0, ApiVersionsRequest(), None, done("d"))
            while len(answers) < 3:
                await asyncio.sleep(0.01)
            ready.set()
            while len(answers) < 4:
                await asyncio.sleep(0.01)
            assert answers[2:] == [("c", 0), ("d", DisconnectedError)]
            assert client.connection(1) is None
            assert not client.submit(1, 18, 0, ApiVersionsRequest(), None, done("e"))
        finally:
            await client.close()
            server.close()

    asyncio.run(main())


def test_responses_split_across_reads_or_sharing_one_are_each_answered() -> None:
    """Frames arrive as the socket gives them: one answer in pieces, then two in one write;
    each reaches its request whole, in order."""

    async def main() -> None:
        async def in_pieces_then_together(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            _, _, cid = await _read_request(reader)
            whole = _api_versions_response(cid)
            for piece in (whole[:2], whole[2:7], whole[7:]):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.02)
            ids = [(await _read_request(reader))[2] for _ in range(2)]
            writer.write(b"".join(_api_versions_response(c) for c in ids))
            await writer.drain()
            await reader.read()

        server, port = await _serve(in_pieces_then_together)
        client = NetworkClient({1: ("127.0.0.1", port)})
        try:
            first = await client.send(1, 18, 0, ApiVersionsRequest())
            assert first.error_code == 0 and first.api_keys
            both = await asyncio.gather(
                *[client.send(1, 18, 0, ApiVersionsRequest()) for _ in range(2)]
            )
            assert [a.error_code for a in both] == [0, 0]
            assert all(a.api_keys == first.api_keys for a in both)
            conn = client.connection(1)
            assert conn is not None and conn.in_flight == 0
        finally:
            await client.close()
            server.close()

    asyncio.run(main())
