"""Broker configuration: `server.properties`, then `--set key=value` overrides, checked against
the catalogue (`metadata/config_defs.py`).

A bad value for a known key is an error that names the key; an unknown key is logged as a
warning and otherwise ignored, as Kafka does.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from gregor.metadata.config_defs import BROKER_CONFIGS, ConfigError
from gregor.runtime.raft_driver import parse_voters

log = logging.getLogger("gregor.config")


def read_properties(path: str) -> dict[str, str]:
    """Java .properties, the subset server.properties uses: key=value or key: value, # and !
    comments, backslash line continuations."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    pending = ""
    for raw in lines:
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        for i, ch in enumerate(line):
            if ch in "=:":
                out[line[:i].strip()] = line[i + 1 :].strip()
                break
        else:
            out[line] = ""
    return out


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


@dataclass
class BrokerConfig:
    """The static broker configuration: the raw strings, plus typed accessors for what the
    broker reads itself."""

    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | None = None, overrides: dict[str, str] | None = None) -> BrokerConfig:
        values: dict[str, str] = {}
        if path:
            values.update(read_properties(path))
        values.update(overrides or {})
        for key, value in values.items():
            d = BROKER_CONFIGS.get(key)
            if d is None:
                log.warning("The configuration '%s' was supplied but isn't a known config.", key)
                continue
            d.parse(value)  # raises ConfigError naming the key
        return cls(values)

    def get(self, key: str) -> object:
        d = BROKER_CONFIGS[key]
        return d.parse(self.values.get(key, d.default))

    def get_int(self, key: str) -> int:
        value = self.get(key)
        assert isinstance(value, int)
        return value

    def get_bool(self, key: str) -> bool:
        return bool(self.get(key))

    def get_str(self, key: str) -> str | None:
        value = self.get(key)
        return None if value is None else str(value)

    @property
    def node_id(self) -> int:
        broker_id = self.get_int("broker.id")
        return broker_id if broker_id >= 0 and "node.id" not in self.values else self.get_int("node.id")

    @property
    def log_dirs(self) -> list[str]:
        raw = self.values.get("log.dirs") or self.values.get("log.dir") or "./gregor-data"
        return [os.path.abspath(d.strip()) for d in raw.split(",") if d.strip()]

    def _controller_names(self) -> set[str]:
        raw = self.get_str("controller.listener.names") or ""
        return {n.strip().upper() for n in raw.split(",") if n.strip()}

    def _client_listeners(self, spec: str) -> str:
        """`spec` without the controller listeners (the broker serves the rest)."""
        names = self._controller_names()
        kept = [p for p in spec.split(",") if p.strip() and listener_name(p) not in names]
        return ",".join(kept) if kept else spec

    def listener(self) -> tuple[str, int]:
        """(host, port) of the first listener that is not a controller listener."""
        return parse_listener(self._client_listeners(self.get_str("listeners") or "PLAINTEXT://127.0.0.1:9092"))

    def advertised(self) -> tuple[str, int]:
        raw = self.get_str("advertised.listeners")
        return parse_listener(self._client_listeners(raw)) if raw else self.listener()

    def controller_listener(self) -> tuple[str, int] | None:
        """(host, port) of the first listener named in `controller.listener.names`; None if
        `listeners` has none."""
        names = self._controller_names()
        for part in (self.get_str("listeners") or "").split(","):
            if part.strip() and listener_name(part) in names:
                return parse_listener(part)
        return None

    @property
    def process_roles(self) -> set[str]:
        roles = self.get("process.roles")
        assert isinstance(roles, list)
        return {str(r).strip() for r in roles if str(r).strip()}

    def quorum_voters(self) -> dict[int, tuple[str, int]] | None:
        """`controller.quorum.voters` as {node id: (host, port)}; None when not set (the node is
        the only voter of its own quorum)."""
        raw = self.values.get("controller.quorum.voters", "").strip()
        if not raw:
            return None
        try:
            return parse_voters(raw)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def listener_name(spec: str) -> str:
    name, sep, _rest = spec.strip().partition("://")
    return name.strip().upper() if sep else "PLAINTEXT"


def parse_listener(spec: str) -> tuple[str, int]:
    first = spec.split(",")[0].strip()
    _name, sep, rest = first.partition("://")
    if not sep:
        rest = first
    host, _, port = rest.rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"Invalid value {spec} for configuration listeners: no port")
    host = host.strip("[]")
    return (host or "0.0.0.0"), int(port)
