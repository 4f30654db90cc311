"""The table of handlers: API key -> function. ApiVersions is answered from it, so an API is
advertised exactly when a handler for it is registered."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.protocol import api_keys

Handler = Callable[[RequestContext, Any], Any | Awaitable[Any]]

HANDLERS: dict[int, Handler] = {}

# A handler returns this when the request gets no response (Produce with acks=0).
NO_RESPONSE = object()


def handles(api_key: int) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if api_key in HANDLERS:
            raise RuntimeError(f"two handlers for API key {api_key}")
        HANDLERS[api_key] = fn
        return fn

    return register


def served() -> list[api_keys.ApiKey]:
    """The APIs we answer, with their version ranges, in key order."""
    return [a for a in api_keys.SUPPORTED if a.key in HANDLERS]
