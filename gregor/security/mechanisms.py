"""SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER as a listener's SASL registry takes mechanisms:
`factory(listener) -> SaslServer`, one server per authentication.

    for name, factory in FACTORIES.items():
        sasl.register(name, factory)
    for name, client in CLIENT_FACTORIES.items():      # a node's side toward another node's
        sasl_client.register_client(name, client)      # listener: JAAS options -> SaslClient

What each takes from the listener (anything with `get(key, mechanism)`, which resolves Kafka's
`listener.name.<l>.<mechanism>.` and `listener.name.<l>.` prefixes, and an `extras` mapping):

    SCRAM-SHA-256/512  extras["scram_credential"]: (user, mechanism) -> ScramCredential | None,
                       the node's metadata image (RaftMetadataStore.scram_credential)
    OAUTHBEARER        the listener's sasl.oauthbearer.* settings; extras["now_ms"]: the node's
                       clock. Its settings are checked and its JWKS file read on first use (or
                       by `check` at start-up), once per distinct settings, not per exchange.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gregor.security import oauthbearer
from gregor.security.oauthbearer import OAuthBearerConfig, OAuthBearerServer
from gregor.security.sasl_server import SaslServer
from gregor.security.scram import ScramClient, ScramServer

SCRAM_CREDENTIAL = "scram_credential"
NOW_MS = "now_ms"
_OAUTH_KEYS = (
    oauthbearer.JWKS_URL,
    oauthbearer.EXPECTED_AUDIENCE,
    oauthbearer.EXPECTED_ISSUER,
    oauthbearer.SUB_CLAIM_NAME,
    oauthbearer.CLOCK_SKEW_SECONDS,
)


class Listener(Protocol):
    @property
    def extras(self) -> Mapping[str, Any]: ...

    def get(self, key: str, mechanism: str | None = None, default: str = "") -> str: ...


def _scram(mechanism: str) -> Callable[[Listener], SaslServer]:
    def factory(listener: Listener) -> SaslServer:
        return ScramServer(mechanism, listener.extras[SCRAM_CREDENTIAL])

    return factory


@functools.lru_cache(maxsize=16)
def _oauth_config(settings: tuple[tuple[str, str], ...]) -> OAuthBearerConfig:
    configs = dict(settings)
    url = configs.get(oauthbearer.JWKS_URL)
    return oauthbearer.oauthbearer_config(configs, oauthbearer.read_jwks(url) if url else None)


def oauthbearer_settings(listener: Listener) -> dict[str, str]:
    """The listener's sasl.oauthbearer.* settings that are set."""
    found = {key: listener.get(key, oauthbearer.MECHANISM) for key in _OAUTH_KEYS}
    return {key: value for key, value in found.items() if value}


def _oauth(listener: Listener) -> SaslServer:
    config = _oauth_config(tuple(sorted(oauthbearer_settings(listener).items())))
    return OAuthBearerServer(config, listener.extras[NOW_MS])


def check(listener: Listener, mechanisms: list[str]) -> str | None:
    """What stops the listener's `mechanisms` of this module from being served (a JWKS file
    that cannot be read, a bad setting, a missing lookup), for a start-up error; None if fine."""
    extras = listener.extras
    if any(m.startswith("SCRAM-") for m in mechanisms) and SCRAM_CREDENTIAL not in extras:
        return "SCRAM needs the metadata image's credential lookup"
    if "OAUTHBEARER" in mechanisms:
        if NOW_MS not in extras:
            return "OAUTHBEARER needs the node's clock"
        try:
            _oauth_config(tuple(sorted(oauthbearer_settings(listener).items())))
        except (OSError, ValueError) as exc:
            return f"OAUTHBEARER: {exc}"
    return None


FACTORIES: dict[str, Callable[[Listener], SaslServer]] = {
    "SCRAM-SHA-256": _scram("SCRAM-SHA-256"),
    "SCRAM-SHA-512": _scram("SCRAM-SHA-512"),
    "OAUTHBEARER": _oauth,
}


def _scram_client(mechanism: str) -> Callable[[Mapping[str, str]], ScramClient]:
    return lambda options: ScramClient(mechanism, options)


CLIENT_FACTORIES: dict[str, Callable[[Mapping[str, str]], ScramClient]] = {
    "SCRAM-SHA-256": _scram_client("SCRAM-SHA-256"),
    "SCRAM-SHA-512": _scram_client("SCRAM-SHA-512"),
}
