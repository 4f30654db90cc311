"""The client side of our wire protocol, for requests from one node to another (brokers to the
controller, controllers to each other): one TCP connection per destination node, on the running
event loop (asyncio or uvloop, through a protocol that hands each response frame over as it
arrives, with no reading task).

    client = NetworkClient({1: ("127.0.0.1", 9093)}, client_id="raft-2")
    body = await client.send(1, api_keys.VOTE, 2, request_body)      # the decoded response
    await client.close()

A connection is pipelined: a request is written as soon as it is sent (at most
`max_in_flight` per connection), and since a Kafka server answers a connection's requests in
order, each response frame belongs to the oldest request in flight; its correlation id must
match, or the connection is broken. Headers are ours (`codec.encode_request`): request header
v1 or v2 and response header v0 or v1 by the API's flexible versions; correlation ids count up
per connection. `submit` is the lighter way for a caller that reacts to answers: written at
once on an open connection, the answer handed to a callback, with no task or future.

Failures: a request not answered within its timeout fails with `RequestTimeoutError` and closes
the connection (the responses behind it can no longer be told apart; one timer per connection
watches the timeouts, at the earliest deadline in flight); every other request in
flight on a closed connection fails with `DisconnectedError`. The next send to that node opens a
new connection, but not before the reconnect backoff has passed since the last failure: it
starts at `reconnect_backoff_ms`, doubles with each failure up to `reconnect_backoff_max_ms`,
and resets on a successful connect. With `api_versions=True` every new connection first asks
ApiVersions (v3) and keeps the node's answer (`NodeConnection.api_versions`).

Security (`ClientSecurity`): a TLS context wraps each connection, and a SASL mechanism
authenticates it (SaslHandshake v1, then SaslAuthenticate v1 until the mechanism is done)
before any request; a refusal fails the connection like any other (`DisconnectedError`). A SASL
session with a lifetime (the broker's `connections.max.reauth.ms`, KIP-368) is not renewed in
place: at 85% of it the next request opens a new connection, and the old one closes once its
answers are in, so no request meets an expired session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl
import struct
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from gregor.protocol import api_keys, codec
from gregor.protocol.exceptions import ProtocolError
from gregor.security.sasl_client import SaslClient

log = logging.getLogger("gregor.client")

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024  # a bigger frame means a broken stream, not a response
RENEW_AT = 0.85  # of a SASL session's lifetime: the connection is replaced then (KIP-368)
TIMER_SLACK_S = 0.001  # a timer may fire this much before its time (the loop's resolution)


def _collect(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class ClientError(Exception):
    """A request that got no response."""


class DisconnectedError(ClientError, ConnectionError):
    """The connection closed (or could not open) before the response came."""


class RequestTimeoutError(ClientError, TimeoutError):
    """No response within the request's timeout; the connection was closed."""


@dataclass(frozen=True)
class ClientSecurity:
    """How this node connects to a listener of another: TLS, SASL, or both."""

    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    sasl_client: Callable[[], SaslClient] | None = None


# What a request sent by `NodeConnection.submit` calls once: (the response body, None) or
# (None, the ClientError it failed with)
Done = Callable[[Any, BaseException | None], None]
# A submitted request is written at once only while the connection's unsent bytes are below this
# (else it waits for the socket, through `send`)
SUBMIT_MAX_BUFFERED = 64 * 1024


@dataclass(slots=True)
class _InFlight:
    """A request in flight: its answer goes to `future` (`send`) or to `done` (`submit`)."""

    correlation_id: int
    api_key: int
    api_version: int
    future: asyncio.Future[Any] | None
    deadline: float = 0.0  # the loop time it times out at
    timeout_ms: int = 0
    done: Done | None = None

    @property
    def settled(self) -> bool:
        return self.future.done() if self.future is not None else self.done is None

    def succeed(self, body: Any) -> None:
        if self.future is not None:
            if not self.future.done():
                self.future.set_result(body)
        elif self.done is not None:
            done, self.done = self.done, None
            _call(done, body, None)

    def fail(self, exc: BaseException) -> None:
        if self.future is not None:
            if not self.future.done():
                self.future.set_exception(exc)
        elif self.done is not None:
            done, self.done = self.done, None
            _call(done, None, exc)


def _call(done: Done, body: Any, exc: BaseException | None) -> None:
    try:
        done(body, exc)
    except Exception:
        log.exception("a request's answer could not be handled")


class _Frames(asyncio.Protocol):
    """A connection's bytes: each whole response frame goes to the connection as it arrives
    (in the event loop's callback, no reading task between), and the writing side's pauses
    are kept for `drain`."""

    def __init__(self) -> None:
        self.connection: NodeConnection | None = None
        self.transport: asyncio.Transport | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._buffer = bytearray()
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        conn = self.connection
        if conn is not None:
            self.frames(conn)

    def frames(self, conn: NodeConnection) -> None:
        """Hand every whole frame buffered to `conn`; a broken stream closes it."""
        buffer = self._buffer
        pos, have = 0, len(buffer)
        try:
            while have - pos >= 4 and not conn.closed:
                (size,) = _SIZE.unpack_from(buffer, pos)
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    raise ProtocolError(f"bad response size {size}")
                end = pos + 4 + size
                if end > have:
                    break
                conn._on_frame(buffer[pos + 4 : end])
                pos = end
        except (ProtocolError, ValueError) as e:
            buffer.clear()
            conn.close(DisconnectedError(f"{conn.label}: {e}"))
            return
        del buffer[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        self._wake_writers(exc or ConnectionResetError("connection lost"))
        conn = self.connection
        if conn is not None:
            why = "connection closed by peer" if exc is None else str(exc)
            conn.close(DisconnectedError(f"{conn.label}: {why}"))

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writers(None)

    def _wake_writers(self, exc: Exception | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)

    async def drain(self) -> None:
        """Return once the socket takes more (at once unless the transport paused us)."""
        if self.lost.done():
            raise ConnectionResetError("connection lost")
        if not self._paused:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter


class NodeConnection:
    """One open connection to one node. Made by `NodeConnection.open`; used by NetworkClient."""

    def __init__(
        self,
        frames: _Frames,
        *,
        client_id: str | None,
        max_in_flight: int,
        label: str,
    ) -> None:
        assert frames.transport is not None
        self._frames = frames
        self._transport = frames.transport
        # The loop the connection lives on: `asyncio.get_running_loop()` is a getpid system
        # call (CPython's check for a fork), one per request sent otherwise.
        self._loop = frames.lost.get_loop()
        self._max_in_flight = max_in_flight
        self._client_id = client_id
        self.label = label  # host:port, in errors
        self._next_correlation_id = 0
        self._in_flight: deque[_InFlight] = deque()
        self._slots = asyncio.Semaphore(max_in_flight)
        self._senders = 0  # `send`s under way: only they take or wait for slots
        # One timer for every request's timeout: it fires at the earliest deadline in flight
        # (an answered request leaves it armed; it then looks again at what is in flight).
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_at = math.inf
        self._closed: BaseException | None = None
        self.api_versions: dict[int, tuple[int, int]] | None = None
        # KIP-368: the loop time after which no request goes out here (a SASL session ending);
        # the next one opens a new connection, and this one closes once its answers are in.
        self.renew_at: float | None = None
        self._retiring = False
        frames.connection = self
        frames.frames(self)  # anything that came before
        if frames.lost.done():
            self.close(DisconnectedError(f"{label}: connection closed by peer"))

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str | None = None,
        connect_timeout_ms: int = 10000,
        max_in_flight: int = 100,
        security: ClientSecurity | None = None,
    ) -> NodeConnection:
        tls = security.ssl_context if security is not None else None
        loop = asyncio.get_running_loop()
        try:
            _, frames = await asyncio.wait_for(
                loop.create_connection(
                    _Frames, host, port, ssl=tls, server_hostname=host if tls else None
                ),
                connect_timeout_ms / 1000,
            )
        except (OSError, TimeoutError) as e:
            raise DisconnectedError(f"cannot connect to {host}:{port}: {e}") from e
        conn = cls(frames, client_id=client_id, max_in_flight=max_in_flight, label=f"{host}:{port}")
        if security is not None and security.sasl_client is not None:
            try:
                await conn.authenticate(security, connect_timeout_ms)
            except BaseException:
                conn.close()
                raise
        return conn

    async def authenticate(self, security: ClientSecurity, timeout_ms: int) -> None:
        """The SASL exchange (SaslHandshake v1, SaslAuthenticate v1); ClientError if refused."""
        assert security.sasl_client is not None and security.sasl_mechanism is not None
        shake = codec.message_class(api_keys.SASL_HANDSHAKE, "request")
        answer = await self.send(
            api_keys.SASL_HANDSHAKE, 1, shake(mechanism=security.sasl_mechanism), timeout_ms
        )
        if answer.error_code != 0:
            raise DisconnectedError(
                f"{self.label}: SASL mechanism {security.sasl_mechanism} refused (error "
                f"{answer.error_code}; enabled: {', '.join(answer.mechanisms)})"
            )
        client = security.sasl_client()
        token: bytes | None = client.initial()
        authenticate = codec.message_class(api_keys.SASL_AUTHENTICATE, "request")
        while token is not None:
            answer = await self.send(
                api_keys.SASL_AUTHENTICATE, 1, authenticate(auth_bytes=token), timeout_ms
            )
            if answer.error_code != 0:
                raise DisconnectedError(
                    f"{self.label}: SASL authentication failed: {answer.error_message}"
                )
            token = client.respond(bytes(answer.auth_bytes))
        lifetime_ms = getattr(answer, "session_lifetime_ms", 0)  # SaslAuthenticate v1+
        if lifetime_ms > 0:
            self.renew_at = asyncio.get_running_loop().time() + lifetime_ms * RENEW_AT / 1000

    @property
    def expiring(self) -> bool:
        """The session is near its end: send nothing more on this connection."""
        return self.renew_at is not None and asyncio.get_running_loop().time() >= self.renew_at

    def retire(self) -> None:
        """Send nothing more; close once the answers in flight are in."""
        self._retiring = True
        if not self._in_flight:
            self.close(DisconnectedError(f"{self.label}: SASL session renewed"))

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def send(self, api_key: int, api_version: int, body: Any, timeout_ms: int) -> Any:
        """Write one request and wait for its decoded response body."""
        if self._closed is not None:
            raise DisconnectedError(f"{self.label}: connection closed") from self._closed
        self._senders += 1
        try:
            async with self._slots:
                if self._closed is not None:
                    raise DisconnectedError(f"{self.label}: connection closed") from self._closed
                correlation_id = self._next_correlation_id
                self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
                buffers = codec.encode_request(
                    api_key, api_version, correlation_id, self._client_id, body
                )
                loop = self._loop
                future: asyncio.Future[Any] = loop.create_future()
                entry = _InFlight(correlation_id, api_key, api_version, future)
                self._watch(loop, entry, timeout_ms)
                # Written and queued with no await between: the queue is in wire order.
                self._transport.writelines(buffers)
                self._in_flight.append(entry)
                try:
                    await self._frames.drain()
                except (OSError, RuntimeError) as e:
                    self.close(DisconnectedError(f"{self.label}: write failed: {e}"))
                return await future
        finally:
            self._senders -= 1

    def submit(
        self, api_key: int, api_version: int, body: Any, timeout_ms: int, done: Done
    ) -> bool:
        """Write one request now and call `done` with its answer (from the reading of the
        response, or of the failure), with no task or future: the lighter path of a caller that
        reacts to answers (a sans-I/O core's driver). False, with nothing sent, when the
        connection cannot take it at once (closed, renewing its session, at its requests in
        flight, or its socket behind): `send` then waits for it."""
        if (
            self._closed is not None
            or self._retiring
            or (self._senders and self._slots.locked())
            or len(self._in_flight) >= self._max_in_flight
            or self._transport.get_write_buffer_size() > SUBMIT_MAX_BUFFERED
        ):
            return False
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        buffers = codec.encode_request(api_key, api_version, correlation_id, self._client_id, body)
        entry = _InFlight(correlation_id, api_key, api_version, None, done=done)
        self._watch(self._loop, entry, timeout_ms)
        self._in_flight.append(entry)
        try:
            self._transport.writelines(buffers)
        except (OSError, RuntimeError) as e:
            self.close(DisconnectedError(f"{self.label}: write failed: {e}"))
        return True

    async def handshake(self, timeout_ms: int) -> dict[int, tuple[int, int]]:
        """ApiVersions v3: remember which versions of which APIs the node serves."""
        cls = codec.message_class(api_keys.API_VERSIONS, "request")
        body = cls(client_software_name="gregor", client_software_version="0")
        answer = await self.send(api_keys.API_VERSIONS, 3, body, timeout_ms)
        if answer.error_code != 0:
            raise ClientError(f"{self.label}: ApiVersions error {answer.error_code}")
        self.api_versions = {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
        return self.api_versions

    def _watch(self, loop: asyncio.AbstractEventLoop, entry: _InFlight, timeout_ms: int) -> None:
        """Give `entry` its deadline; the watchdog fires by then."""
        entry.timeout_ms = timeout_ms
        entry.deadline = deadline = loop.time() + timeout_ms / 1000
        if deadline < self._watchdog_at:
            if self._watchdog is not None:
                self._watchdog.cancel()
            self._watchdog_at = deadline
            self._watchdog = loop.call_at(deadline, self._on_watchdog)

    def _on_watchdog(self) -> None:
        """Time out the first request in flight past its deadline, or look again at the
        earliest deadline in flight."""
        self._watchdog, self._watchdog_at = None, math.inf
        if self._closed is not None:
            return
        loop = self._loop
        now = loop.time() + TIMER_SLACK_S
        earliest = math.inf
        for entry in self._in_flight:
            if entry.settled:
                continue  # a `send` whose caller gave up: its answer is still read
            if entry.deadline <= now:
                self._on_timeout(entry, entry.timeout_ms)
                return
            earliest = min(earliest, entry.deadline)
        if earliest < math.inf:
            self._watchdog_at = earliest
            self._watchdog = loop.call_at(earliest, self._on_watchdog)

    def _on_timeout(self, entry: _InFlight, timeout_ms: int) -> None:
        if entry.settled:
            return
        entry.fail(
            RequestTimeoutError(
                f"{self.label}: no response to {api_keys.name_of(entry.api_key)} "
                f"(correlation id {entry.correlation_id}) in {timeout_ms} ms"
            )
        )
        self.close(DisconnectedError(f"{self.label}: closed after a request timed out"))

    def _on_frame(self, frame: bytearray) -> None:
        if not self._in_flight:
            raise ProtocolError("a response with no request in flight")
        entry = self._in_flight[0]
        (correlation_id,) = _SIZE.unpack_from(frame, 0)
        if correlation_id != entry.correlation_id:
            raise ProtocolError(f"correlation id {correlation_id}, expected {entry.correlation_id}")
        self._in_flight.popleft()
        try:
            _, body = codec.decode_response(entry.api_key, entry.api_version, frame)
        except ProtocolError as e:
            entry.fail(ClientError(f"{self.label}: {e}"))
            raise
        entry.succeed(body)
        if self._retiring and not self._in_flight:
            self.close(DisconnectedError(f"{self.label}: SASL session renewed"))

    def close(self, reason: BaseException | None = None) -> None:
        """Close now; every request still in flight fails with `reason` (DisconnectedError)."""
        if self._closed is not None:
            return
        self._closed = reason or DisconnectedError(f"{self.label}: closed")
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self._in_flight:
            entry = self._in_flight.popleft()
            entry.fail(self._closed)
        self._transport.close()

    async def wait_closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._frames.lost


@dataclass(slots=True)
class _Node:
    host: str
    port: int
    connection: NodeConnection | None = None
    connecting: asyncio.Future[NodeConnection] | None = None
    failures: int = 0
    retry_at: float = 0.0  # loop time before which no new connection is tried


class NetworkClient:
    """Requests to nodes by id, over one lazily opened connection per node."""

    def __init__(
        self,
        endpoints: Mapping[int, tuple[str, int]] | None = None,
        *,
        client_id: str | None = "gregor",
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        max_in_flight: int = 100,
        api_versions: bool = False,
        security: ClientSecurity | None = None,
    ) -> None:
        self._nodes: dict[int, _Node] = {}
        self.security = security
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.max_in_flight = max_in_flight
        self.api_versions = api_versions
        self._closed = False
        for node_id, (host, port) in (endpoints or {}).items():
            self.set_endpoint(node_id, host, port)

    def set_endpoint(self, node_id: int, host: str, port: int) -> None:
        """Where `node_id` listens; a changed address drops the old connection."""
        node = self._nodes.get(node_id)
        if node is not None and (node.host, node.port) == (host, port):
            return
        if node is not None and node.connection is not None:
            node.connection.close()
        self._nodes[node_id] = _Node(host, port)

    def connection(self, node_id: int) -> NodeConnection | None:
        node = self._nodes.get(node_id)
        conn = node.connection if node is not None else None
        return conn if conn is not None and not conn.closed else None

    async def send(
        self, node_id: int, api_key: int, api_version: int, body: Any, timeout_ms: int | None = None
    ) -> Any:
        """Send one request to `node_id` and return its decoded response body.

        Raises DisconnectedError (no connection, or it closed first), RequestTimeoutError, or
        KeyError for a node with no endpoint."""
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        conn = await self._connection(node_id, timeout)
        return await conn.send(api_key, api_version, body, timeout)

    def submit(
        self,
        node_id: int,
        api_key: int,
        api_version: int,
        body: Any,
        timeout_ms: int | None,
        done: Done,
    ) -> bool:
        """`NodeConnection.submit` on the node's open connection; False, with nothing sent,
        when there is none ready for it (`send` opens or waits for one)."""
        node = self._nodes.get(node_id)
        conn = node.connection if node is not None and not self._closed else None
        if conn is None or conn.closed or conn.expiring:
            return False
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        return conn.submit(api_key, api_version, body, timeout, done)

    async def _connection(self, node_id: int, timeout_ms: int) -> NodeConnection:
        if self._closed:
            raise DisconnectedError("client closed")
        node = self._nodes[node_id]
        conn = node.connection
        if conn is not None and not conn.closed:
            if not conn.expiring:
                return conn
            conn.retire()  # its SASL session ends soon: the next requests go on a new one
            node.connection = None
        if node.connecting is None:
            node.connecting = asyncio.ensure_future(self._connect(node_id, node))
            # Its failure reaches whoever awaits it; a caller cancelled meanwhile (a request
            # timeout) leaves none, and the failure is collected here instead of being logged
            # as never retrieved.
            node.connecting.add_done_callback(_collect)
        return await asyncio.shield(node.connecting)

    async def _connect(self, node_id: int, node: _Node) -> NodeConnection:
        loop = asyncio.get_running_loop()
        try:
            delay = node.retry_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            conn = await NodeConnection.open(
                node.host,
                node.port,
                client_id=self.client_id,
                connect_timeout_ms=self.connect_timeout_ms,
                max_in_flight=self.max_in_flight,
                security=self.security,
            )
            if self.api_versions:
                try:
                    await conn.handshake(self.connect_timeout_ms)
                except ClientError:
                    conn.close()
                    raise
        except ClientError as e:
            node.failures += 1
            backoff = min(
                self.reconnect_backoff_ms * 2 ** (node.failures - 1), self.reconnect_backoff_max_ms
            )
            node.retry_at = loop.time() + backoff / 1000
            log.debug("node %d: %s (next try in %d ms)", node_id, e, backoff)
            raise
        finally:
            node.connecting = None
        if self._closed or self._nodes.get(node_id) is not node:
            conn.close()
            raise DisconnectedError("client closed")
        node.failures = 0
        node.retry_at = 0.0
        node.connection = conn
        return conn

    async def close(self) -> None:
        """Close every connection; requests in flight fail with DisconnectedError."""
        self._closed = True
        conns = []
        for node in self._nodes.values():
            if node.connecting is not None:
                node.connecting.cancel()
            if node.connection is not None:
                node.connection.close(DisconnectedError("client closed"))
                conns.append(node.connection)
        for conn in conns:
            await conn.wait_closed()
