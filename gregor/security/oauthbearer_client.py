"""The client side of OAUTHBEARER for connections made with gregor's own codec (the commands'
raw requests), with librdkafka's unsecured token settings:

    sasl.mechanism=OAUTHBEARER
    enable.sasl.oauthbearer.unsecure.jwt=true
    sasl.oauthbearer.config=principal=alice [lifeSeconds=3600] [principalClaimName=sub]

The token is an unsecured JWS (`"alg":"none"`) as librdkafka makes it: the principal claim,
`iat` now and `exp` lifeSeconds later; a listener with Kafka's default validator accepts it, one
checking signatures (a JWKS) refuses it. Signed tokens (`sasl.oauthbearer.method=oidc`) are not
fetched here: a ValueError says so in one line.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

MECHANISM = "OAUTHBEARER"
DEFAULT_LIFE_SECONDS = 3600


def _part(obj: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()


def unsecured_token(principal: str, now_ms: int, life_s: int = DEFAULT_LIFE_SECONDS,
                    claim: str = "sub") -> str:  # fmt: skip
    """An unsecured JWS naming `principal` in `claim`, valid from now for `life_s` seconds."""
    now_s = now_ms // 1000
    return f"{_part({'alg': 'none'})}.{_part({claim: principal, 'iat': now_s, 'exp': now_s + life_s})}."


class OAuthBearerClient:
    """RFC 7628: the initial response carries the token; a server that refuses it sends an
    error (JSON) which the client acknowledges with a lone 0x01, then the server fails the
    exchange (SASL_AUTHENTICATION_FAILED)."""

    def __init__(self, token: str) -> None:
        self._token = token

    def initial(self) -> bytes:
        return f"n,,\x01auth=Bearer {self._token}\x01\x01".encode()

    def respond(self, token: bytes) -> bytes | None:
        return b"\x01" if token else None


def _options(text: str) -> dict[str, str]:
    """librdkafka's `sasl.oauthbearer.config`: space-separated name=value pairs."""
    out = {}
    for item in text.split():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"sasl.oauthbearer.config: {item!r} is not name=value")
        out[name] = value
    return out


def oauthbearer_client(
    props: Mapping[str, Any], now_ms: Callable[[], int]
) -> Callable[[], OAuthBearerClient]:
    """A factory of clients presenting a fresh unsecured token on each connection, from the
    client properties; ValueError (one line) for settings it cannot honour."""
    method = str(props.get("sasl.oauthbearer.method", "default")).strip().lower()
    unsecure = str(props.get("enable.sasl.oauthbearer.unsecure.jwt", "false")).strip().lower()
    if method != "default" or unsecure != "true":
        raise ValueError(
            "sasl.mechanism=OAUTHBEARER: this command sends librdkafka's unsecured token only "
            "(enable.sasl.oauthbearer.unsecure.jwt=true, sasl.oauthbearer.config=principal=NAME)"
        )
    options = _options(str(props.get("sasl.oauthbearer.config", "")))
    principal = options.get("principal", "")
    if not principal:
        raise ValueError("sasl.oauthbearer.config needs principal=NAME for the unsecured token")
    try:
        life_s = int(options.get("lifeSeconds", DEFAULT_LIFE_SECONDS))
    except ValueError:
        raise ValueError("sasl.oauthbearer.config: lifeSeconds is not a number") from None
    claim = options.get("principalClaimName", "sub")
    return lambda: OAuthBearerClient(unsecured_token(principal, now_ms(), life_s, claim))
