"""The configuration catalogue: every broker and topic config we know, with Kafka's names,
types, defaults and validation, and how a topic config falls back to its broker-level synonym.

A topic config's value comes from, in order: the topic's own (DYNAMIC_TOPIC_CONFIG), a dynamic
broker default set with AlterConfigs on the broker (DYNAMIC_DEFAULT_BROKER_CONFIG /
DYNAMIC_BROKER_CONFIG), `server.properties` or `--set` (STATIC_BROKER_CONFIG), then Kafka's
default (DEFAULT_CONFIG). `describe_topic_config` reports the value with that source and the
synonyms, as DescribeConfigs does.

Values are stored as the strings users give (as Kafka stores them); `parse` turns one into its
typed value and raises `ConfigError` (INVALID_CONFIG) naming the key and the reason.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gregor.security import replication_quotas
from gregor.storage.config import LONG_MAX, LogConfig

# DescribeConfigs ConfigType
UNKNOWN, BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(10)
# DescribeConfigs ConfigSource, by its number on the wire
SOURCE_UNKNOWN = 0
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_BROKER_LOGGER_CONFIG = 6

INT_MAX = (1 << 31) - 1


class ConfigError(ValueError):
    """An invalid config value; the message names the key and the reason."""


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: int
    default: str | None
    validator: Callable[[Any], str | None] | None = None  # returns a reason, or None if fine
    synonyms: tuple[str, ...] = ()  # broker-level names, most specific first
    read_only: bool = False
    sensitive: bool = False

    def parse(self, value: str | None) -> Any:
        if value is None:
            return None
        try:
            typed = _parse(self.type, value)
        except ValueError:
            raise ConfigError(
                f"Invalid value {value} for configuration {self.name}: not a valid "
                f"{_TYPE_NAMES[self.type]}"
            ) from None
        if self.validator is not None:
            reason = self.validator(typed)
            if reason:
                raise ConfigError(f"Invalid value {value} for configuration {self.name}: {reason}")
        return typed


_TYPE_NAMES = {
    BOOLEAN: "boolean",
    STRING: "string",
    INT: "int",
    SHORT: "short",
    LONG: "long",
    DOUBLE: "double",
    LIST: "list",
    CLASS: "class",
    PASSWORD: "password",
}


def _parse(type_: int, value: str) -> Any:
    v = value.strip()
    if type_ == BOOLEAN:
        if v.lower() not in ("true", "false"):
            raise ValueError(value)
        return v.lower() == "true"
    if type_ in (INT, SHORT):
        n = int(v)
        if not -(1 << 31) <= n <= INT_MAX:
            raise ValueError(value)
        return n
    if type_ == LONG:
        n = int(v)
        if not -(1 << 63) <= n <= LONG_MAX:
            raise ValueError(value)
        return n
    if type_ == DOUBLE:
        return float(v)
    if type_ == LIST:
        return [p.strip() for p in v.split(",") if p.strip()]
    return value


def at_least(n: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"Value must be at least {n}"


def between(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"Value must be between {lo} and {hi}"


def one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"String must be one of: {', '.join(choices)}"


def subset_of(*choices: str) -> Callable[[Any], str | None]:
    def check(v: list[str]) -> str | None:
        bad = [x for x in v if x not in choices]
        if bad or not v:
            return f"List must be a non-empty subset of: {', '.join(choices)}"
        return None

    return check


def parse_connections_per_ip_overrides(value: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: `host:count,host:count` (a host or an IP; split at the
    last colon, so an IPv6 address needs no brackets: `::1:50`). ValueError names the bad item."""
    out: dict[str, int] = {}
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        host, colon, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not colon or not _HOST_PATTERN.fullmatch(host) or not count.strip().isdigit():
            raise ValueError(f"expected host:count, got {item!r}")
        out[host] = int(count)
    return out


_HOST_PATTERN = re.compile(r"[0-9a-zA-Z\-%._:]+")


def _overrides_problem(value: str) -> str | None:
    try:
        parse_connections_per_ip_overrides(value)
    except ValueError as exc:
        return str(exc)
    return None


STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _authorizer_problem(value: str) -> str | None:
    if value in ("", STANDARD_AUTHORIZER):
        return None
    return f"the authorizer served is Kafka's {STANDARD_AUTHORIZER} (or none: empty)"


_HTTP_LISTENER = re.compile(r"^(?:http://)?(\[[0-9a-fA-F:.]+\]|[0-9a-zA-Z\-._]*):(\d{1,5})/?$")


def _http_listener_problem(value: str) -> str | None:
    """`metrics.listener`, `console.listener`: empty (off) or `http://HOST:PORT` (`HOST:PORT`
    too; port 0 picks one)."""
    if not value:
        return None
    found = _HTTP_LISTENER.match(value.strip())
    if found is None or int(found[2]) > 65535:
        return "expected http://HOST:PORT (port 0 to 65535), or empty for none"
    return None


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

# name, type, default, validator, broker synonyms (most specific first)
TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in [
        ConfigDef(
            "cleanup.policy",
            LIST,
            "delete",
            subset_of("delete", "compact"),
            ("log.cleanup.policy",),
        ),
        ConfigDef(
            "compression.type",
            STRING,
            "producer",
            one_of(*COMPRESSION_TYPES),
            ("compression.type",),
        ),
        ConfigDef("compression.gzip.level", INT, "-1", None, ("compression.gzip.level",)),
        ConfigDef("compression.lz4.level", INT, "9", between(1, 17), ("compression.lz4.level",)),
        ConfigDef(
            "compression.zstd.level", INT, "3", between(-131072, 22), ("compression.zstd.level",)
        ),
        ConfigDef(
            "delete.retention.ms",
            LONG,
            "86400000",
            at_least(0),
            ("log.cleaner.delete.retention.ms",),
        ),
        ConfigDef(
            "file.delete.delay.ms", LONG, "60000", at_least(0), ("log.segment.delete.delay.ms",)
        ),
        ConfigDef(
            "flush.messages", LONG, str(LONG_MAX), at_least(1), ("log.flush.interval.messages",)
        ),
        ConfigDef("flush.ms", LONG, str(LONG_MAX), at_least(0), ("log.flush.interval.ms",)),
        ConfigDef("index.interval.bytes", INT, "4096", at_least(0), ("log.index.interval.bytes",)),
        ConfigDef(
            "max.compaction.lag.ms",
            LONG,
            str(LONG_MAX),
            at_least(1),
            ("log.cleaner.max.compaction.lag.ms",),
        ),
        ConfigDef("max.message.bytes", INT, "1048588", at_least(0), ("message.max.bytes",)),
        ConfigDef(
            "message.timestamp.type",
            STRING,
            "CreateTime",
            one_of("CreateTime", "LogAppendTime"),
            ("log.message.timestamp.type",),
        ),
        ConfigDef(
            "message.timestamp.before.max.ms",
            LONG,
            str(LONG_MAX),
            at_least(0),
            ("log.message.timestamp.before.max.ms",),
        ),
        ConfigDef(
            "message.timestamp.after.max.ms",
            LONG,
            "3600000",
            at_least(0),
            ("log.message.timestamp.after.max.ms",),
        ),
        ConfigDef(
            "min.cleanable.dirty.ratio",
            DOUBLE,
            "0.5",
            between(0, 1),
            ("log.cleaner.min.cleanable.ratio",),
        ),
        ConfigDef(
            "min.compaction.lag.ms", LONG, "0", at_least(0), ("log.cleaner.min.compaction.lag.ms",)
        ),
        ConfigDef("min.insync.replicas", INT, "1", at_least(1), ("min.insync.replicas",)),
        # which replicas the replication throttles hold back: `*` or `partition:broker,...`
        ConfigDef(
            replication_quotas.LEADER_REPLICAS, LIST, "", replication_quotas.replicas_problem
        ),
        ConfigDef(
            replication_quotas.FOLLOWER_REPLICAS, LIST, "", replication_quotas.replicas_problem
        ),
        ConfigDef("preallocate", BOOLEAN, "false", None, ("log.preallocate",)),
        ConfigDef("retention.bytes", LONG, "-1", None, ("log.retention.bytes",)),
        ConfigDef(
            "retention.ms",
            LONG,
            "604800000",
            at_least(-1),
            ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
        ),
        ConfigDef("segment.bytes", INT, "1073741824", at_least(14), ("log.segment.bytes",)),
        ConfigDef(
            "segment.index.bytes", INT, "10485760", at_least(8), ("log.index.size.max.bytes",)
        ),
        ConfigDef(
            "segment.jitter.ms",
            LONG,
            "0",
            at_least(0),
            ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        ),
        ConfigDef("segment.ms", LONG, "604800000", at_least(1), ("log.roll.ms", "log.roll.hours")),
        ConfigDef(
            "unclean.leader.election.enable",
            BOOLEAN,
            "false",
            None,
            ("unclean.leader.election.enable",),
        ),
    ]
}

# Broker-level names whose unit differs from the topic config they feed.
_UNIT_SCALE = {
    "log.retention.minutes": 60_000,
    "log.retention.hours": 3_600_000,
    "log.roll.hours": 3_600_000,
    "log.roll.jitter.hours": 3_600_000,
}

_BROKER_ONLY: list[ConfigDef] = [
    ConfigDef("node.id", INT, "1", at_least(0), read_only=True),
    ConfigDef("broker.id", INT, "-1", None, read_only=True),
    ConfigDef(
        "process.roles",
        LIST,
        "broker,controller",
        subset_of("broker", "controller"),
        read_only=True,
    ),
    ConfigDef("listeners", STRING, "PLAINTEXT://127.0.0.1:9092", None, read_only=True),
    ConfigDef("advertised.listeners", STRING, None, None, read_only=True),
    ConfigDef("log.dirs", STRING, None, None, read_only=True),
    ConfigDef("log.dir", STRING, "./gregor-data", None, read_only=True),
    ConfigDef("log.dir.failure.timeout.ms", LONG, "30000", at_least(1), read_only=True),
    ConfigDef("num.partitions", INT, "1", at_least(1)),
    ConfigDef("default.replication.factor", INT, "1", at_least(1)),
    ConfigDef("auto.create.topics.enable", BOOLEAN, "true", None),
    ConfigDef("delete.topic.enable", BOOLEAN, "true", None),
    # What one connection, and all of them, may cost (runtime/server.py, runtime/connection.py).
    # Static in Kafka, but for the connection counts, which are dynamic broker configs.
    ConfigDef("socket.request.max.bytes", INT, "104857600", at_least(1), read_only=True),
    ConfigDef("queued.max.requests", INT, "500", at_least(1), read_only=True),
    ConfigDef("queued.max.request.bytes", LONG, "-1", None, read_only=True),
    ConfigDef("connections.max.idle.ms", LONG, "600000", None, read_only=True),
    ConfigDef("connection.failed.authentication.delay.ms", INT, "100", at_least(0), read_only=True),
    # KIP-368: a SASL session's longest life (0: none); also per listener and mechanism,
    # listener.name.<l>.<mechanism>.connections.max.reauth.ms (security_settings.py).
    ConfigDef("connections.max.reauth.ms", LONG, "0", None, read_only=True),
    ConfigDef("max.connections", INT, str(INT_MAX), at_least(0)),
    ConfigDef("max.connections.per.ip", INT, str(INT_MAX), at_least(0)),
    ConfigDef("max.connections.per.ip.overrides", STRING, "", _overrides_problem),
    ConfigDef("max.connection.creation.rate", INT, str(INT_MAX), at_least(0)),
    ConfigDef("log.retention.check.interval.ms", LONG, "300000", at_least(1)),
    ConfigDef("log.flush.scheduler.interval.ms", LONG, str(LONG_MAX), None),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", INT, "60000", at_least(0)),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", INT, "60000", at_least(0)),
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", LONG, "5000", at_least(1)),
    ConfigDef("offsets.topic.num.partitions", INT, "50", at_least(1), read_only=True),
    ConfigDef("offsets.topic.replication.factor", SHORT, "3", at_least(1), read_only=True),
    ConfigDef("offsets.retention.minutes", INT, "10080", at_least(1)),
    ConfigDef("offsets.retention.check.interval.ms", LONG, "600000", at_least(1), read_only=True),
    ConfigDef("offsets.topic.segment.bytes", INT, "104857600", at_least(1), read_only=True),
    ConfigDef("offsets.load.buffer.size", INT, "5242880", at_least(1), read_only=True),
    ConfigDef("offsets.commit.timeout.ms", INT, "5000", at_least(1), read_only=True),
    ConfigDef("offset.metadata.max.bytes", INT, "4096", None, read_only=True),
    ConfigDef("transaction.state.log.num.partitions", INT, "50", at_least(1), read_only=True),
    ConfigDef("transaction.state.log.replication.factor", SHORT, "3", at_least(1), read_only=True),
    ConfigDef("transaction.state.log.min.isr", INT, "2", at_least(1), read_only=True),
    ConfigDef("transaction.state.log.segment.bytes", INT, "104857600", at_least(1), read_only=True),
    ConfigDef(
        "transaction.state.log.load.buffer.size", INT, "5242880", at_least(1), read_only=True
    ),
    ConfigDef("transactional.id.expiration.ms", INT, "604800000", at_least(1), read_only=True),
    ConfigDef(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        INT,
        "10000",
        at_least(1),
        read_only=True,
    ),
    ConfigDef(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        INT,
        "3600000",
        at_least(1),
        read_only=True,
    ),
    ConfigDef("group.initial.rebalance.delay.ms", INT, "3000", at_least(0)),
    ConfigDef("group.max.size", INT, str(INT_MAX), at_least(1)),
    ConfigDef("group.min.session.timeout.ms", INT, "6000", None),
    ConfigDef("group.max.session.timeout.ms", INT, "1800000", None),
    ConfigDef("transaction.max.timeout.ms", INT, "900000", at_least(1)),
    # Idempotent producers idle this long are forgotten by each partition (producer_state.py).
    ConfigDef("producer.id.expiration.ms", INT, "86400000", at_least(1)),
    ConfigDef(
        "producer.id.expiration.check.interval.ms", INT, "600000", at_least(1), read_only=True
    ),
    ConfigDef("cluster.id", STRING, None, None, read_only=True),
    ConfigDef("broker.rack", STRING, None, None, read_only=True),
    ConfigDef("controller.quorum.voters", LIST, "", None, read_only=True),
    ConfigDef("controller.quorum.bootstrap.servers", LIST, "", None, read_only=True),
    ConfigDef("controller.listener.names", STRING, "CONTROLLER", None, read_only=True),
    # The metadata log's snapshots and segments (metadata/raft_store.py).
    ConfigDef(
        "metadata.log.max.record.bytes.between.snapshots",
        LONG,
        "20971520",
        at_least(1),
        read_only=True,
    ),
    ConfigDef(
        "metadata.log.max.snapshot.interval.ms", LONG, "3600000", at_least(0), read_only=True
    ),
    ConfigDef("metadata.log.segment.bytes", INT, "1073741824", at_least(12), read_only=True),
    # KRaft broker liveness (KIP-631): heartbeats to the active controller, fenced after the
    # session timeout without one.
    ConfigDef("broker.heartbeat.interval.ms", INT, "2000", at_least(1), read_only=True),
    ConfigDef("broker.session.timeout.ms", INT, "9000", at_least(1), read_only=True),
    # Partition data replication (replication/fetcher_session.py): followers fetch
    # from leaders; a follower not caught up for replica.lag.time.max.ms leaves the ISR.
    ConfigDef("replica.lag.time.max.ms", LONG, "30000", at_least(1), read_only=True),
    ConfigDef("replica.fetch.max.bytes", INT, "1048576", at_least(0), read_only=True),
    ConfigDef("replica.fetch.response.max.bytes", INT, "10485760", at_least(0), read_only=True),
    ConfigDef("replica.fetch.wait.max.ms", INT, "500", at_least(0), read_only=True),
    ConfigDef("replica.fetch.min.bytes", INT, "1", at_least(1), read_only=True),
    ConfigDef("replica.fetch.backoff.ms", INT, "1000", at_least(0), read_only=True),
    ConfigDef("replica.socket.timeout.ms", INT, "30000", at_least(1), read_only=True),
    ConfigDef("num.replica.fetchers", INT, "1", at_least(1), read_only=True),
    # Incremental fetch sessions (KIP-227, replication/fetch_sessions.py)
    ConfigDef(
        "max.incremental.fetch.session.cache.slots", INT, "1000", at_least(0), read_only=True
    ),
    ConfigDef(
        "min.incremental.fetch.session.eviction.ms", INT, "120000", at_least(0), read_only=True
    ),
    ConfigDef("controlled.shutdown.enable", BOOLEAN, "true", None, read_only=True),
    # Automatic preferred leader election by the active controller (controller/leader_balance.py).
    ConfigDef("auto.leader.rebalance.enable", BOOLEAN, "true", None, read_only=True),
    ConfigDef("leader.imbalance.check.interval.seconds", LONG, "300", at_least(1), read_only=True),
    ConfigDef("leader.imbalance.per.broker.percentage", INT, "10", None, read_only=True),
    ConfigDef("inter.broker.listener.name", STRING, None, None, read_only=True),
    ConfigDef("listener.security.protocol.map", STRING, None, None, read_only=True),
    ConfigDef("num.network.threads", INT, "3", at_least(1), read_only=True),
    ConfigDef("num.io.threads", INT, "8", at_least(1), read_only=True),
    # client quotas (security/quotas.py): the sliding window their rates are measured over
    ConfigDef("quota.window.num", INT, "11", at_least(1), read_only=True),
    ConfigDef("quota.window.size.seconds", INT, "1", at_least(1), read_only=True),
    # replication throttles (security/replication_quotas.py): bytes/s, dynamic, per broker
    ConfigDef(replication_quotas.LEADER_RATE, LONG, str(LONG_MAX), at_least(0)),
    ConfigDef(replication_quotas.FOLLOWER_RATE, LONG, str(LONG_MAX), at_least(0)),
    ConfigDef("replication.quota.window.num", INT, "11", at_least(1), read_only=True),
    ConfigDef("replication.quota.window.size.seconds", INT, "1", at_least(1), read_only=True),
    ConfigDef("num.recovery.threads.per.data.dir", INT, "2", at_least(1), read_only=True),
    ConfigDef("socket.send.buffer.bytes", INT, "102400", None, read_only=True),
    ConfigDef("socket.receive.buffer.bytes", INT, "102400", None, read_only=True),
    ConfigDef("log.cleaner.enable", BOOLEAN, "true", None),
    ConfigDef("log.cleaner.threads", INT, "1", at_least(0)),
    ConfigDef("log.cleaner.dedupe.buffer.size", LONG, "134217728", None),
    ConfigDef("log.cleaner.io.max.bytes.per.second", DOUBLE, "1.7976931348623157E308", None),
    ConfigDef("log.cleaner.backoff.ms", LONG, "15000", at_least(0)),
    ConfigDef("log.cleaner.io.buffer.size", INT, "524288", at_least(0)),
    ConfigDef("log.cleaner.io.buffer.load.factor", DOUBLE, "0.9", None),
    # gregor's own (not Kafka's): clean in a child process rather than a thread of the broker
    # (runtime/cleaner_thread.py says why); on Linux only.
    ConfigDef("log.cleaner.worker.process", BOOLEAN, "true", None, read_only=True),
    # gregor's own: log event-loop stalls and gc pauses longer than this (runtime/stall_monitor.py)
    ConfigDef("gregor.loop.stall.log.ms", DOUBLE, "0", at_least(0), read_only=True),
    # gregor's own: the web console inside this node (gregor/console), off when empty
    ConfigDef("console.listener", STRING, "", _http_listener_problem, read_only=True),
    ConfigDef("console.read.only", BOOLEAN, "true", None, read_only=True),
    # Prometheus metrics and health checks over HTTP (gregor/runtime/metrics_listener.py); off
    # when empty. As Redpanda's admin API serves /metrics: http://127.0.0.1:9644
    ConfigDef("metrics.listener", STRING, "", _http_listener_problem, read_only=True),
    ConfigDef("log.retention.minutes", INT, None, None),
    ConfigDef("log.retention.hours", INT, "168", None),
    ConfigDef("log.roll.hours", INT, "168", at_least(1)),
    ConfigDef("log.roll.jitter.hours", INT, "0", at_least(0)),
    # ACLs (gregor/security/authorizer.py): Kafka's StandardAuthorizer, the one authorizer served
    ConfigDef("authorizer.class.name", STRING, "", _authorizer_problem, read_only=True),
    ConfigDef("super.users", STRING, "", None, read_only=True),
    ConfigDef("allow.everyone.if.no.acl.found", BOOLEAN, "false", None, read_only=True),
]

BROKER_CONFIGS: dict[str, ConfigDef] = {d.name: d for d in _BROKER_ONLY}
for _topic_def in TOPIC_CONFIGS.values():
    for _syn in _topic_def.synonyms:
        if _syn not in BROKER_CONFIGS:
            default = _topic_def.default if _syn == _topic_def.synonyms[0] else None
            BROKER_CONFIGS[_syn] = ConfigDef(_syn, _topic_def.type, default, _topic_def.validator)
# Only the most specific retention/roll names carry defaults; the coarser ones are fallbacks.
BROKER_CONFIGS["log.retention.ms"] = ConfigDef("log.retention.ms", LONG, None, at_least(-1))
BROKER_CONFIGS["log.roll.ms"] = ConfigDef("log.roll.ms", LONG, None, at_least(1))


def validate_topic_configs(configs: Mapping[str, str | None]) -> None:
    """Raise ConfigError for an unknown key or a bad value among topic configs."""
    for key, value in configs.items():
        d = TOPIC_CONFIGS.get(key)
        if d is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        d.parse(value)


@dataclass(frozen=True)
class Resolved:
    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    type: int
    synonyms: tuple[tuple[str, str | None, int], ...]  # (name, value, source)


class DynamicConfigs(Mapping[str, str]):
    """Dynamic broker configs as one broker sees them: its own (set on BROKER "<id>") over the
    cluster-wide defaults (set on BROKER "")."""

    def __init__(self, default: Mapping[str, str], node: Mapping[str, str]) -> None:
        self.default = default
        self.node = node

    def __getitem__(self, key: str) -> str:
        return self.node[key] if key in self.node else self.default[key]

    def __iter__(self) -> Iterator[str]:
        return iter({**self.default, **self.node})

    def __len__(self) -> int:
        return len({**self.default, **self.node})

    def source(self, key: str) -> int:
        return DYNAMIC_BROKER_CONFIG if key in self.node else DYNAMIC_DEFAULT_BROKER_CONFIG


def _broker_value(
    name: str, static: Mapping[str, str], dynamic: Mapping[str, str]
) -> tuple[str | None, int] | None:
    if name in dynamic:
        if isinstance(dynamic, DynamicConfigs):
            return dynamic[name], dynamic.source(name)
        return dynamic[name], DYNAMIC_DEFAULT_BROKER_CONFIG
    if name in static:
        return static[name], STATIC_BROKER_CONFIG
    return None


def _scaled(name: str, value: str | None) -> str | None:
    scale = _UNIT_SCALE.get(name)
    if scale is None or value is None:
        return value
    return str(int(value) * scale)


def resolve_topic_config(
    name: str,
    topic: Mapping[str, str],
    static: Mapping[str, str],
    dynamic: Mapping[str, str],
) -> Resolved:
    d = TOPIC_CONFIGS[name]
    synonyms: list[tuple[str, str | None, int]] = []
    if name in topic:
        synonyms.append((name, topic[name], DYNAMIC_TOPIC_CONFIG))
    for syn in d.synonyms:
        found = _broker_value(syn, static, dynamic)
        if found is not None:
            synonyms.append((syn, _scaled(syn, found[0]), found[1]))
    synonyms.append((d.synonyms[0] if d.synonyms else name, d.default, DEFAULT_CONFIG))
    value, source = synonyms[0][1], synonyms[0][2]
    return Resolved(name, value, source, False, d.sensitive, d.type, tuple(synonyms))


def resolve_broker_config(
    name: str, static: Mapping[str, str], dynamic: Mapping[str, str]
) -> Resolved:
    d = BROKER_CONFIGS[name]
    synonyms: list[tuple[str, str | None, int]] = []
    found = _broker_value(name, static, dynamic)
    if found is not None:
        synonyms.append((name, found[0], found[1]))
    synonyms.append((name, d.default, DEFAULT_CONFIG))
    value, source = synonyms[0][1], synonyms[0][2]
    return Resolved(name, value, source, d.read_only, d.sensitive, d.type, tuple(synonyms))


def effective_topic_configs(
    topic: Mapping[str, str], static: Mapping[str, str], dynamic: Mapping[str, str]
) -> dict[str, str | None]:
    return {n: resolve_topic_config(n, topic, static, dynamic).value for n in TOPIC_CONFIGS}


def log_config(
    topic: Mapping[str, str], static: Mapping[str, str], dynamic: Mapping[str, str]
) -> LogConfig:
    """The storage settings of a topic, after every fallback. Remembered for the last few
    combinations of settings (a LogConfig is immutable): 10,000 partitions of a few topics
    resolve their ~40 configs once per topic, not once per partition."""
    key = (tuple(topic.items()), tuple(static.items()), tuple(dynamic.items()))
    try:
        return _log_config_of(key)
    except TypeError:  # a value that is not hashable: resolved without the cache
        return _log_config(topic, static, dynamic)


@functools.lru_cache(maxsize=256)
def _log_config_of(
    key: tuple[
        tuple[tuple[str, str], ...], tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]
    ],
) -> LogConfig:
    topic, static, dynamic = (dict(items) for items in key)
    return _log_config(topic, static, dynamic)


def _log_config(
    topic: Mapping[str, str], static: Mapping[str, str], dynamic: Mapping[str, str]
) -> LogConfig:
    values = effective_topic_configs(topic, static, dynamic)
    policy = values.get("cleanup.policy") or "delete"
    present = {k: v for k, v in values.items() if v is not None and k != "cleanup.policy"}
    cfg = LogConfig.from_topic_configs(present)
    return LogConfig.from_topic_configs({"cleanup.policy": policy.replace(" ", "")}, cfg)


# A listener's TLS stores, updatable with AlterConfigs without a restart, as in Kafka: per
# listener only (`listener.name.<listener>.ssl.keystore.location`, ...). New connections use them.
DYNAMIC_LISTENER_SSL = frozenset(
    {
        "keystore.location",
        "keystore.type",
        "keystore.password",
        "keystore.certificate.chain",
        "keystore.key",
        "key.password",
        "truststore.location",
        "truststore.type",
        "truststore.password",
        "truststore.certificates",
    }
)
_LISTENER_SSL = re.compile(r"^listener\.name\.[^.]+\.ssl\.(.+)$", re.IGNORECASE)


def is_dynamic_listener_ssl(key: str) -> bool:
    found = _LISTENER_SSL.match(key)
    return found is not None and found[1].lower() in DYNAMIC_LISTENER_SSL


# A listener's own connection limits (Kafka's ListenerConnectionQuota: dynamic configs, at
# least 1), over the broker-wide max.connections and max.connection.creation.rate
# (runtime/connection_quotas.py).
LISTENER_CONNECTION_CONFIGS = ("max.connections", "max.connection.creation.rate")
_LISTENER_CONNECTIONS = re.compile(
    r"^listener\.name\.[^.]+\.(max\.connections|max\.connection\.creation\.rate)$",
    re.IGNORECASE,
)


def listener_config(key: str) -> ConfigDef | None:
    """The definition of a per-listener broker config (`listener.name.<l>.max.connections`,
    `listener.name.<l>.max.connection.creation.rate`); None for any other key."""
    if _LISTENER_CONNECTIONS.match(key):
        return ConfigDef(key, INT, None, at_least(1))
    return None
