"""Serving the app with uvicorn on a socket bound here (so port 0 is known before serving):
`gregor console` runs it as its process's one job, a node beside its broker on the same
event loop (without taking the node's signal handlers)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn

from gregor.console.app import create_app
from gregor.console.settings import ConsoleSettings

log = logging.getLogger("gregor.console")


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, own_signals: bool) -> None:
        super().__init__(config)
        self.own_signals = own_signals

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if self.own_signals:
            with super().capture_signals():
                yield
        else:
            yield


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (port 0: a free one) and listening, so a client that
    read the URL may connect at once (it waits in the backlog until the app serves); OSError
    when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class ConsoleServer:
    """The console on `sock` until `stop()` (or, with `own_signals`, SIGINT/SIGTERM)."""

    def __init__(self, settings: ConsoleSettings, sock: socket.socket, own_signals: bool) -> None:
        config = uvicorn.Config(
            create_app(settings),
            log_config=None,  # the process's logging, as it is (a node's, or the command's)
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
        self.sock, self.url = sock, url_of(sock)
        self.server = _Server(config, own_signals)
        self._task: asyncio.Task[None] | None = None

    async def serve(self) -> None:
        await self.server.serve(sockets=[self.sock])

    async def start(self) -> None:
        """Serve in the background; back once the app has started and the socket listens."""
        self._task = asyncio.ensure_future(self.serve())
        while not self.server.started and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()  # its failure, raised here
            raise RuntimeError("the console stopped as it started")

    async def stop(self) -> None:
        self.server.should_exit = True
        if self._task is not None:
            await self._task
