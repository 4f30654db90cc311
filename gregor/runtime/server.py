"""The listening socket and the set of live connections, on one event loop (uvloop if present).

`Server` accepts connections and hands each frame to the dispatcher the broker gives it; it
knows nothing of Kafka's APIs. It enforces `connections.max.idle.ms` with a periodic sweep and,
on `stop()`, stops accepting, waits (bounded) for in-flight requests to finish, then closes.

What the connections may cost, all told (Kafka's ConnectionQuotas and MemoryPool):
- `max.connections` (broker-wide, the inter-broker listener exempt while there are others),
  `listener.name.<listener>.max.connections` (one listener), `max.connections.per.ip` and its
  overrides (an address over every listener): counted in `ConnectionQuotas`
  (connection_quotas.py), shared by the node's client listeners. At a limit a listener stops
  accepting (new clients wait in the listen backlog) until a connection closes; one over its
  address's limit is closed as soon as it is accepted; `max.connections` lowered below the
  connections open closes the least recently active (`reconfigure_servers`).
- `max.connection.creation.rate` (broker-wide, and per listener with the listener's prefix):
  a connection accepted over a rate is held, unread, for the delay the quotas name, and the
  listener accepts nothing meanwhile (Kafka's acceptor blocks the same way).
- the `ip` client quotas' `connection_creation_rate`: a connection over its address's rate is
  counted nowhere and closed after the delay the quotas name (the listener accepts on).
- `queued.max.request.bytes`: the bytes of requests being read and handled (`MemoryPool`).
- `accept()` failing for want of descriptors or memory (EMFILE, ENFILE, ...) would fail again at
  once, forever: the listener rests `ACCEPT_BACKOFF_S` before trying again.
Each of these logs one line at most every `LOG_EVERY_S`, with how often it happened.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any

from gregor.runtime.connection import Connection, Dispatcher, MemoryPool
from gregor.runtime.connection_quotas import (
    ConnectionLimits,
    ConnectionQuotas,
    address_key,
    connection_limits,
)
from gregor.runtime.slicing import run_in_slices
from gregor.security.quotas import Rate

log = logging.getLogger("gregor.server")

ACCEPT_BACKOFF_S = 0.25
METER_SAMPLES, METER_SAMPLE_MS = 2, 30_000  # Kafka's default MetricConfig
LOG_EVERY_S = 10.0
# accept() errors about one connection only (it was reset before we took it): take the next.
_PASSING_ACCEPT_ERRORS = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})


def now_ms() -> int:
    return int(time.time() * 1000)


def install_uvloop() -> bool:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), not yet listening: port 0 gets its number here, so a
    broker can register the port it will serve on before it serves."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def configured_server(
    dispatch: Dispatcher,
    host: str,
    port: int,
    value: Callable[[str], Any],
    sock: socket.socket | None = None,
    tls: ssl.SSLContext | None = None,
    on_secure: Callable[[Connection], None] | None = None,
    attributes: Mapping[str, Any] | None = None,
    quotas: ConnectionQuotas | None = None,
    listener: str = "",
) -> Server:
    """A client listener with the limits the broker's configs set (`value`: key -> typed);
    `tls` makes it a TLS listener, `on_secure` sees each connection once its handshake is done,
    `attributes` start each connection's state (e.g. the listener's name); `quotas`: the
    connection counts it shares with the node's other listeners, as `listener`."""
    return Server(
        dispatch,
        host=host,
        port=port,
        sock=sock,
        max_request_bytes=int(value("socket.request.max.bytes")),
        max_queued_requests=int(value("queued.max.requests")),
        max_queued_request_bytes=int(value("queued.max.request.bytes")),
        max_idle_ms=int(value("connections.max.idle.ms")),
        tls=tls,
        on_secure=on_secure,
        attributes=attributes,
        quotas=quotas or ConnectionQuotas(connection_limits(value), window=rate_window(value)),
        listener=listener,
    )


def rate_window(value: Callable[[str], Any]) -> tuple[int, int]:
    """The connection rates' window: (`quota.window.num`, `quota.window.size.seconds` in ms)."""
    return int(value("quota.window.num")), int(value("quota.window.size.seconds")) * 1000


class EveryFew:
    """A log line for a recurring event at most once per `interval_s`, with the count of events
    since the last line (`emit(count)`)."""

    def __init__(self, interval_s: float = LOG_EVERY_S) -> None:
        self.interval_s = interval_s
        self._last = -interval_s
        self._held = 0

    def __call__(self, emit: Callable[[int], None]) -> None:
        self._held += 1
        now = time.monotonic()
        if now - self._last >= self.interval_s:
            emit(self._held)
            self._held, self._last = 0, now


class Server:
    def __init__(
        self,
        dispatch: Dispatcher,
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        max_request_bytes: int = 104857600,
        max_queued_requests: int = 500,
        max_queued_request_bytes: int = -1,
        max_idle_ms: int = 600000,
        limits: ConnectionLimits | None = None,
        clock: Callable[[], int] = now_ms,
        sock: socket.socket | None = None,
        tls: ssl.SSLContext | None = None,
        on_secure: Callable[[Connection], None] | None = None,
        attributes: Mapping[str, Any] | None = None,
        quotas: ConnectionQuotas | None = None,
        listener: str = "",
    ) -> None:
        """`quotas`: the connection counts shared with other listeners, this one counted as
        `listener` (without: counts of its own, under `limits`)."""
        self.dispatch = dispatch
        self.tls = tls
        self.on_secure = on_secure
        self.attributes = dict(attributes or {})  # each connection's state starts with these
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.max_queued_requests = max_queued_requests
        self.max_queued_request_bytes = max_queued_request_bytes
        self.max_idle_ms = max_idle_ms
        self.listener = listener
        self.quotas = quotas or ConnectionQuotas(limits or ConnectionLimits())
        self.clock = clock
        self.connections: set[Connection] = set()
        self._closed_bytes = (0, 0)  # read and sent by connections closed so far
        self.opened = 0  # connections served so far (Kafka's connection-creation-total)
        self.closed = 0  # and closed (connection-close-total)
        # their rates (connection-creation-rate, connection-close-rate): Kafka's Selector
        # meters, over its default metric window (2 samples of 30 s)
        self.opened_rate = Rate(METER_SAMPLES, METER_SAMPLE_MS)
        self.closed_rate = Rate(METER_SAMPLES, METER_SAMPLE_MS)
        self.pool: MemoryPool | None = None
        self._ip_of: dict[Connection, str] = {}
        self._sock: socket.socket | None = sock  # bound already (see `bind`), or bound in start
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._accepting = False
        self._backoff: asyncio.TimerHandle | None = None
        # a connection accepted over the creation rate, held until `_throttle` ends
        self._held: tuple[socket.socket, str] | None = None
        self._throttle: asyncio.TimerHandle | None = None
        self._held_since_ns = 0
        self.blocked_ns = 0  # time spent holding connections (Kafka's AcceptorBlockedPercent)
        self._log_accept_failed = EveryFew()
        self._log_at_limit = EveryFew()
        self._log_rejected = EveryFew()
        self._log_ip_throttled = EveryFew()
        self.quotas.add_listener(listener, self._update_accepting)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        sock = self._sock if self._sock is not None else bind(self.host, self.port)
        sock.listen(1024)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        if self.max_queued_request_bytes > 0:
            self.pool = MemoryPool(self.max_queued_request_bytes, self._loop.call_soon)
        self._update_accepting()
        self._sweeper = asyncio.ensure_future(self._sweep_idle())
        log.info("listening on %s:%d%s", self.host, self.port, " (TLS)" if self.tls else "")

    @property
    def limits(self) -> ConnectionLimits:
        return self.quotas.limits

    def reconfigure(self, limits: ConnectionLimits) -> None:
        """New connection limits (a server counting on its own; the node's client listeners
        together: `reconfigure_servers`)."""
        reconfigure_servers(self.quotas, [self], limits)

    def _update_accepting(self) -> None:
        """Read the listening socket unless resting after a failed accept, at max.connections
        or holding a connection over the creation rate (served here once its delay is over
        and a slot is free)."""
        if self._held is not None and self._throttle is None:
            if self._sock is not None and self.quotas.slot_available(self.listener):
                client, ip = self._held
                self._held = None
                self.blocked_ns += time.monotonic_ns() - self._held_since_ns
                self._admit(client, ip)
        want = (
            self._sock is not None
            and self._backoff is None
            and self._held is None
            and self.quotas.slot_available(self.listener)
        )
        if want == self._accepting or self._loop is None or self._sock is None:
            return
        if want:
            self._loop.add_reader(self._sock.fileno(), self._accept)
        else:
            self._loop.remove_reader(self._sock.fileno())
        self._accepting = want

    def _accept(self) -> None:
        assert self._sock is not None and self._loop is not None
        for _ in range(64):
            if not self.quotas.slot_available(self.listener):
                self._at_max_connections()
                return
            try:
                client, addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _PASSING_ACCEPT_ERRORS:
                    continue
                self._accept_failed(exc)
                return
            ip = address_key(addr[0])
            delay = self.quotas.creation_delay_ms(self.listener, self.clock())
            if delay > 0:
                self._hold(client, ip, delay)
                return
            self._admit(client, ip)

    def _admit(self, client: socket.socket, ip: str) -> None:
        """Count and serve an accepted connection; one over its address's creation rate is
        closed after the delay the quotas name, one at its address's limit at once."""
        assert self._loop is not None
        throttle = self.quotas.ip_throttle_ms(self.listener, ip, self.clock())
        if throttle > 0:
            self._ip_throttled(ip, throttle)
            self._loop.call_later(throttle / 1000.0, client.close)
            return
        limit = self.quotas.admit(self.listener, ip)
        if limit is not None:
            client.close()
            self._rejected(ip, limit)
            return
        self._open(client, ip)

    def _hold(self, client: socket.socket, ip: str, delay_ms: int) -> None:
        """Over the connection creation rate: serve `client` after `delay_ms`, accept nothing
        meanwhile."""
        assert self._loop is not None
        self._held = (client, ip)
        self._held_since_ns = time.monotonic_ns()
        self._throttle = self._loop.call_later(delay_ms / 1000.0, self._end_throttle)
        self._update_accepting()

    def _end_throttle(self) -> None:
        self._throttle = None
        self._update_accepting()

    def _open(self, client: socket.socket, ip: str) -> None:
        assert self._loop is not None
        conn = Connection(
            client,
            self._loop,
            self.dispatch,
            max_request_bytes=self.max_request_bytes,
            max_queued_requests=self.max_queued_requests,
            on_close=self._on_closed,
            now_ms=self.clock,
            pool=self.pool,
            tls=self.tls,
            on_secure=self.on_secure,
        )
        conn.attributes.update(self.attributes)
        self.connections.add(conn)
        self.opened += 1
        self.opened_rate.record(1.0, self.clock())
        self._ip_of[conn] = ip
        conn.start()

    def socket_bytes(self) -> tuple[int, int]:
        """Bytes read and sent by every connection so far (closed ones too)."""
        read, sent = self._closed_bytes
        for conn in self.connections:
            read, sent = read + conn.bytes_in, sent + conn.bytes_out
        return read, sent

    def connection_totals(self) -> tuple[int, int]:
        """Connections (served, closed) so far."""
        return self.opened, self.closed

    def connection_rates(self) -> tuple[float, float]:
        """Connections (served, closed) per second lately."""
        now = self.clock()
        return self.opened_rate.measure(now), self.closed_rate.measure(now)

    def _on_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.closed += 1
        self.closed_rate.record(1.0, self.clock())
        read, sent = self._closed_bytes
        self._closed_bytes = (read + conn.bytes_in, sent + conn.bytes_out)
        ip = self._ip_of.pop(conn, None)
        if ip is not None:
            self.quotas.release(self.listener, ip)  # wakes every listener sharing the counts
        else:
            self._update_accepting()

    def _rejected(self, ip: str, limit: int) -> None:
        self._log_rejected(
            lambda n: log.info(
                "Rejected connection from %s, address already has the configured maximum of %d "
                "connections (%d rejected since the last such line)",
                ip,
                limit,
                n,
            )
        )

    def _ip_throttled(self, ip: str, delay_ms: int) -> None:
        self._log_ip_throttled(
            lambda n: log.info(
                "Connection from %s over its connection_creation_rate: closing it in %d ms "
                "(%d such since the last line)",
                ip,
                delay_ms,
                n,
            )
        )

    def _at_max_connections(self) -> None:
        limit = self.quotas.blocking_limit(self.listener)
        self._log_at_limit(
            lambda n: log.info(
                "%s reached on %s:%d: not accepting until a connection closes "
                "(%d time(s) since the last such line)",
                limit,
                self.host,
                self.port,
                n,
            )
        )
        self._update_accepting()

    def _accept_failed(self, exc: OSError) -> None:
        """Out of descriptors (or memory): the same accept would fail again at once, in a loop
        that starves every client. Rest the listener instead; pending clients wait in the
        backlog and are taken once a descriptor is free."""
        assert self._loop is not None
        self._log_accept_failed(
            lambda n: log.warning(
                "accept failed: %s (%d time(s) since the last such line); "
                "not accepting for %d ms at each failure",
                exc,
                n,
                int(ACCEPT_BACKOFF_S * 1000),
            )
        )
        self._backoff = self._loop.call_later(ACCEPT_BACKOFF_S, self._end_backoff)
        self._update_accepting()

    def _end_backoff(self) -> None:
        self._backoff = None
        self._update_accepting()

    async def _sweep_idle(self) -> None:
        interval = max(0.05, min(self.max_idle_ms / 4000.0, 10.0))
        while True:
            await asyncio.sleep(interval)
            await run_in_slices(self.idle_sweep_steps(self.clock() - self.max_idle_ms))

    def idle_sweep_steps(self, cutoff_ms: float) -> Generator[None, None, int]:
        """Close the connections idle since before `cutoff_ms`, a step per connection (run in
        slices: thousands of connections would hold the loop for milliseconds); how many."""
        closed = 0
        for conn in list(self.connections):
            if not conn.closed and conn.idle and conn.last_active_ms < cutoff_ms:
                conn.close(f"idle for more than connections.max.idle.ms ({self.max_idle_ms})")
                closed += 1
            yield
        return closed

    def stop_accepting(self) -> None:
        if self._backoff is not None:
            self._backoff.cancel()
            self._backoff = None
        if self._throttle is not None:
            self._throttle.cancel()
            self._throttle = None
        if self._held is not None:
            self._held[0].close()
            self._held = None
        if self._sock is not None and self._loop is not None:
            if self._accepting:
                self._loop.remove_reader(self._sock.fileno())
                self._accepting = False
            self._sock.close()
            self._sock = None

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish (up to `grace_s`), close the rest."""
        self.stop_accepting()
        if self._sweeper is not None:
            self._sweeper.cancel()
        deadline = time.monotonic() + grace_s
        while any(not c.idle for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.close(None)


def reconfigure_servers(
    quotas: ConnectionQuotas, servers: Iterable[Server], limits: ConnectionLimits
) -> None:
    """New connection limits (dynamic broker configs) for `servers`, which share `quotas`, for
    the connections accepted from now on; over the new `max.connections`, the least recently
    active connections of the listeners it binds are closed (Kafka's processors close their
    least recently active one at a time while the broker is over)."""
    if limits == quotas.limits:
        return
    excess = quotas.reconfigure(limits)
    if excess <= 0:
        return
    closable = [
        conn
        for server in servers
        if quotas.closable(server.listener)
        for conn in server.connections
        if not conn.closed
    ]
    closable.sort(key=lambda c: c.last_active_ms)
    log.info(
        "max.connections is %d: closing %d connection(s)",
        limits.max_connections,
        min(excess, len(closable)),
    )
    for conn in closable[:excess]:
        conn.close("max.connections was lowered")
