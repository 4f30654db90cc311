"""Broker configuration: `server.properties`, then `--set key=value` overrides, checked against
the catalogue (`metadata/config_defs.py`).

A bad value for a known key is an error that names the key; an unknown key is logged as a
warning and otherwise ignored, as Kafka does.

`membership()` says what the node is in the metadata quorum (`process.roles` is checked there,
not at load), from `process.roles`,
`controller.quorum.voters`, `controller.quorum.bootstrap.servers` and the listeners, and refuses
(ConfigError, one line) the combinations Kafka refuses:

    roles                 needs                                        refused
    broker,controller     voters naming node.id, a controller listener  bootstrap servers alone
      (no voters, no bootstrap servers: the one-voter quorum of its own, as before)
    controller            voters naming node.id, a controller listener, any other listener;
                                                                       bootstrap servers alone
    broker                voters or bootstrap servers                   node.id among the
                                                                       voters; a controller
                                                                       listener of its own
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from gregor.broker.security_settings import (
    check_security,
    inter_broker_listener,
    is_security_setting,
    protocol_map,
)
from gregor.metadata.config_defs import BROKER_CONFIGS, ConfigError, listener_config
from gregor.properties import PropertiesError, parse_properties
from gregor.runtime.raft_driver import parse_voters
from gregor.security.listener_config import ListenerConfig, protocol_of

log = logging.getLogger("gregor.config")

ROLES = frozenset({"broker", "controller"})
# Read when the node is built (BrokerConfig.membership), not at load: a bad value there is a bad
# node, refused with the other quorum settings (exit 1), not a bad command line.
CHECKED_BY_MEMBERSHIP = frozenset({"process.roles"})
MAX_PORT = 65535


def read_properties(path: str) -> dict[str, str]:
    """A Java .properties file, as server.properties and client config files use them (the
    exact `java.util.Properties` syntax: gregor.properties), each value trimmed as Kafka's
    ConfigDef trims it. OSError and UnicodeDecodeError reach the caller, which names the flag;
    a malformed escape is a ConfigError naming the file and line."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return {key: value.strip() for key, value in parse_properties(text).items()}
    except PropertiesError as exc:
        raise ConfigError(f"{path}: {exc}") from None


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
            d = BROKER_CONFIGS.get(key) or listener_config(key)
            if d is None and is_security_setting(key):
                continue  # refused with the other security settings: membership()
            if d is None:
                log.warning("The configuration '%s' was supplied but isn't a known config.", key)
                continue
            if key in CHECKED_BY_MEMBERSHIP:
                continue  # judged with the other quorum settings: membership()
            d.parse(value)  # raises ConfigError naming the key
        config = cls(values)
        config._check_together()
        return config

    def _check_together(self) -> None:
        """What Kafka requires of keys taken together (KafkaConfig's `require`s)."""
        queued = self.get_int("queued.max.request.bytes")
        if 0 < queued < self.get_int("socket.request.max.bytes"):
            raise ConfigError(
                "queued.max.request.bytes must be larger or equal to socket.request.max.bytes"
            )
        if self.get_int("max.connections.per.ip") == 0 and not self.get_str(
            "max.connections.per.ip.overrides"
        ):
            raise ConfigError(
                "max.connections.per.ip can be set to zero only if "
                "max.connections.per.ip.overrides property is set."
            )

    def get(self, key: str) -> object:
        d = BROKER_CONFIGS[key]
        return d.parse(self.values.get(key, d.default))

    def get_int(self, key: str) -> int:
        value = self.get(key)
        assert isinstance(value, int)
        return value

    def console_listener(self) -> tuple[str, int] | None:
        """(host, port) of `console.listener`, the web console inside this node; None: off."""
        from gregor.console.settings import parse_listen

        raw = self.get_str("console.listener")
        return parse_listen(raw) if raw else None

    def get_bool(self, key: str) -> bool:
        return bool(self.get(key))

    def get_str(self, key: str) -> str | None:
        value = self.get(key)
        return None if value is None else str(value)

    @property
    def node_id(self) -> int:
        broker_id = self.get_int("broker.id")
        return (
            broker_id
            if broker_id >= 0 and "node.id" not in self.values
            else self.get_int("node.id")
        )

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
        return parse_listener(
            self._client_listeners(self.get_str("listeners") or "PLAINTEXT://127.0.0.1:9092")
        )

    def controller_listener_config(self) -> ListenerConfig:
        """The security settings of the controller listener (the first name of
        controller.listener.names), as the controllers serve it and every node connects to it."""
        raw = self.get_str("controller.listener.names") or "CONTROLLER"
        name = raw.split(",")[0].strip().upper()
        protocol = protocol_of(name, protocol_map(self.values), self._controller_names() | {name})
        return ListenerConfig(name, protocol or "PLAINTEXT", self.values)

    def client_listeners(self) -> list[ClientListenerSpec]:
        """Every client listener (the entries of `listeners` that are not controller
        listeners), in order, each with where it is advertised: its `advertised.listeners`
        entry of the same name, else its `listeners` entry (Kafka's rule); a port 0 there is
        the bound port."""
        spec = self._client_listeners(self.get_str("listeners") or "PLAINTEXT://127.0.0.1:9092")
        advertised = {
            listener_name(p): parse_listener(p)
            for p in (self.get_str("advertised.listeners") or "").split(",")
            if p.strip()
        }
        protocols, controllers = protocol_map(self.values), self._controller_names()
        out = []
        for part in (p for p in spec.split(",") if p.strip()):
            name = listener_name(part)
            host, port = parse_listener(part)
            shown_host, shown_port = advertised.get(name, (host, port))
            protocol = protocol_of(name, protocols, controllers) or "PLAINTEXT"
            config = ListenerConfig(name, protocol, self.values)
            out.append(ClientListenerSpec(name, host, port, shown_host, shown_port, config))
        return out

    def inter_broker_listener_config(self) -> ListenerConfig:
        """The client listener brokers talk to each other over (security_settings.py's
        `inter_broker_listener`: inter.broker.listener.name, or security.inter.broker.protocol)."""
        listeners = self.client_listeners()
        name = inter_broker_listener(self.values, [(li.name, li.protocol) for li in listeners])
        return next(li.config for li in listeners if li.name == name)

    def advertised(self) -> tuple[str, int]:
        """Where the first client listener is advertised (`client_listeners`)."""
        first = self.client_listeners()[0]
        return first.advertised_host, first.advertised_port

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
        raw = self.values.get("process.roles", "broker,controller")
        roles = {r.strip() for r in raw.split(",") if r.strip()}
        unknown = sorted(roles - ROLES)
        if unknown:
            raise ConfigError(
                f"Unknown process role '{unknown[0]}' in process.roles={raw} (the roles are "
                "broker and controller)"
            )
        if not roles:
            raise ConfigError("process.roles is empty: name broker, controller or both")
        return roles

    def quorum_bootstrap_servers(self) -> list[tuple[str, int]]:
        """`controller.quorum.bootstrap.servers` (KIP-853): host:port of controllers, in order."""
        raw = self.values.get("controller.quorum.bootstrap.servers", "")
        out = []
        for item in (i.strip() for i in raw.split(",")):
            if not item:
                continue
            host, colon, port = item.rpartition(":")
            if not colon or not host or not port.isdigit():
                raise ConfigError(
                    f"Invalid value {raw} for configuration controller.quorum.bootstrap.servers: "
                    f"expected host:port, got {item!r}"
                )
            out.append((host.strip("[]"), int(port)))
        return out

    def _other_listeners(self) -> list[str]:
        """The entries of `listeners` that are not controller listeners."""
        names = self._controller_names()
        spec = self.get_str("listeners") or ""
        return [p.strip() for p in spec.split(",") if p.strip() and listener_name(p) not in names]

    def membership(self) -> Membership:
        """What this node is in the metadata quorum; ConfigError for what Kafka refuses too,
        and for security settings the node cannot honour yet (security_settings.py)."""
        check_security(self.values)
        roles = frozenset(self.process_roles)
        voters = self.quorum_voters()
        bootstrap = self.quorum_bootstrap_servers()
        listen = self.controller_listener()
        names = self.get_str("controller.listener.names")
        node = self.node_id
        shown = ",".join(sorted(roles))
        if roles == {"broker"}:
            if voters is None and not bootstrap:
                raise ConfigError(
                    "process.roles=broker needs controller.quorum.voters or "
                    "controller.quorum.bootstrap.servers to find the controllers"
                )
            if voters is not None and node in voters:
                raise ConfigError(
                    f"process.roles=broker: node.id {node} must not be among "
                    f"controller.quorum.voters {sorted(voters)} (a broker-only node observes the "
                    "quorum, it does not vote)"
                )
            if listen is not None:
                raise ConfigError(
                    f"process.roles=broker: listeners must not include a controller listener "
                    f"(controller.listener.names={names}): a broker-only node only connects to "
                    "the controllers"
                )
            return Membership(roles, voters, bootstrap, None)
        if voters is None:
            if roles == {"controller"} or bootstrap:
                raise ConfigError(
                    f"process.roles={shown} needs controller.quorum.voters "
                    "(controller.quorum.bootstrap.servers alone, a dynamic quorum, is not "
                    "supported for controllers)"
                )
            return Membership(roles, None, [], None)  # the one-voter quorum of its own
        if node not in voters:
            raise ConfigError(
                f"node.id {node} is not among controller.quorum.voters {sorted(voters)}"
            )
        if listen is None:
            raise ConfigError(
                f"process.roles={shown} needs a listener named in controller.listener.names "
                f"({names}) in listeners, for controller.quorum.voters"
            )
        other = self._other_listeners()
        if roles == {"controller"} and other:
            raise ConfigError(
                f"process.roles=controller: listeners may only hold controller listeners "
                f"(controller.listener.names={names}), not {','.join(other)}"
            )
        return Membership(roles, voters, bootstrap, listen)

    def joins_quorum(self) -> str | None:
        """The setting by which this node joins other nodes' quorum (voters other than itself,
        or bootstrap servers), as `key=value`; None for a node that is its own quorum."""
        voters = self.quorum_voters()
        if voters is not None and set(voters) - {self.node_id}:
            return f"controller.quorum.voters={self.values['controller.quorum.voters'].strip()}"
        servers = self.values.get("controller.quorum.bootstrap.servers", "").strip()
        return f"controller.quorum.bootstrap.servers={servers}" if servers else None

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


@dataclass(frozen=True)
class ClientListenerSpec:
    """A client listener as configured: where it binds, where it is advertised, its security."""

    name: str
    host: str
    port: int  # 0: the OS picks one
    advertised_host: str
    advertised_port: int  # 0: the bound port
    config: ListenerConfig

    @property
    def protocol(self) -> str:
        return self.config.protocol


@dataclass(frozen=True)
class Membership:
    """A node's place in the metadata quorum (`BrokerConfig.membership`)."""

    roles: frozenset[str]
    voters: dict[int, tuple[str, int]] | None  # None: the one-voter quorum of its own
    bootstrap: list[tuple[str, int]]  # controller.quorum.bootstrap.servers
    controller_listener: tuple[str, int] | None  # where a controller listens

    @property
    def networked(self) -> bool:
        return self.voters is not None or bool(self.bootstrap)

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles


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
    if int(port) > MAX_PORT:
        raise ConfigError(
            f"Invalid value {spec} for configuration listeners: port {port} is out of range "
            f"(0-{MAX_PORT}; 0 picks a free one)"
        )
    host = host.strip("[]")
    return (host or "0.0.0.0"), int(port)
