"""The per-listener broker configs (`listener.name.<listener>.<config>`) as DescribeConfigs of a
broker describes them, after Kafka's ConfigHelper: listed only when set (statically or
dynamically; Kafka lists the keys given, not every key a listener could have).

    listener.name.client.max.connections            base max.connections
    listener.name.ssl.ssl.keystore.location          base ssl.keystore.location
    listener.name.sasl_ssl.plain.sasl.jaas.config    base sasl.jaas.config (a mechanism's)

A key's synonyms are the key and its base config in each layer that sets them (this broker's
dynamic configs, the cluster default, static, Kafka's default), from the first layer that sets
the key; its source is that layer's. The type is the base config's; a password (or a base
Kafka does not know) is sensitive: its value and its synonyms' values are null. Kafka reports
every listener key read-only (its dynamic-config list names the base keys only). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gregor.metadata.config_defs import (
    BROKER_CONFIGS,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    INT,
    LIST,
    PASSWORD,
    STATIC_BROKER_CONFIG,
    STRING,
    UNKNOWN,
    ConfigDef,
    DynamicConfigs,
    Resolved,
    listener_config,
)

# The ssl.* and sasl.* configs gregor honours, bare or per listener (broker/security_settings.py
# refuses the others), with Kafka's types and defaults.
SECURITY_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("ssl.keystore.location", STRING, None),
        ConfigDef("ssl.keystore.password", PASSWORD, None),  # a PEM keystore's: unused
        ConfigDef("ssl.keystore.type", STRING, "JKS"),
        ConfigDef("ssl.keystore.certificate.chain", PASSWORD, None),
        ConfigDef("ssl.keystore.key", PASSWORD, None),
        ConfigDef("ssl.key.password", PASSWORD, None),
        ConfigDef("ssl.truststore.location", STRING, None),
        ConfigDef("ssl.truststore.password", PASSWORD, None),  # a PEM truststore's: unused
        ConfigDef("ssl.truststore.type", STRING, "JKS"),
        ConfigDef("ssl.truststore.certificates", PASSWORD, None),
        ConfigDef("ssl.client.auth", STRING, "none"),
        ConfigDef("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3"),
        ConfigDef("ssl.protocol", STRING, "TLSv1.3"),
        ConfigDef("ssl.cipher.suites", LIST, ""),
        ConfigDef("ssl.principal.mapping.rules", STRING, "DEFAULT"),
        ConfigDef("ssl.endpoint.identification.algorithm", STRING, "https"),
        ConfigDef("sasl.enabled.mechanisms", LIST, "GSSAPI"),
        ConfigDef("sasl.jaas.config", PASSWORD, None),
        ConfigDef("sasl.mechanism.inter.broker.protocol", STRING, "GSSAPI"),
        ConfigDef("sasl.mechanism.controller.protocol", STRING, "GSSAPI"),
        ConfigDef("sasl.oauthbearer.jwks.endpoint.url", STRING, None),
        ConfigDef("sasl.oauthbearer.expected.audience", LIST, None),
        ConfigDef("sasl.oauthbearer.expected.issuer", STRING, None),
        ConfigDef("sasl.oauthbearer.sub.claim.name", STRING, "sub"),
        ConfigDef("sasl.oauthbearer.clock.skew.seconds", INT, "30"),
    )
}
# Configs given per listener and mechanism (`listener.name.<l>.<mechanism>.<config>`), whose
# base is the config without the mechanism (Kafka's ListenerMechanismConfigs).
MECHANISM_CONFIGS = (
    "sasl.jaas.config",
    "sasl.login.callback.handler.class",
    "sasl.login.class",
    "sasl.server.callback.handler.class",
    "connections.max.reauth.ms",
)
_LISTENER_KEY = re.compile(r"^listener\.name\.[^.]*\.(.*)$")
# what gregor takes per listener besides the connection limits: ssl.* and sasl.*, also under a
# mechanism, and connections.max.reauth.ms (KIP-368)
_LISTENER_SECURITY = re.compile(
    r"^listener\.name\.[^.]+\.([^.]+\.)?((ssl|sasl)\..+|connections\.max\.reauth\.ms)$",
    re.IGNORECASE,
)


def base_config(name: str) -> str:
    """The config a listener key overrides (Kafka's brokerConfigSynonyms): the key without its
    listener prefix, and without the mechanism for MECHANISM_CONFIGS."""
    found = _LISTENER_KEY.match(name)
    if found is None:
        return name
    rest = found[1]
    return next((m for m in MECHANISM_CONFIGS if rest.endswith(m)), rest)


def definition(base: str) -> ConfigDef | None:
    return BROKER_CONFIGS.get(base) or SECURITY_CONFIGS.get(base)


def set_listener_configs(static: Mapping[str, str], dynamic: Mapping[str, str]) -> list[str]:
    """The per-listener configs set statically or dynamically, sorted: what DescribeConfigs of
    a broker lists besides the catalogue."""
    return sorted(k for k in {*static, *dynamic} if is_listener_config(k))


def is_listener_config(key: str) -> bool:
    return listener_config(key) is not None or _LISTENER_SECURITY.match(key) is not None


def resolve_listener_config(
    name: str, static: Mapping[str, str], dynamic: Mapping[str, str]
) -> Resolved:
    """A set per-listener config as Kafka's ConfigHelper describes it (the module docstring)."""
    base = base_config(name)
    d = definition(base)
    layers: list[tuple[Mapping[str, str | None], int]] = []
    if isinstance(dynamic, DynamicConfigs):
        layers += [
            (dynamic.node, DYNAMIC_BROKER_CONFIG),
            (dynamic.default, DYNAMIC_DEFAULT_BROKER_CONFIG),
        ]
    else:
        layers.append((dynamic, DYNAMIC_DEFAULT_BROKER_CONFIG))
    layers.append((static, STATIC_BROKER_CONFIG))
    if d is not None and d.default is not None:
        layers.append(({base: d.default}, DEFAULT_CONFIG))
    sensitive = d is None or d.type == PASSWORD
    synonyms = [
        (k, None if sensitive else layer[k], source)
        for layer, source in layers
        for k in (name, base)
        if k in layer
    ]
    while synonyms and synonyms[0][0] != name:
        synonyms.pop(0)
    value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (None, DEFAULT_CONFIG)
    type_ = UNKNOWN if d is None else d.type
    return Resolved(name, value, source, True, sensitive, type_, tuple(synonyms))
