"""The metrics listener (`metrics.listener`, e.g. `http://127.0.0.1:9644`): a small HTTP/1.1
server on the node's own event loop, so the collectors read broker state on the one thread that
changes it (prometheus_client's own server runs in a thread, which would race the loop).

    GET /metrics        Prometheus' text format (`generate_latest` over the node's registry)
    GET /health/live    200 `{"status": "live"}` while the process runs
    GET /health/ready   200 `{"status": "ready"}`, or 503 with the reason (metrics/health.py)

One request per connection (`Connection: close`), a request head of at most 8 KiB read within
10 s; anything else is 404 or 405. It also probes the loop's lag: a timer every 0.5 s, and how
late it ran is recorded (`gregor_event_loop_lag_seconds`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from gregor.metrics.stats import Window

log = logging.getLogger("gregor.metrics")

MAX_HEAD = 8192
READ_TIMEOUT_S = 10.0
PROBE_S = 0.5
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def parse_listener(value: str) -> tuple[str, int]:
    """`http://HOST:PORT` (or `HOST:PORT`) -> (host, port); ValueError names what is wrong."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme != "http":
        raise ValueError(f"{value!r}: only http:// is served")
    if parts.path not in ("", "/"):
        raise ValueError(f"{value!r}: give a host and port only (the paths are fixed)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{value!r}: the port is not a number from 0 to 65535") from None
    if port is None or parts.hostname is None:
        raise ValueError(f"{value!r}: expected http://HOST:PORT")
    return parts.hostname, port


class MetricsListener:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        ready: Callable[[], tuple[bool, str]],
        loop_lag: Window,
    ) -> None:
        self.host, self.port = host, port
        self.registry = registry
        self.ready = ready
        self.loop_lag = loop_lag
        self._server: asyncio.Server | None = None
        self._probe: asyncio.TimerHandle | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> str:
        """Listen; the URL bound (port 0 picks a free one)."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._arm(asyncio.get_running_loop())
        return self.url

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        due = loop.time() + PROBE_S
        self._probe = loop.call_at(due, self._on_probe, loop, due)

    def _on_probe(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        self.loop_lag.record(max(0.0, loop.time() - due) * 1000.0)
        self._arm(loop)

    async def stop(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            status, content_type, body = self._answer(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, content_type, body = 400, "text/plain", b"bad request\n"
        except ConnectionError:
            writer.close()
            return
        reason = _REASONS.get(status, "Bad Request")
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        try:
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def _answer(self, head: bytes) -> tuple[int, str, bytes]:
        """(status, content type, body) of a request head."""
        if len(head) > MAX_HEAD:
            return 400, "text/plain", b"request head too large\n"
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        path = rest.partition(" ")[0].partition("?")[0]
        if path not in ("/metrics", "/health/live", "/health/ready"):
            return 404, "text/plain", b"not found: try /metrics, /health/live, /health/ready\n"
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"only GET\n"
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)
        if path == "/health/live":
            return 200, "application/json", b'{"status": "live"}\n'
        ok, why = self.ready()
        body = json.dumps({"status": "ready" if ok else "not ready", "reason": why}) + "\n"
        return (200 if ok else 503), "application/json", body.encode()
