"""The PLAIN mechanism's server side (RFC 4616), with users from the listener's JAAS config.

    listener.name.sasl_plaintext.plain.sasl.jaas.config=\\
        org.apache.kafka.common.security.plain.PlainLoginModule required \\
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice";

Each `user_NAME="password"` option is a user (Kafka's PlainServerCallbackHandler); `username` /
`password` are what this node itself sends when it connects to others. The client's one token is
`authzid NUL authcid NUL passwd`; an authzid other than empty or the authcid is refused, as
Kafka does. Passwords are compared in constant time, and no message carries one.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from gregor.security.jaas import parse_jaas
from gregor.security.listener_config import ListenerConfig
from gregor.security.principal import USER_TYPE, KafkaPrincipal
from gregor.security.sasl_server import AuthenticationFailed

MECHANISM = "PLAIN"
INVALID = "Authentication failed: Invalid username or password"


class PlainServer:
    mechanism = MECHANISM

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._user: str | None = None

    @property
    def complete(self) -> bool:
        return self._user is not None

    def evaluate(self, token: bytes) -> bytes:
        if self._user is not None:
            raise AuthenticationFailed("Authentication failed: PLAIN takes one token")
        parts = bytes(token).split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed(
                "Authentication failed: Invalid SASL/PLAIN response: expected 3 tokens"
            )
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authentication failed: PLAIN token is not UTF-8") from None
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compared even for an unknown user, so the time taken does not tell which users exist
        good = hmac.compare_digest(
            (expected if expected is not None else "\x00" + password).encode(), password.encode()
        )
        claimed = KafkaPrincipal(USER_TYPE, username)
        if not good or expected is None:
            raise AuthenticationFailed(INVALID, claimed)
        if authzid and authzid != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different "
                "from username",
                claimed,
            )
        self._user = username
        return b""

    def principal(self) -> KafkaPrincipal:
        assert self._user is not None, "PLAIN exchange not complete"
        return KafkaPrincipal(USER_TYPE, self._user)

    def session_lifetime_ms(self) -> int | None:
        return None


def plain_users(config: ListenerConfig) -> dict[str, str]:
    """The `user_NAME` entries of the listener's PLAIN JAAS config ({} if none is set)."""
    raw = config.get("sasl.jaas.config", mechanism=MECHANISM)
    if not raw:
        return {}
    options = parse_jaas(raw).options
    return {k[5:]: v for k, v in options.items() if k.startswith("user_") and len(k) > 5}


def plain_server(config: ListenerConfig) -> PlainServer:
    return PlainServer(plain_users(config))
