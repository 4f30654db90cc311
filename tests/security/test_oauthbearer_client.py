"""The OAUTHBEARER client of the commands' own connections (librdkafka's unsecured token
settings) against gregor's OAUTHBEARER server: accepted where unsecured tokens are, refused
with the RFC 7628 acknowledgement where they are not; settings it cannot honour are named."""

from __future__ import annotations

import pytest

from gregor.security.oauthbearer import OAuthBearerServer, oauthbearer_config
from gregor.security.oauthbearer_client import oauthbearer_client
from gregor.security.sasl_server import AuthenticationFailed

pytestmark = pytest.mark.unit

NOW_MS = 1_700_000_000_000
UNSECURED = {
    "sasl.mechanism": "OAUTHBEARER",
    "enable.sasl.oauthbearer.unsecure.jwt": "true",
    "sasl.oauthbearer.config": "principal=alice lifeSeconds=600",
}


def exchange(client_props: dict[str, str], server_now_ms: int) -> OAuthBearerServer:
    """The client's exchange with a server of Kafka's default validator, as the commands run
    it (authenticate: initial, then respond to each answer until None)."""
    client = oauthbearer_client(client_props, lambda: NOW_MS)()
    server = OAuthBearerServer(oauthbearer_config({}), lambda: server_now_ms)
    token: bytes | None = client.initial()
    while token is not None:
        token = client.respond(server.evaluate(token))
    return server


def test_an_unsecured_token_names_the_principal_for_its_life() -> None:
    server = exchange(UNSECURED, NOW_MS)
    assert server.complete and str(server.principal()) == "User:alice"
    assert server.session_lifetime_ms() == 600_000
    claim = {**UNSECURED, "sasl.oauthbearer.config": "principal=svc principalClaimName=cid"}
    with pytest.raises(AuthenticationFailed):  # the server reads `sub`, the token has `cid`
        exchange(claim, NOW_MS)


def test_an_expired_token_is_acknowledged_then_fails() -> None:
    with pytest.raises(AuthenticationFailed):
        exchange(UNSECURED, NOW_MS + 601_000)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"enable.sasl.oauthbearer.unsecure.jwt": "false"}, "unsecured token only"),
        ({"sasl.oauthbearer.method": "oidc"}, "unsecured token only"),
        ({"sasl.oauthbearer.config": "lifeSeconds=60"}, "needs principal=NAME"),
        ({"sasl.oauthbearer.config": "principal=a lifeSeconds=x"}, "lifeSeconds is not a number"),
        ({"sasl.oauthbearer.config": "principal"}, "is not name=value"),
    ],
)
def test_settings_it_cannot_honour_are_named(change: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        oauthbearer_client({**UNSECURED, **change}, lambda: NOW_MS)
