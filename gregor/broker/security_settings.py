"""Security settings a node is given, refused until gregor can honour them (fail closed).

gregor serves PLAINTEXT only: no TLS, no SASL (ACLs are served: authorizer.class.name,
super.users and allow.everyone.if.no.acl.found are broker configs). A node asked for TLS or
SASL would otherwise start and serve everyone in clear text, so `check_security` refuses, naming the
first setting that asks for security:

    a listener whose security protocol is not PLAINTEXT   listeners=SASL_PLAINTEXT://..., SSL://...,
                                                          or a name mapped to one in
                                                          listener.security.protocol.map
    security.inter.broker.protocol other than PLAINTEXT
    principal.builder.class
    sasl.*, ssl.*, and their per-listener forms listener.name.<listener>[.<mechanism>].sasl.* /
    .ssl.* (listener.name.internal.plain.sasl.jaas.config, ...)

A setting given an empty value asks for nothing and passes. A listener's protocol is the one the
map gives its name; without a map entry, a name that is a protocol's own name (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL) is that protocol, and a controller listener name is PLAINTEXT, as in
Kafka's KRaft mode. Pure: strings in, a ConfigError (one line) out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gregor.metadata.config_defs import ConfigError

PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
# authorizer.class.name (Kafka's StandardAuthorizer), super.users and
# allow.everyone.if.no.acl.found are served: ACLs (gregor/security/authorizer.py).
SECURITY_KEYS = ("principal.builder.class",)
# sasl.* / ssl.*, bare or under listener.name.<listener>. or listener.name.<listener>.<mechanism>.
_SECURITY_PREFIX = re.compile(r"^(listener\.name\.[^.]+\.([^.]+\.)?)?(sasl|ssl)\.", re.IGNORECASE)
NOT_SUPPORTED = "security (TLS, SASL, ACLs) is not supported yet"


def check_security(values: Mapping[str, str]) -> None:
    """ConfigError naming the first setting that asks for security (the module docstring)."""
    protocols = protocol_map(values)
    controller_names = _names(values.get("controller.listener.names", "CONTROLLER"))
    for key in ("listeners", "advertised.listeners"):
        for spec in _entries(values.get(key, "")):
            name, sep, _ = spec.partition("://")
            name = name.strip().upper() if sep else "PLAINTEXT"
            protocol = protocols.get(name) or (
                name if name in PROTOCOLS else "PLAINTEXT" if name in controller_names else None
            )
            if protocol is None:
                raise ConfigError(
                    f"{key}: listener {name} ({spec}) has no security protocol in "
                    f"listener.security.protocol.map: map it to PLAINTEXT, e.g. "
                    f"listener.security.protocol.map={name}:PLAINTEXT"
                )
            if protocol != "PLAINTEXT":
                raise ConfigError(
                    f"{key}: listener {spec} uses {protocol}, but {NOT_SUPPORTED}: use a "
                    "PLAINTEXT listener (the node would otherwise serve it without security)"
                )
    inter = values.get("security.inter.broker.protocol", "").strip().upper()
    if inter and inter != "PLAINTEXT":
        raise ConfigError(
            f"security.inter.broker.protocol={inter}: {NOT_SUPPORTED}: remove it or set PLAINTEXT"
        )
    for key, value in values.items():
        if not value.strip():
            continue  # an empty value asks for nothing
        if is_security_setting(key):
            raise ConfigError(
                f"{key} is set, but {NOT_SUPPORTED}: remove it (the node would otherwise run "
                "without the security it asks for)"
            )


def is_security_setting(key: str) -> bool:
    """A key that asks for security whatever its (non-empty) value: refused, not warned of."""
    return key in SECURITY_KEYS or _SECURITY_PREFIX.match(key) is not None


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
