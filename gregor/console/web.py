"""What every page shares, and the rules every answer follows.

- Pages are rendered on the server by Jinja2 with autoescaping: a record value holding HTML is
  shown as text, never run. Every answer carries a Content-Security-Policy allowing only this
  console's own script and style, so even a markup mistake cannot run a script.
- Blocking client calls run on a thread pool of THREADS; the event loop only renders.
- A ConsoleError becomes a page with its message and status (4xx, or 503 when the cluster did
  not answer); bad input is never a server error.
- Writes (POST) need `read_only` off and the form's token, which only this console's pages
  carry (a page of another site cannot post to it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import parse_qs

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gregor.console import history, login, sampler
from gregor.console.cluster import Cluster
from gregor.console.errors import Forbidden, TooLarge
from gregor.console.settings import ConsoleSettings

log = logging.getLogger("gregor.console")
THREADS = 8
MAX_FORM_BYTES = 1024 * 1024
T = TypeVar("T")

SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; "
     b"img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
     b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]  # fmt: skip


class Console:
    """What every page shares: the settings, the clients, the pool and the sampled history."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.token = secrets.token_urlsafe(18)  # the forms' token
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="gregor-console")
        # with --login each session has its own clients, and nothing is sampled (no
        # credentials of the console's own to sample with)
        self.cluster = None if settings.login else Cluster(settings)
        self.sessions = login.Sessions()
        self.history = history.History(settings.history_samples)
        self._sampling: asyncio.Task[None] | None = None

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args))

    def start(self) -> None:
        if self.cluster is not None:
            self._sampling = asyncio.ensure_future(
                sampler.run(self.cluster, self.history, self.settings.sample_interval_s, self.call)
            )

    async def stop(self) -> None:
        if self._sampling is not None:
            self._sampling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampling
        for cluster in [self.cluster, *self.sessions.all()]:
            if cluster is not None:
                await self.call(cluster.close)
        self.pool.shutdown(wait=False, cancel_futures=True)


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every answer (a pure ASGI middleware)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers if scope["type"] == "http" else send)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _templates() -> Jinja2Templates:
    env = Environment(
        loader=PackageLoader("gregor.console", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["bytes"] = human_bytes
    return Jinja2Templates(env=env)


TEMPLATES = _templates()


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def cluster_of(request: Request) -> Cluster:
    """The clients this request reads and writes with: the console's, or with --login its
    session's (SignInNeeded without one)."""
    console = console_of(request)
    if console.cluster is not None:
        return console.cluster
    session = console.sessions.get(request.cookies.get(login.COOKIE))
    if session is None:
        raise login.SignInNeeded("sign in first")
    return session.cluster


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    console = console_of(request)
    user = None
    if console.settings.login:
        session = console.sessions.get(request.cookies.get(login.COOKIE))
        user = session.user if session is not None else None
    context.update(
        settings=console.settings,
        read_only=console.settings.read_only,
        token=console.token,
        user=user,
    )
    return TEMPLATES.TemplateResponse(request, template, context, status_code=status_code)


async def form_of(request: Request, write: bool = True) -> dict[str, str]:
    """A POSTed form (application/x-www-form-urlencoded) after the checks: writes allowed
    (for a `write`), the body at most MAX_FORM_BYTES, the token right."""
    console = console_of(request)
    if write and console.settings.read_only:
        raise Forbidden("this console is read-only (console.read.only=true)")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise TooLarge(f"the form is larger than {MAX_FORM_BYTES} bytes")
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    form = {k: v[0] for k, v in fields.items()}
    if not secrets.compare_digest(form.get("token", ""), console.token):
        raise Forbidden("the form's token is missing or stale: reload the page and try again")
    return form
