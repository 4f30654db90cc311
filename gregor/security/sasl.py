"""A connection's SASL exchange on a SASL listener: which requests it may send, and the answers,
as Kafka's SaslServerAuthenticator. Sans-I/O: the listener's driver decodes the frames, asks
here, encodes what comes back and closes the connection when told.

    state          allowed requests                      next
    HANDSHAKE      ApiVersions, SaslHandshake            AUTHENTICATE (v1), RAW_TOKENS (v0),
                                                         FAILED (mechanism not enabled)
    AUTHENTICATE   SaslAuthenticate                      COMPLETE, FAILED
    RAW_TOKENS     a size-prefixed token, no header      COMPLETE, FAILED
    COMPLETE       every request (the handlers answer SaslHandshake / SaslAuthenticate with
                   ILLEGAL_SASL_STATE); a SaslHandshake  REAUTH_HANDSHAKE
                   that `begin_reauthentication` takes
    REAUTH_HANDSHAKE  SaslHandshake                      AUTHENTICATE, RAW_TOKENS,
                                                         REAUTH_BAD_MECHANISM, FAILED
    REAUTH_BAD_MECHANISM  SaslAuthenticate               FAILED (unanswered, as Kafka)
    FAILED         nothing: the connection closes (after connection.failed.authentication.delay.ms)

A request not allowed in its state is ILLEGAL_SASL_STATE and closes the connection, as Kafka.

Re-authentication (KIP-368), as Kafka's SaslServerAuthenticator: a session gets a lifetime when
`connections.max.reauth.ms` (per listener and mechanism, as `listener.name.<l>.<mechanism>.
connections.max.reauth.ms`) is above 0 or its credential expires (an OAUTHBEARER token): the
smaller of the two, sent in SaslAuthenticate (v1+). Before it ends the client may run
SaslHandshake and SaslAuthenticate again on the live connection (at most once a second; with the
same mechanism, else the next SaslAuthenticate fails unanswered; as the same principal, else
SASL_AUTHENTICATION_FAILED). A session past its end takes no request but a SaslHandshake that
re-authenticates: `expired(now_ms)` tells the driver to close the connection unanswered.

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
REAUTH_HANDSHAKE, REAUTH_BAD_MECHANISM = "REAUTH_HANDSHAKE", "REAUTH_BAD_MECHANISM"
_ALLOWED = {
    HANDSHAKE: frozenset({api_keys.API_VERSIONS, api_keys.SASL_HANDSHAKE}),
    AUTHENTICATE: frozenset({api_keys.SASL_AUTHENTICATE}),
    REAUTH_HANDSHAKE: frozenset({api_keys.SASL_HANDSHAKE}),
    REAUTH_BAD_MECHANISM: frozenset({api_keys.SASL_AUTHENTICATE}),
}
MAX_REAUTH_KEY = "connections.max.reauth.ms"
MIN_REAUTH_INTERVAL_MS = 1000  # Kafka's: one re-authentication a second at most


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
    answered: bool = True  # False: the failure is not answered (a changed mechanism)
    reauthenticated: bool = False  # the exchange renewed an authenticated session


def max_reauth_ms(config: ListenerConfig, mechanism: str) -> int:
    """`connections.max.reauth.ms` for a mechanism on this listener (0: no limit)."""
    return int(config.get(MAX_REAUTH_KEY, mechanism, default="0"))


class SaslSession:
    """One connection's exchange (the state table in the module docstring)."""

    def __init__(self, config: ListenerConfig) -> None:
        self.config = config
        self.enabled = [m for m in config.sasl_mechanisms() if m in MECHANISMS]
        self.state = HANDSHAKE
        self.mechanism: str | None = None
        self._server: SaslServer | None = None
        self.expires_at_ms: int | None = None  # the session's end, if it has one
        self._previous: tuple[str, KafkaPrincipal] | None = None  # while re-authenticating
        self._principal: KafkaPrincipal | None = None
        self._last_reauth_ms: int | None = None

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    @property
    def raw_tokens(self) -> bool:
        """The next frame is a bare token (after a SaslHandshake v0)."""
        return self.state == RAW_TOKENS

    @property
    def principal(self) -> KafkaPrincipal | None:
        """Who the session authenticated (None before it did)."""
        return self._principal

    @property
    def reauthenticating(self) -> bool:
        return self._previous is not None

    def allows(self, api_key: int) -> bool:
        return self.state == COMPLETE or api_key in _ALLOWED.get(self.state, frozenset())

    def illegal(self, api_name: str) -> str:
        """Why a request is refused in this state (the connection then closes)."""
        self.state = FAILED
        return f"Unexpected Kafka request of type {api_name} during SASL handshake"

    def expired(self, now_ms: int) -> bool:
        """The session has ended: the connection's next request (but a SaslHandshake that
        `begin_reauthentication` takes) closes it unanswered."""
        return self.expires_at_ms is not None and now_ms > self.expires_at_ms

    def begin_reauthentication(self, now_ms: int) -> bool:
        """Whether a SaslHandshake on an authenticated connection starts re-authenticating:
        only a session with an end, at most once a second (else the handlers answer it
        ILLEGAL_SASL_STATE, as Kafka)."""
        assert self.state == COMPLETE and self.mechanism and self._principal
        if self.expires_at_ms is None:
            return False
        last = self._last_reauth_ms
        if last is not None and now_ms - last < MIN_REAUTH_INTERVAL_MS:
            return False
        self._last_reauth_ms = now_ms
        self._previous = (self.mechanism, self._principal)
        self.state = REAUTH_HANDSHAKE
        return True

    def handshake(self, mechanism: str, version: int) -> HandshakeAnswer:
        assert self.state in (HANDSHAKE, REAUTH_HANDSHAKE), self.state
        if mechanism not in self.enabled:
            self.state = FAILED
            return HandshakeAnswer(UNSUPPORTED_SASL_MECHANISM, list(self.enabled), True)
        if self._previous is not None and self._previous[0] != mechanism:
            self.mechanism = mechanism
            self.state = REAUTH_BAD_MECHANISM  # fails at the next token, as Kafka
            return HandshakeAnswer(NONE, list(self.enabled), False)
        self.mechanism = mechanism
        self._server = MECHANISMS[mechanism](self.config)
        self.state = AUTHENTICATE if version >= 1 else RAW_TOKENS
        return HandshakeAnswer(NONE, list(self.enabled), False)

    def authenticate(self, token: bytes, now_ms: int) -> AuthenticateAnswer:
        if self.state == REAUTH_BAD_MECHANISM:
            assert self._previous is not None
            self.state = FAILED
            why = (
                f"SASL mechanism '{self.mechanism}' requested by client is not supported "
                f"for re-authentication of mechanism '{self._previous[0]}'"
            )
            return AuthenticateAnswer(
                SASL_AUTHENTICATION_FAILED, why, b"", 0, self._previous[1], True, answered=False
            )
        assert self.state in (AUTHENTICATE, RAW_TOKENS) and self._server is not None
        try:
            answer = self._server.evaluate(token)
            if self._server.complete:
                self._ensure_principal_unchanged(self._server.principal())
        except AuthenticationFailed as exc:
            self.state = FAILED
            return AuthenticateAnswer(
                SASL_AUTHENTICATION_FAILED, str(exc), b"", 0, exc.principal, True
            )
        if not self._server.complete:
            return AuthenticateAnswer(NONE, None, answer, 0, None, False)
        self.state = COMPLETE
        self._principal = principal = self._server.principal()
        lifetime = self._session_lifetime_ms(now_ms)
        renewed, self._previous = self._previous is not None, None
        return AuthenticateAnswer(NONE, None, answer, lifetime, principal, False, True, renewed)

    def _ensure_principal_unchanged(self, principal: KafkaPrincipal) -> None:
        if self._previous is None or self._previous[1] == principal:
            return
        was = self._previous[1]
        raise AuthenticationFailed(
            f"Cannot change principals during re-authentication from "
            f"{was.principal_type}.{was.name}: {principal.principal_type}.{principal.name}",
            principal,
        )

    def _session_lifetime_ms(self, now_ms: int) -> int:
        """Kafka's rule: the credential's remaining life, `connections.max.reauth.ms` when above
        0, the smaller of both when both; none (0, no end) when neither."""
        assert self._server is not None and self.mechanism is not None
        credential = self._server.session_lifetime_ms()
        limit = max_reauth_ms(self.config, self.mechanism)
        bounds = [b for b in (credential, limit if limit > 0 else None) if b is not None]
        if not bounds:
            self.expires_at_ms = None
            return 0
        lifetime = max(0, min(bounds))
        self.expires_at_ms = now_ms + lifetime
        return lifetime
