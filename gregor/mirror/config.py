"""An `mm2.properties` file read as MirrorMaker 2's dedicated mode reads it, into validated
flows.

Where a flow A->B's setting `x` comes from, later winning (MirrorMakerConfig.connectorBaseConfig):

1. MirrorMaker's default;
2. top-level `x` (`topics = .*`, `tasks.max = 4`, `replication.policy.*`);
3. the clusters' own settings, seen by the flow as `source.cluster.x` / `target.cluster.x`
   (from `A.x` / `B.x`) and the clients' as `source.consumer.x` and so on (from `A.consumer.x`);
4. the flow's override `A->B.x`.

A client's settings (MirrorConnectorConfig): the cluster's connection settings
(`A.bootstrap.servers`, `A.security.protocol`, `A.ssl.*`, `A.sasl.*`, else top-level ones), then
the flow's `A->B.consumer.*`, then the cluster's `A.consumer.*`, then `A->B.source.consumer.*`;
Java names librdkafka does not know (`sasl.jaas.config`, a PEM truststore) are given under
librdkafka's (`client_settings`).

A mistake raises one `ConfigError` whose message starts with the key as the user wrote it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from gregor.mirror import filters
from gregor.mirror.client_settings import SettingError, librdkafka_settings
from gregor.mirror.filters import ConfigPropertyFilter, NameFilter
from gregor.mirror.policy import DefaultReplicationPolicy, IdentityReplicationPolicy, policy_class
from gregor.properties import PropertiesError, parse_properties

CLIENT_ROLES = ("producer", "consumer", "admin")
_ALIAS = re.compile(r"[a-zA-Z0-9._-]+")
_LIST_SPLIT = re.compile(r"\s*,\s*")
PROVENANCE_KEY = "replication.policy.provenance.header.enabled"
V = TypeVar("V")


class ConfigError(ValueError):
    """A bad `mm2.properties`: `key: what is wrong`."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key = key


# Parsers of one value: each returns the typed value or raises ValueError with the reason.


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"expected true or false, got {text!r}")
    return value == "true"


def _long(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _replication_factor(text: str) -> int:
    value = _long(-1)(text)
    if value == 0:
        raise ValueError("must be -1 (the broker's default) or at least 1")
    return value


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {text!r}")
        return value

    return parse


def parse_list(text: str) -> tuple[str, ...]:
    """A Kafka LIST: comma separated, whitespace around commas dropped, empty text empty."""
    text = text.strip()
    return tuple(_LIST_SPLIT.split(text)) if text else ()


def _regex_list(text: str) -> tuple[str, ...]:
    patterns = parse_list(text)
    try:
        filters.compile_pattern_list(patterns)
    except re.error as e:
        raise ValueError(f"bad regex: {e}") from None
    return patterns


def _string(text: str) -> str:
    return text.strip()


def _separator(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    return text  # not stripped: MirrorMaker keeps the separator as written


# The flow settings: key, default (as MirrorMaker's text), parser. Keys MirrorMaker does not
# know are ignored, as it ignores them. One difference: a top-level `exactly.once.support`
# applies to every flow here (MirrorMaker drops it; only `A->B.exactly.once.support` counts).
FLOW_SETTINGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "enabled": ("false", _boolean),
    "topics": (", ".join(filters.TOPICS_DEFAULT), _regex_list),
    "topics.exclude": (", ".join(filters.TOPICS_EXCLUDE_DEFAULT), _regex_list),
    "groups": (", ".join(filters.GROUPS_DEFAULT), _regex_list),
    "groups.exclude": (", ".join(filters.GROUPS_EXCLUDE_DEFAULT), _regex_list),
    "config.properties.exclude": (
        ", ".join(filters.CONFIG_PROPERTIES_EXCLUDE_DEFAULT),
        _regex_list,
    ),
    "replication.policy.class": ("DefaultReplicationPolicy", _string),
    "replication.policy.separator": (".", _separator),
    "replication.policy.internal.topic.separator.enabled": ("true", _boolean),
    PROVENANCE_KEY: ("true", _boolean),
    "sync.topic.configs.enabled": ("true", _boolean),
    "sync.topic.configs.interval.seconds": ("600", _long(0)),
    "sync.topic.acls.enabled": ("true", _boolean),
    "sync.topic.acls.interval.seconds": ("600", _long(0)),
    "emit.heartbeats.enabled": ("true", _boolean),
    "emit.heartbeats.interval.seconds": ("1", _long(0)),
    "emit.checkpoints.enabled": ("true", _boolean),
    "emit.checkpoints.interval.seconds": ("60", _long(0)),
    "emit.offset-syncs.enabled": ("true", _boolean),
    "sync.group.offsets.enabled": ("false", _boolean),
    "sync.group.offsets.interval.seconds": ("60", _long(0)),
    "refresh.topics.enabled": ("true", _boolean),
    "refresh.topics.interval.seconds": ("600", _long(0)),
    "refresh.groups.enabled": ("true", _boolean),
    "refresh.groups.interval.seconds": ("600", _long(0)),
    "heartbeats.replication.enabled": ("true", _boolean),
    "replication.factor": ("2", _replication_factor),
    "offset-syncs.topic.location": ("source", _one_of("source", "target")),
    "offset-syncs.topic.replication.factor": ("3", _replication_factor),
    "checkpoints.topic.replication.factor": ("3", _replication_factor),
    "heartbeats.topic.replication.factor": ("3", _replication_factor),
    "offset.lag.max": ("100", _long(0)),
    "tasks.max": ("1", _long(1)),
    "exactly.once.support": ("requested", _one_of("requested", "required")),
}
EOS_SOURCE_SUPPORT = ("disabled", _one_of("enabled", "preparing", "disabled"))
_CONNECTOR_KEYS = frozenset(FLOW_SETTINGS) | {"consumer.poll.timeout.ms", "admin.timeout.ms"}


def _is_client_key(key: str) -> bool:
    """Connection settings every client of a cluster shares (MirrorClientConfig's CLIENT_CONFIG_DEF)."""
    return key in ("bootstrap.servers", "security.protocol") or key.startswith(("ssl.", "sasl."))


def _with_prefix(props: Mapping[str, V], prefix: str) -> dict[str, V]:
    return {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}


# Composing a flow's settings (each value with the key it came from, for error messages).

Origin = tuple[str, str]  # (value, key as written)


def cluster_props(raw: Mapping[str, str], alias: str) -> dict[str, Origin]:
    """A cluster's settings, `A.x` as `x`; its connection settings also as each client's, and
    top-level connection settings where the cluster has none (MirrorMakerConfig.clusterProps)."""
    props = {k: (v, f"{alias}.{k}") for k, v in _with_prefix(raw, alias + ".").items()}
    for key in [k for k in props if _is_client_key(k)]:
        for role in CLIENT_ROLES:
            props.setdefault(f"{role}.{key}", props[key])
    for key, value in raw.items():
        if _is_client_key(key):
            for role in CLIENT_ROLES:
                props.setdefault(f"{role}.{key}", (value, key))
            props.setdefault(key, (value, key))
    return props


def connector_props(raw: Mapping[str, str], source: str, target: str) -> dict[str, Origin]:
    """Flow source->target's settings, as MirrorMaker hands them to its connectors."""
    props = {
        k: (v, k)
        for k, v in raw.items()
        if k in _CONNECTOR_KEYS or k.startswith("replication.policy")
    }
    for side, alias in (("source", source), ("target", target)):
        for key, origin in cluster_props(raw, alias).items():
            if key.startswith(CLIENT_ROLES):
                props[f"{side}.{key}"] = origin
            else:
                props[f"{side}.cluster.{key}"] = origin
    prefix = f"{source}->{target}."
    props.update({k[len(prefix) :]: (v, k) for k, v in raw.items() if k.startswith(prefix)})
    return props


def _client_config(props: Mapping[str, Origin], side: str, role: str) -> dict[str, str]:
    config = {
        k: origin
        for k, origin in _with_prefix(props, f"{side}.cluster.").items()
        if _is_client_key(k)
    }
    # the flow's `consumer.*` and so on, but not the task's own `consumer.poll.timeout.ms`
    # and `admin.timeout.ms`, which no client library knows
    flow_level = _with_prefix(props, f"{role}.")
    config.update({k: o for k, o in flow_level.items() if f"{role}.{k}" not in _CONNECTOR_KEYS})
    config.update(_with_prefix(props, f"{side}.{role}."))
    out = _librdkafka(config)
    if role == "consumer":
        out["enable.auto.commit"] = "false"
        out.setdefault("auto.offset.reset", "earliest")
    return out


def _librdkafka(settings: Mapping[str, Origin]) -> dict[str, str]:
    """Java client names (`sasl.jaas.config`, truststores) as librdkafka's."""
    try:
        return librdkafka_settings(settings)
    except SettingError as e:
        raise ConfigError(e.key, str(e)) from None


@dataclass(frozen=True)
class Flow:
    """One replication flow, source -> target, with every setting typed and validated."""

    source: str
    target: str
    settings: Mapping[str, Any]
    props: Mapping[str, Origin]
    policy: DefaultReplicationPolicy
    topic_filter: NameFilter
    group_filter: NameFilter
    config_property_filter: ConfigPropertyFilter
    exactly_once_source_support: str

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def enabled(self) -> bool:
        """Whether records, configs and checkpoints flow (`A->B.enabled`)."""
        return bool(self.settings["enabled"])

    @property
    def emits_heartbeats(self) -> bool:
        """Heartbeats go into the target from every pair of clusters unless turned off,
        enabled flow or not: they are how the other direction's replication is observed."""
        return bool(self.settings["emit.heartbeats.enabled"])

    @property
    def exactly_once(self) -> bool:
        return self.exactly_once_source_support == "enabled"

    def get(self, key: str) -> Any:
        return self.settings[key]

    def origin(self, key: str) -> str:
        """The key as the user wrote it that set `key` for this flow (the key itself if unset)."""
        return self.props[key][1] if key in self.props else key

    def client_config(self, side: str, role: str) -> dict[str, str]:
        """Settings of the flow's `role` client ("producer", "consumer", "admin") of `side`
        ("source" or "target"), for the client library."""
        assert side in ("source", "target") and role in CLIENT_ROLES
        return _client_config(self.props, side, role)

    def remote_topic(self, topic: str) -> str:
        return self.policy.format_remote_topic(self.source, topic)

    def should_replicate_topic(self, topic: str) -> bool:
        return filters.should_replicate_topic(
            topic,
            self.topic_filter,
            self.policy,
            self.target,
            self.settings["heartbeats.replication.enabled"],
        )

    @property
    def offset_syncs_topic(self) -> str:
        """Named after the other cluster, held by `offset-syncs.topic.location`."""
        on_source = self.settings["offset-syncs.topic.location"] == "source"
        return self.policy.offset_syncs_topic(self.target if on_source else self.source)

    @property
    def checkpoints_topic(self) -> str:
        """On the target."""
        return self.policy.checkpoints_topic(self.source)


def _typed_settings(props: Mapping[str, Origin]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for key, (default, parse) in FLOW_SETTINGS.items():
        value, origin = props.get(key, (default, key))
        try:
            settings[key] = parse(value)
        except ValueError as e:
            raise ConfigError(origin, str(e)) from None
    return settings


def _make_policy(
    settings: Mapping[str, Any], props: Mapping[str, Origin], source: str
) -> DefaultReplicationPolicy:
    name = settings["replication.policy.class"]
    try:
        cls = policy_class(name)
    except ValueError as e:
        raise ConfigError(
            props.get("replication.policy.class", ("", "replication.policy.class"))[1], str(e)
        ) from None
    separator = settings["replication.policy.separator"]
    internal = settings["replication.policy.internal.topic.separator.enabled"]
    if cls is IdentityReplicationPolicy:
        return IdentityReplicationPolicy(separator, internal, source, settings[PROVENANCE_KEY])
    return cls(separator, internal)


def build_flow(raw: Mapping[str, str], source: str, target: str) -> Flow:
    props = connector_props(raw, source, target)
    settings = _typed_settings(props)
    eos_key = "exactly.once.source.support"
    eos_value, eos_origin = cluster_props(raw, target).get(
        eos_key, (EOS_SOURCE_SUPPORT[0], f"{target}.{eos_key}")
    )
    try:
        eos = EOS_SOURCE_SUPPORT[1](eos_value)
    except ValueError as e:
        raise ConfigError(eos_origin, str(e)) from None
    flow = Flow(
        source,
        target,
        settings,
        props,
        _make_policy(settings, props, source),
        NameFilter(settings["topics"], settings["topics.exclude"]),
        NameFilter(settings["groups"], settings["groups.exclude"]),
        ConfigPropertyFilter(settings["config.properties.exclude"]),
        eos,
    )
    for side, role in ((s, r) for s in ("source", "target") for r in CLIENT_ROLES):
        flow.client_config(side, role)  # a client setting librdkafka cannot take: refused now
    if flow.enabled and settings["exactly.once.support"] == "required" and eos != "enabled":
        raise ConfigError(
            flow.origin("exactly.once.support"),
            f"required, but {target}.exactly.once.source.support is {eos}, not enabled",
        )
    return flow


def _parse_clusters(raw: Mapping[str, str]) -> tuple[str, ...]:
    if "clusters" not in raw:
        raise ConfigError("clusters", "missing: list the cluster aliases, e.g. clusters = A, B")
    aliases: list[str] = []
    for alias in parse_list(raw["clusters"]):
        if not _ALIAS.fullmatch(alias):
            raise ConfigError(
                "clusters", f"{alias!r} is not a cluster alias (letters, digits, '.', '_', '-')"
            )
        if alias not in aliases:
            aliases.append(alias)
    if not aliases:
        raise ConfigError("clusters", "empty: list the cluster aliases, e.g. clusters = A, B")
    return tuple(aliases)


def _check_flow_keys(raw: Mapping[str, str], clusters: tuple[str, ...]) -> None:
    """Every `X->Y.` key names two known, different clusters."""
    known = ", ".join(clusters)
    for key in raw:
        if "->" not in key:
            continue
        source, rest = key.split("->", 1)
        target = next((c for c in clusters if rest.startswith(c + ".")), None)
        if source not in clusters:
            raise ConfigError(key, f"unknown cluster {source!r} (clusters = {known})")
        if target is None:
            raise ConfigError(
                key, f"unknown cluster {rest.split('.', 1)[0]!r} (clusters = {known})"
            )
        if source == target:
            raise ConfigError(key, "a flow needs two different clusters")


def _check_bootstrap(raw: Mapping[str, str], clusters: tuple[str, ...]) -> None:
    for key in raw:
        if key.endswith(".bootstrap.servers") and not key.startswith(
            tuple(f"{c}." for c in clusters) + tuple(f"{r}." for r in CLIENT_ROLES)
        ):
            raise ConfigError(key, f"unknown cluster (clusters = {', '.join(clusters)})")
    for alias in clusters:
        value = raw.get(f"{alias}.bootstrap.servers", raw.get("bootstrap.servers", ""))
        if not value.strip():
            raise ConfigError(
                f"{alias}.bootstrap.servers", "missing: where to reach cluster " + alias
            )


def _check_loops(flows: Mapping[tuple[str, str], Flow]) -> None:
    """Flows in a loop must not copy records back forever: refuse a loop through a flow whose
    policy keeps names and has no provenance headers."""
    edges: dict[str, list[str]] = {}
    for (source, target), flow in flows.items():
        if flow.enabled:
            edges.setdefault(source, []).append(target)
    for flow in flows.values():
        if not flow.enabled or flow.policy.prevents_record_loops():
            continue
        path = _path(edges, flow.target, flow.source)
        if path is not None:
            loop = "->".join([flow.source, *path])
            key = (
                flow.origin(PROVENANCE_KEY)
                if PROVENANCE_KEY in flow.props
                else flow.origin("replication.policy.class")
            )
            raise ConfigError(
                key,
                f"flows {loop} form a loop and IdentityReplicationPolicy keeps topic names, so records "
                f"would be copied back forever: set {PROVENANCE_KEY}=true or use DefaultReplicationPolicy",
            )


def _path(edges: Mapping[str, list[str]], start: str, goal: str) -> list[str] | None:
    """The clusters from start to goal along enabled flows (breadth first), None if unreachable."""
    previous: dict[str, str | None] = {start: None}
    queue = [start]
    for node in queue:
        if node == goal:
            path = [node]
            while (back := previous[path[-1]]) is not None:
                path.append(back)
            return path[::-1]
        for nxt in edges.get(node, []):
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    return None


@dataclass(frozen=True)
class MirrorMakerConfig:
    """A validated `mm2.properties`: its clusters and a `Flow` for every ordered pair."""

    clusters: tuple[str, ...]
    raw: Mapping[str, str]
    flows: Mapping[tuple[str, str], Flow]

    @classmethod
    def from_properties(cls, raw: Mapping[str, str]) -> MirrorMakerConfig:
        raw = dict(raw)
        clusters = _parse_clusters(raw)
        _check_flow_keys(raw, clusters)
        _check_bootstrap(raw, clusters)
        flows = {(s, t): build_flow(raw, s, t) for s in clusters for t in clusters if s != t}
        _check_loops(flows)
        return cls(clusters, raw, flows)

    def flow(self, source: str, target: str) -> Flow:
        return self.flows[(source, target)]

    def enabled_flows(self) -> list[Flow]:
        return [f for f in self.flows.values() if f.enabled]

    def cluster_client_config(self, alias: str, role: str) -> dict[str, str]:
        """A client of one cluster outside any flow (e.g. for `translate_offsets`)."""
        assert role in CLIENT_ROLES
        props = cluster_props(self.raw, alias)
        return _librdkafka(_with_prefix(props, f"{role}."))


def load(path: str | Path) -> MirrorMakerConfig:
    """Read and validate an `mm2.properties` file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(str(path), e.strerror or str(e)) from None
    try:
        return MirrorMakerConfig.from_properties(parse_properties(text))
    except PropertiesError as e:
        raise ConfigError(str(path), str(e)) from None
