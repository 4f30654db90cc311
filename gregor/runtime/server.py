"""The listening socket and the set of live connections, on one event loop (uvloop if present).

`Server` accepts connections and hands each frame to the dispatcher the broker gives it; it
knows nothing of Kafka's APIs. It enforces `connections.max.idle.ms` with a periodic sweep and,
on `stop()`, stops accepting, waits (bounded) for in-flight requests to finish, then closes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable

from gregor.runtime.connection import Connection, Dispatcher

log = logging.getLogger("gregor.server")


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


class Server:
    def __init__(
        self,
        dispatch: Dispatcher,
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        max_request_bytes: int = 104857600,
        max_queued_requests: int = 500,
        max_idle_ms: int = 600000,
        clock: Callable[[], int] = now_ms,
        sock: socket.socket | None = None,
    ) -> None:
        self.dispatch = dispatch
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.max_queued_requests = max_queued_requests
        self.max_idle_ms = max_idle_ms
        self.clock = clock
        self.connections: set[Connection] = set()
        self._sock: socket.socket | None = sock  # bound already (see `bind`), or bound in start
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        sock = self._sock if self._sock is not None else bind(self.host, self.port)
        sock.listen(1024)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._loop.add_reader(sock.fileno(), self._accept)
        self._sweeper = asyncio.ensure_future(self._sweep_idle())
        log.info("listening on %s:%d", self.host, self.port)

    def _accept(self) -> None:
        assert self._sock is not None and self._loop is not None
        for _ in range(64):
            try:
                client, _addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("accept failed: %s", exc)
                return
            conn = Connection(
                client,
                self._loop,
                self.dispatch,
                max_request_bytes=self.max_request_bytes,
                max_queued_requests=self.max_queued_requests,
                on_close=self.connections.discard,
                now_ms=self.clock,
            )
            self.connections.add(conn)
            conn.start()

    async def _sweep_idle(self) -> None:
        interval = max(0.05, min(self.max_idle_ms / 4000.0, 10.0))
        while True:
            await asyncio.sleep(interval)
            cutoff = self.clock() - self.max_idle_ms
            for conn in list(self.connections):
                if conn.idle and conn.last_active_ms < cutoff:
                    conn.close(f"idle for more than connections.max.idle.ms ({self.max_idle_ms})")

    def stop_accepting(self) -> None:
        if self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
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
