"""How a node connects to the other nodes' listeners, from its own settings for that listener
(as Kafka's inter-broker and controller clients): TLS with the listener's truststore (and its
keystore as the client certificate), SASL with the mechanism `sasl.mechanism.inter.broker.protocol`
(brokers) or `sasl.mechanism.controller.protocol` (controllers) names and the `username` /
`password` of that mechanism's JAAS config on the listener.
"""

from __future__ import annotations

from gregor.metadata.config_defs import ConfigError
from gregor.runtime.client import ClientSecurity
from gregor.runtime.tls import client_context
from gregor.security.jaas import parse_jaas
from gregor.security.listener_config import ListenerConfig
from gregor.security.sasl_client import CLIENTS

INTER_BROKER_MECHANISM = "sasl.mechanism.inter.broker.protocol"
CONTROLLER_MECHANISM = "sasl.mechanism.controller.protocol"
DEFAULT_MECHANISM = "GSSAPI"  # Kafka's default for both


def client_security(listener: ListenerConfig, mechanism_key: str) -> ClientSecurity | None:
    """None for a PLAINTEXT listener; ConfigError naming what is missing."""
    if listener.protocol == "PLAINTEXT":
        return None
    context = client_context(listener) if listener.uses_tls else None
    if not listener.uses_sasl:
        return ClientSecurity(context)
    mechanism = (listener.values.get(mechanism_key, "").strip() or DEFAULT_MECHANISM).upper()
    factory = CLIENTS.get(mechanism)
    if factory is None:
        raise ConfigError(
            f"{mechanism_key}={mechanism}: gregor's nodes authenticate to each other with "
            f"{', '.join(sorted(CLIENTS))}: set {mechanism_key}=PLAIN"
        )
    raw = listener.get("sasl.jaas.config", mechanism=mechanism)
    where = f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    try:
        options = parse_jaas(raw).options if raw else {}
        factory(options)  # checked now: a missing username stops the start
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc} (what this node sends to the others)") from None
    return ClientSecurity(context, mechanism, lambda: factory(options))
