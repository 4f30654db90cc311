"""Security settings a node is given: what gregor honours passes, the rest is refused (fail
closed), naming the first setting it cannot honour:

    a client listener             each is served with its own protocol: PLAINTEXT, SSL,
                                  SASL_PLAINTEXT or SASL_SSL (from listener.security.protocol.map,
                                  else its own name); refused: one without a protocol, two of one
                                  name, an advertised listener not in listeners
    a controller listener         any protocol but PLAINTEXT (the controllers' traffic)
    inter.broker.listener.name    a name that is not a client listener; set together with
                                  security.inter.broker.protocol (Kafka refuses both)
    security.inter.broker.protocol   no client listener of that name or protocol
    sasl.enabled.mechanisms       a mechanism gregor has no server for (GSSAPI, Kafka's default
                                  when a SASL listener names none); PLAIN without user_ entries
    ssl.* / sasl.* (bare or under listener.name.<listener>[.<mechanism>].) not in SUPPORTED,
                                  ssl.keystore.type / ssl.truststore.type other than PEM
    principal.builder.class       (principals come from the listener: TLS names, SASL users)

Brokers talk to each other over one client listener (`inter_broker_listener`): the one
inter.broker.listener.name names; else the listener named as security.inter.broker.protocol
(Kafka's rule), else the first of that protocol; with neither set, the listener named PLAINTEXT,
else the first client listener (a node with one listener of any name talks over it).

A setting given an empty value asks for nothing and passes. Without a map entry, a listener
named as a protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) is that protocol, and a
controller listener is PLAINTEXT, as in Kafka's KRaft mode. Pure: strings in, a ConfigError
(one line) out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gregor.metadata.config_defs import ConfigError
from gregor.metadata.listener_configs import SECURITY_CONFIGS
from gregor.security.jaas import parse_jaas
from gregor.security.listener_config import PROTOCOLS as _PROTOCOLS
from gregor.security.listener_config import ListenerConfig, protocol_of
from gregor.security.plain import plain_users
from gregor.security.sasl import supported_mechanisms

PROTOCOLS = frozenset(_PROTOCOLS)
# authorizer.class.name (Kafka's StandardAuthorizer), super.users and
# allow.everyone.if.no.acl.found are broker configs: ACLs (gregor/security/authorizer.py).
SECURITY_KEYS = ("principal.builder.class",)
INTER_BROKER_KEYS = ("security.inter.broker.protocol", "inter.broker.listener.name")
# The ssl.* and sasl.* settings gregor honours (per listener too); the rest are refused.
SUPPORTED = frozenset(SECURITY_CONFIGS)
PEM_ONLY = ("ssl.keystore.type", "ssl.truststore.type")
# sasl.* / ssl.*, bare or under listener.name.<listener>. or listener.name.<listener>.<mechanism>.
_SECURITY_PREFIX = re.compile(r"^(listener\.name\.[^.]+\.([^.]+\.)?)?(sasl|ssl)\.", re.IGNORECASE)
# connections.max.reauth.ms per listener, or per listener and mechanism (KIP-368).
_LISTENER_REAUTH = re.compile(
    r"^listener\.name\.[^.]+\.([^.]+\.)?connections\.max\.reauth\.ms$", re.IGNORECASE
)
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"
PRINCIPAL_BUILDER_NOT_SUPPORTED = "custom principal builders are not supported"


def check_security(values: Mapping[str, str]) -> None:
    """ConfigError naming the first setting gregor cannot honour (the module docstring)."""
    protocols = protocol_map(values)
    controller_names = _names(values.get("controller.listener.names", "CONTROLLER"))
    client: list[tuple[str, str]] = []  # (name, protocol)
    names: dict[str, set[str]] = {}
    for key, default in (("listeners", DEFAULT_LISTENERS), ("advertised.listeners", "")):
        for spec in _entries(values.get(key) or default):
            name, sep, _ = spec.partition("://")
            name = name.strip().upper() if sep else "PLAINTEXT"
            protocol = protocol_of(name, protocols, controller_names)
            if protocol is None:
                raise ConfigError(
                    f"{key}: listener {name} ({spec}) has no security protocol in "
                    f"listener.security.protocol.map: map it to one, e.g. "
                    f"listener.security.protocol.map={name}:PLAINTEXT"
                )
            if name in names.setdefault(key, set()):
                raise ConfigError(f"{key}: listener {name} is named twice: each needs a name")
            names[key].add(name)
            if key != "listeners":
                if name not in names["listeners"] and name not in controller_names:
                    raise ConfigError(
                        f"advertised.listeners: listener {name} ({spec}) is not in listeners: "
                        "advertise only listeners the node has"
                    )
            elif name in controller_names:
                _check_mechanisms(ListenerConfig(name, protocol, values))
            else:
                client.append((name, protocol))
    _check_keys(values)
    if client:
        inter_broker_listener(values, client)
    for name, protocol in client:
        _check_mechanisms(ListenerConfig(name, protocol, values))


def inter_broker_listener(values: Mapping[str, str], client: list[tuple[str, str]]) -> str:
    """The client listener brokers talk over (the module docstring), from the (name, protocol)
    of each client listener in order; ConfigError, one line, if the settings name none."""
    inter = values.get("security.inter.broker.protocol", "").strip().upper()
    inter_name = values.get("inter.broker.listener.name", "").strip().upper()
    shown = ",".join(n for n, _ in client)
    if inter and inter_name:
        raise ConfigError(
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should "
            f"be set (inter.broker.listener.name={inter_name}, security.inter.broker.protocol="
            f"{inter})"
        )
    if inter_name:
        if inter_name not in (n for n, _ in client):
            raise ConfigError(
                f"inter.broker.listener.name={inter_name} must be a listener name defined in "
                f"listeners: the client listeners are {shown}"
            )
        return inter_name
    if inter:
        by_name = [n for n, _ in client if n == inter]
        by_protocol = [n for n, p in client if p == inter]
        if not by_name and not by_protocol:
            raise ConfigError(
                f"security.inter.broker.protocol={inter}: no client listener is named so or "
                f"uses it (listeners {shown}): remove it, or set inter.broker.listener.name"
            )
        return (by_name or by_protocol)[0]
    return next((n for n, _ in client if n == "PLAINTEXT"), client[0][0])


def _check_mechanisms(config: ListenerConfig) -> None:
    """A SASL listener's mechanisms: each served, PLAIN with users."""
    name = config.name
    if not config.uses_sasl:
        return
    known = supported_mechanisms()
    for mechanism in config.sasl_mechanisms():
        if mechanism not in known:
            raise ConfigError(
                f"sasl.enabled.mechanisms: listener {name} enables {mechanism} (Kafka's default "
                f"is GSSAPI), which gregor does not support: set sasl.enabled.mechanisms to "
                f"{', '.join(sorted(known))}"
            )
    if "PLAIN" in config.sasl_mechanisms():
        try:
            users = plain_users(config)
        except ValueError as exc:
            raise ConfigError(
                f"listener.name.{name.lower()}.plain.sasl.jaas.config: {exc}"
            ) from None
        if not users:
            raise ConfigError(
                f"listener {name} enables PLAIN but no user: set listener.name.{name.lower()}"
                '.plain.sasl.jaas.config with user_NAME="password" entries'
            )


def _check_keys(values: Mapping[str, str]) -> None:
    for key, value in values.items():
        if not value.strip():
            continue  # an empty value asks for nothing
        if key in SECURITY_KEYS:
            raise ConfigError(
                f"{key} is set, but {PRINCIPAL_BUILDER_NOT_SUPPORTED}: remove it (the node would otherwise "
                "run without the security it asks for)"
            )
        if _LISTENER_REAUTH.match(key):
            _check_long(key, value)
            continue
        found = _SECURITY_PREFIX.match(key)
        if found is None:
            continue
        bare = key[len(found[1] or "") :].lower()
        if bare not in SUPPORTED:
            raise ConfigError(
                f"{key} is set, but gregor does not support {bare}: remove it (the node would "
                "otherwise run without the security it asks for)"
            )
        if bare in PEM_ONLY and value.strip().upper() != "PEM":
            raise ConfigError(f"{key}={value.strip()}: gregor reads PEM only: convert it to PEM")
        if bare == "sasl.jaas.config":
            try:
                parse_jaas(value)
            except ValueError as exc:
                raise ConfigError(f"{key}: {exc}") from None


def _check_long(key: str, value: str) -> None:
    try:
        int(value.strip())
    except ValueError:
        raise ConfigError(
            f"Invalid value {value.strip()} for configuration {key}: Not a number of type LONG"
        ) from None


def is_security_setting(key: str) -> bool:
    """A key that asks for security whatever its (non-empty) value: checked, not warned of."""
    return (
        key in SECURITY_KEYS
        or key in INTER_BROKER_KEYS
        or _SECURITY_PREFIX.match(key) is not None
        or _LISTENER_REAUTH.match(key) is not None
    )


def protocol_map(values: Mapping[str, str]) -> dict[str, str]:
    """`listener.security.protocol.map` as {LISTENER NAME: PROTOCOL}; ConfigError if malformed."""
    raw = values.get("listener.security.protocol.map", "")
    out: dict[str, str] = {}
    for item in _entries(raw):
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in PROTOCOLS:
            raise ConfigError(
                f"Invalid value {raw} for configuration listener.security.protocol.map: "
                f"expected LISTENER:PROTOCOL with a protocol of {', '.join(sorted(PROTOCOLS))}, "
                f"got {item!r}"
            )
        out[name.strip().upper()] = protocol
    return out


def _entries(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _names(raw: str) -> set[str]:
    return {n.upper() for n in _entries(raw)}
