"""The table of handlers: API key -> function. ApiVersions is answered from it, so an API is
advertised exactly when a handler for it is registered.

A handler returns its response, `NO_RESPONSE`, or a `Pending` of its response when the answer
must wait (a delayed produce or fetch in the purgatory, a coordinator's answer held until
replicated, a metadata write until committed): the caller sends it once it completes. No
handler awaits or touches an event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.protocol import api_keys
from gregor.replication.pending import Pending

Handler = Callable[[RequestContext, Any], Any]

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


def later(pending: Pending, translate: Callable[[Any], Any]) -> Pending:
    """A Pending of `translate(value)`, completed when `pending` is."""
    out = Pending(pending.what)
    pending.add_done_callback(lambda value: out.complete(translate(value)))
    return out
