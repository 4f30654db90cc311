"""A listener's security settings, as Kafka resolves them: per-listener keys win over bare ones.

Kafka reads a listener's `ssl.*` and `sasl.*` settings under `listener.name.<name>.` first (the
name in lower case, e.g. `listener.name.sasl_ssl.ssl.keystore.location`), and a mechanism's
JAAS config under `listener.name.<name>.<mechanism>.sasl.jaas.config`
(`listener.name.internal.plain.sasl.jaas.config`), then falls back to the bare key. Pure.

`extras` carries what a mechanism needs beyond config strings (e.g. a credential lookup into
the metadata the broker gives the SASL mechanisms that keep users there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
# Kafka's default when a SASL listener names no mechanism: one gregor does not serve.
DEFAULT_SASL_MECHANISMS = "GSSAPI"


@dataclass(frozen=True)
class ListenerConfig:
    name: str  # upper case, as in listener.security.protocol.map
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    values: Mapping[str, str]  # the whole node configuration (raw strings)
    extras: Mapping[str, Any] = field(default_factory=dict)

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def get(self, key: str, mechanism: str | None = None, default: str = "") -> str:
        """`key` for this listener: under listener.name.<name>.<mechanism>. (with a mechanism),
        then listener.name.<name>., then bare; `default` when none is set or it is empty."""
        value = self.lookup(key, mechanism)
        return value if value else default

    def lookup(self, key: str, mechanism: str | None = None) -> str | None:
        """As `get`, but an empty value is returned as "" (set, to nothing); None if unset."""
        prefix = f"listener.name.{self.name.lower()}."
        candidates = [f"{prefix}{mechanism.lower()}.{key}"] if mechanism else []
        candidates += [prefix + key, key]
        for candidate in candidates:
            value = _lookup(self.values, candidate)
            if value is not None:
                return value.strip()
        return None

    def sasl_mechanisms(self) -> list[str]:
        raw = self.get("sasl.enabled.mechanisms", default=DEFAULT_SASL_MECHANISMS)
        return [m.strip().upper() for m in raw.split(",") if m.strip()]


def _lookup(values: Mapping[str, str], key: str) -> str | None:
    """A key, its listener name matched without regard to case (Kafka lower-cases it)."""
    if key in values:
        return values[key]
    lowered = key.lower()
    for candidate, value in values.items():
        if candidate.lower() == lowered:
            return value
    return None


def protocol_of(name: str, protocols: Mapping[str, str], controller_names: set[str]) -> str | None:
    """A listener's security protocol: its map entry; without one, a protocol's own name is that
    protocol and a controller listener is PLAINTEXT (Kafka's KRaft default); else None."""
    name = name.upper()
    if name in protocols:
        return protocols[name]
    if name in PROTOCOLS:
        return name
    return "PLAINTEXT" if name in controller_names else None
