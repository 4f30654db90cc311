"""What a listener's security protocol puts around its connections (each client listener has its
own): a TLS context (SSL, SASL_SSL), the principal of a TLS client (SSL: its certificate's name,
mapped by `ssl.principal.mapping.rules`; User:ANONYMOUS without a client certificate), and the
SASL exchange in front of the dispatcher (SASL_PLAINTEXT, SASL_SSL; sasl_gate.py).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from gregor.broker.config import BrokerConfig, Membership
from gregor.broker.sasl_gate import SaslGate
from gregor.metadata.config_defs import ConfigError
from gregor.runtime.client import ClientSecurity
from gregor.runtime.client_security import (
    CONTROLLER_MECHANISM,
    INTER_BROKER_MECHANISM,
    client_security,
)
from gregor.runtime.connection import Connection, Dispatcher
from gregor.runtime.tls import server_context
from gregor.security import mechanisms
from gregor.security.listener_config import ListenerConfig
from gregor.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal, set_principal
from gregor.security.ssl_principal import distinguished_name, map_principal_name, parse_rules

log = logging.getLogger("gregor.tls")

DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100


@dataclass
class ListenerSecurity:
    config: ListenerConfig
    tls: ssl.SSLContext | None
    on_secure: Callable[[Connection], None] | None
    failed_delay_ms: int

    dynamic_ssl: dict[str, str] = field(default_factory=dict)  # applied by reload_tls

    def reload_tls(self, dynamic: Mapping[str, str]) -> ssl.SSLContext | None:
        """A new TLS context if the dynamic `listener.name.<this>.ssl.*` configs changed (new
        connections use it); None if they did not, or if the new stores do not load (logged;
        the listener keeps the old ones)."""
        if self.tls is None:
            return None
        prefix = f"listener.name.{self.config.name.lower()}.ssl."
        wanted = {k: v for k, v in dynamic.items() if k.lower().startswith(prefix)}
        if wanted == self.dynamic_ssl:
            return None
        self.dynamic_ssl = wanted
        config = replace(self.config, values={**self.config.values, **wanted})
        try:
            context = server_context(config)
        except ConfigError as exc:
            log.error("listener %s: new TLS settings not applied: %s", self.config.name, exc)
            return None
        self.tls = context
        log.info("listener %s: TLS stores reloaded, new connections use them", self.config.name)
        return context

    def bind_node(self, scram_credential: Callable[..., object], now_ms: Callable[[], int]) -> None:
        """Give the mechanisms what they read of the node: SCRAM its credentials in the
        metadata image, OAUTHBEARER the clock. ConfigError if a mechanism cannot be served (a
        JWKS file that cannot be read, a bad sasl.oauthbearer.* setting)."""
        extras = {mechanisms.SCRAM_CREDENTIAL: scram_credential, mechanisms.NOW_MS: now_ms}
        self.config = replace(self.config, extras=extras)
        if self.config.uses_sasl:
            problem = mechanisms.check(self.config, self.config.sasl_mechanisms())
            if problem is not None:
                raise ConfigError(f"listener {self.config.name}: {problem}")

    def wrap(self, dispatch: Dispatcher) -> Dispatcher:
        """The dispatcher this listener's connections use."""
        if not self.config.uses_sasl:
            return dispatch
        return SaslGate(dispatch, self.config, self.failed_delay_ms)


@dataclass
class NodeSecurity:
    """A node's listeners' security and how it connects to the other nodes."""

    controller_listener: ListenerSecurity | None  # what its controller listener serves
    to_controllers: ClientSecurity | None  # how it connects to the controller listeners
    to_brokers: ClientSecurity | None  # how it connects to the brokers' inter-broker listener


def node_security(config: BrokerConfig, membership: Membership) -> NodeSecurity:
    """Built at start, for what the node's roles use: ConfigError naming a bad or missing
    setting."""
    controller = config.controller_listener_config()
    to_brokers = None
    if membership.is_broker:  # over the inter-broker listener
        to_brokers = client_security(config.inter_broker_listener_config(), INTER_BROKER_MECHANISM)
    return NodeSecurity(
        listener_security(controller) if membership.is_controller else None,
        client_security(controller, CONTROLLER_MECHANISM),
        to_brokers,
    )


def listener_security(config: ListenerConfig) -> ListenerSecurity:
    """Built at start: a bad ssl.* setting is a ConfigError naming it."""
    raw_delay = config.values.get("connection.failed.authentication.delay.ms", "")
    delay = int(raw_delay) if raw_delay.strip() else DEFAULT_FAILED_AUTHENTICATION_DELAY_MS
    if not config.uses_tls:
        return ListenerSecurity(config, None, None, delay)
    context = server_context(config)
    on_secure = None
    if config.protocol == "SSL":
        rules = parse_rules(config.get("ssl.principal.mapping.rules", default="DEFAULT"))

        def on_secure(conn: Connection) -> None:
            assert isinstance(conn.sock, ssl.SSLSocket)
            cert = conn.sock.getpeercert()
            principal = ANONYMOUS
            if cert:
                dn = distinguished_name(cert.get("subject", ()))  # type: ignore[arg-type]
                principal = KafkaPrincipal(USER_TYPE, map_principal_name(dn, rules))
            set_principal(conn.attributes, principal)

    return ListenerSecurity(config, context, on_secure, delay)
