"""The client side of a SASL mechanism, as a node uses it toward another node's listener.

Made from the JAAS options of the listener (`username`, `password`, ...); `initial()` is the
first token, `respond(server_token)` the next one, or None once the exchange is over. Pure. The
registry `CLIENTS` maps a mechanism's name to its factory, as `sasl.MECHANISMS` does servers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from gregor.security import mechanisms


class SaslClient(Protocol):
    def initial(self) -> bytes: ...

    def respond(self, token: bytes) -> bytes | None: ...


class PlainClient:
    """RFC 4616: one token, `NUL username NUL password`."""

    def __init__(self, options: Mapping[str, str]) -> None:
        username, password = options.get("username"), options.get("password")
        if not username or not password:
            raise ValueError("PLAIN needs username and password options in sasl.jaas.config")
        self._token = b"\x00" + username.encode() + b"\x00" + password.encode()

    def initial(self) -> bytes:
        return self._token

    def respond(self, token: bytes) -> bytes | None:
        return None


ClientFactory = Callable[[Mapping[str, str]], SaslClient]
CLIENTS: dict[str, ClientFactory] = {"PLAIN": PlainClient, **mechanisms.CLIENT_FACTORIES}


def register_client(name: str, factory: ClientFactory) -> None:
    CLIENTS[name.upper()] = factory
