"""The console's ASGI app (Starlette): its routes, its lifespan (the clients, the thread pool and
the sampler start and stop with it) and the error pages. web.py has the rules every answer
follows."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from importlib import resources

from confluent_kafka import KafkaException
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gregor.console import actions, login, pages, signin
from gregor.console.errors import ConsoleError, kafka_text
from gregor.console.settings import ConsoleSettings
from gregor.console.web import Console, SecurityHeaders, render


async def _console_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConsoleError)
    return render(request, "error.html", exc.status, message=str(exc), status=exc.status)


async def _sign_in_needed(request: Request, exc: Exception) -> Response:
    return RedirectResponse("/login", status_code=303)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "there is no such page" if exc.status_code == 404 else str(exc.detail)
    return render(request, "error.html", exc.status_code, message=message, status=exc.status_code)


async def _kafka_error(request: Request, exc: Exception) -> Response:
    """A client error no page turned into a ConsoleError: the cluster's answer, as a 503."""
    message = f"the cluster answered: {kafka_text(exc)}"
    return render(request, "error.html", 503, message=message, status=503)


def create_app(settings: ConsoleSettings) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        console = app.state.console = Console(settings)
        console.start()
        try:
            yield
        finally:
            await console.stop()

    static = str(resources.files("gregor.console") / "static")
    routes = [
        Route("/", pages.overview, name="overview"),
        Route("/login", signin.form, name="login_form"),
        Route("/login", signin.sign_in, methods=["POST"], name="login"),
        Route("/logout", signin.sign_out, methods=["POST"], name="logout"),
        Route("/topics", pages.topics, name="topics"),
        Route("/topics/{topic}", pages.topic, name="topic"),
        Route("/topics/{topic}/configs", actions.set_config, methods=["POST"], name="set_config"),
        Route("/topics/{topic}/messages", pages.messages, name="messages"),
        Route("/topics/{topic}/messages", actions.produce, methods=["POST"], name="produce"),
        Route("/groups", pages.groups, name="groups"),
        Route("/groups/{group:path}", pages.group, name="group"),
        Route("/groups/{group:path}", actions.reset_offsets, methods=["POST"], name="reset"),
        Mount("/static", StaticFiles(directory=static), name="static"),
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            login.SignInNeeded: _sign_in_needed,
            ConsoleError: _console_error,
            HTTPException: _http_error,
            KafkaException: _kafka_error,
        },
    )
    app.add_middleware(SecurityHeaders)
    return app
