"""A connection's SASL exchange on a SASL listener: which requests it may send, and the answers,
as Kafka's SaslServerAuthenticator. Sans-I/O: the listener's driver decodes the frames, asks
here, encodes what comes back and closes the connection when told.

    state          allowed requests                      next
    HANDSHAKE      ApiVersions, SaslHandshake            AUTHENTICATE (v1), RAW_TOKENS (v0),
                                                         FAILED (mechanism not enabled)
    AUTHENTICATE   SaslAuthenticate                      COMPLETE, FAILED
    RAW_TOKENS     a size-prefixed token, no header      COMPLETE, FAILED
    COMPLETE       every request (the handlers answer SaslHandshake / SaslAuthenticate with
                   ILLEGAL_SASL_STATE)
    FAILED         nothing: the connection closes (after connection.failed.authentication.delay.ms)

A request not allowed in its state is ILLEGAL_SASL_STATE and closes the connection, as Kafka.

Mechanisms: `MECHANISMS` maps a name to a factory `(ListenerConfig) -> SaslServer`; a mechanism
joins with one `register("NAME", factory)` (or an entry below).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gregor.protocol import api_keys, errors
from gregor.security import mechanisms
from gregor.security.listener_config import ListenerConfig
from gregor.security.plain import plain_server
from gregor.security.principal import KafkaPrincipal
from gregor.security.sasl_server import AuthenticationFailed, SaslServer

MechanismFactory = Callable[[ListenerConfig], SaslServer]
MECHANISMS: dict[str, MechanismFactory] = {"PLAIN": plain_server, **mechanisms.FACTORIES}

SASL_AUTHENTICATION_FAILED = errors.BY_NAME["SASL_AUTHENTICATION_FAILED"].code
UNSUPPORTED_SASL_MECHANISM = errors.BY_NAME["UNSUPPORTED_SASL_MECHANISM"].code
ILLEGAL_SASL_STATE = errors.BY_NAME["ILLEGAL_SASL_STATE"].code
NONE = errors.NONE

HANDSHAKE, AUTHENTICATE, RAW_TOKENS, COMPLETE, FAILED = (
    "HANDSHAKE",
    "AUTHENTICATE",
    "RAW_TOKENS",
    "COMPLETE",
    "FAILED",
)
_ALLOWED = {
    HANDSHAKE: frozenset({api_keys.API_VERSIONS, api_keys.SASL_HANDSHAKE}),
    AUTHENTICATE: frozenset({api_keys.SASL_AUTHENTICATE}),
}


def register(name: str, factory: MechanismFactory) -> None:
    """Make a mechanism available to `sasl.enabled.mechanisms`."""
    MECHANISMS[name.upper()] = factory


def supported_mechanisms() -> frozenset[str]:
    return frozenset(MECHANISMS)


@dataclass(frozen=True)
class HandshakeAnswer:
    error_code: int
    mechanisms: list[str]
    close: bool  # after sending it


@dataclass(frozen=True)
class AuthenticateAnswer:
    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int
    principal: KafkaPrincipal | None  # once the exchange completed; if it failed, the claimed one
    failed: bool  # close after connection.failed.authentication.delay.ms


class SaslSession:
    """One connection's exchange (the state table in the module docstring)."""

    def __init__(self, config: ListenerConfig) -> None:
        self.config = config
        self.enabled = [m for m in config.sasl_mechanisms() if m in MECHANISMS]
        self.state = HANDSHAKE
        self.mechanism: str | None = None
        self._server: SaslServer | None = None

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    @property
    def raw_tokens(self) -> bool:
        """The next frame is a bare token (after a SaslHandshake v0)."""
        return self.state == RAW_TOKENS

    def allows(self, api_key: int) -> bool:
        return self.state == COMPLETE or api_key in _ALLOWED.get(self.state, frozenset())

    def illegal(self, api_name: str) -> str:
        """Why a request is refused in this state (the connection then closes)."""
        self.state = FAILED
        return f"Unexpected Kafka request of type {api_name} during SASL handshake"

    def handshake(self, mechanism: str, version: int) -> HandshakeAnswer:
        assert self.state == HANDSHAKE, self.state
        if mechanism not in self.enabled:
            self.state = FAILED
            return HandshakeAnswer(UNSUPPORTED_SASL_MECHANISM, list(self.enabled), True)
        self.mechanism = mechanism
        self._server = MECHANISMS[mechanism](self.config)
        self.state = AUTHENTICATE if version >= 1 else RAW_TOKENS
        return HandshakeAnswer(NONE, list(self.enabled), False)

    def authenticate(self, token: bytes) -> AuthenticateAnswer:
        assert self.state in (AUTHENTICATE, RAW_TOKENS) and self._server is not None
        try:
            answer = self._server.evaluate(token)
        except AuthenticationFailed as exc:
            self.state = FAILED
            return AuthenticateAnswer(
                SASL_AUTHENTICATION_FAILED, str(exc), b"", 0, exc.principal, True
            )
        if not self._server.complete:
            return AuthenticateAnswer(NONE, None, answer, 0, None, False)
        self.state = COMPLETE
        lifetime = self._server.session_lifetime_ms() or 0
        return AuthenticateAnswer(NONE, None, answer, lifetime, self._server.principal(), False)
