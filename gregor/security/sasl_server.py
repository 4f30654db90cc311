"""The shape of one SASL mechanism's server side, as the connection's SASL exchange drives it.

A listener's connection creates one `SaslServer` per authentication (after SaslHandshake names
the mechanism) and feeds it each client token (the auth_bytes of SaslAuthenticate, or a raw
frame for a v0 handshake); it answers the next server token until `complete`. A wrong secret or
a malformed token raises `AuthenticationFailed`, whose message goes back to the client in
SASL_AUTHENTICATION_FAILED: it names what failed and never carries a secret. Mechanisms are pure
(no I/O, no clock reads): credentials come in through the lookups they are built with.
"""

from __future__ import annotations

from typing import Protocol

from gregor.security.principal import KafkaPrincipal


class AuthenticationFailed(Exception):
    """SASL_AUTHENTICATION_FAILED, with a message safe to send to the client and to log, and
    the principal the client claimed to be, when the mechanism got that far (for the log)."""

    def __init__(self, message: str, principal: KafkaPrincipal | None = None) -> None:
        super().__init__(message)
        self.principal = principal


class SaslServer(Protocol):
    @property
    def mechanism(self) -> str:
        """The mechanism's name as clients send it: PLAIN, SCRAM-SHA-256, OAUTHBEARER, ..."""

    @property
    def complete(self) -> bool:
        """True once the exchange succeeded; `principal` is then set."""

    def evaluate(self, token: bytes) -> bytes:
        """The server's answer to one client token; raises AuthenticationFailed."""

    def principal(self) -> KafkaPrincipal:
        """The authenticated principal (only once complete)."""

    def session_lifetime_ms(self) -> int | None:
        """How long the credential stays valid (an OAUTHBEARER token's expiry), else None."""
