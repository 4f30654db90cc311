"""A broker's configuration as it is now: a key's dynamic value for this broker (or the cluster
default) from the metadata log, else its static value (server.properties, `--set`), else Kafka's
default; and what the log layer needs of it per topic.

    view = BrokerConfigView(store, node_id=1, static={"num.partitions": "3"})
    view.value("num.partitions")          # 3, typed by config_defs
    view.log_config_for("orders")         # LogConfig: topic configs over broker configs

Reads the store on every call, so a committed AlterConfigs is seen at once, without listeners.
What a topic's configs resolve to is kept per set of topic overrides, and a broker config's
typed value per key, while the dynamic broker configs are the same objects (the metadata image
replaces a resource's mapping when it changes, never edits it) and the static ones the same:
hosting a new topic then costs a lookup, not the resolution of every topic config, and a
config read on every request (a follower's Fetch reads the replication throttle's rate) a
dict lookup, not a parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gregor.metadata import config_defs
from gregor.metadata.store import TopicInfo
from gregor.storage.cleaner import CleanerConfig
from gregor.storage.config import LogConfig

MAX_RESOLVED = 1024  # sets of topic overrides kept resolved
_MISSING = object()
_IMMUTABLE = frozenset({int, float, str, bool, type(None)})


def _resolve(
    topic_configs: Mapping[str, str], static: Mapping[str, str], dynamic: Mapping[str, str]
) -> tuple[LogConfig, int]:
    min_isr = config_defs.resolve_topic_config(
        "min.insync.replicas", topic_configs, static, dynamic
    )
    return (
        config_defs.log_config(topic_configs, static, dynamic),
        int(min_isr.value or 1),
    )


class ConfigSource(Protocol):
    @property
    def topics(self) -> Mapping[str, TopicInfo]: ...

    def dynamic(self, node_id: int) -> Mapping[str, str]: ...


class BrokerConfigView:
    def __init__(self, store: ConfigSource, node_id: int, static: Mapping[str, str]) -> None:
        self.store = store
        self.node_id = node_id
        self.static = static
        # (topic overrides) -> (LogConfig, min.insync.replicas), for the dynamic configs' two
        # mappings in `_resolved_for` (compared by identity) and this static config.
        self._resolved: dict[tuple[tuple[str, str], ...], tuple[LogConfig, int]] = {}
        self._resolved_for: tuple[Any, Any, Any] | None = None
        self._values: dict[str, Any] = {}  # key -> typed value, for the same three mappings

    def value(self, key: str) -> Any:
        """A broker config, typed, after dynamic and static overrides."""
        dynamic = self.store.dynamic(self.node_id)
        kept = isinstance(dynamic, config_defs.DynamicConfigs)
        if isinstance(dynamic, config_defs.DynamicConfigs):  # `kept`, spelt so mypy narrows
            self._forget_unless_for(dynamic)
            found = self._values.get(key, _MISSING)
            if found is not _MISSING:
                return found
        d = config_defs.BROKER_CONFIGS[key]
        found = d.parse(dynamic.get(key, self.static.get(key, d.default)))
        if kept and type(found) in _IMMUTABLE:  # (a list is the caller's to change)
            self._values[key] = found
        return found

    def _forget_unless_for(self, dynamic: config_defs.DynamicConfigs) -> None:
        """Forget what is kept (`_resolved`, `_values`) if it was made for other dynamic or
        static mappings than these."""
        seen = self._resolved_for
        if (
            seen is None
            or seen[0] is not dynamic.default
            or seen[1] is not dynamic.node
            or seen[2] is not self.static
        ):
            self._resolved.clear()
            self._values.clear()
            self._resolved_for = (dynamic.default, dynamic.node, self.static)

    def raw(self, key: str) -> str | None:
        """A key's text, dynamic over static, None if neither sets it: for keys outside the
        catalogue such as a listener's own `listener.name.<listener>.max.connections`."""
        found = self.store.dynamic(self.node_id).get(key)
        return found if found is not None else self.static.get(key)

    def log_config_for(self, topic: str) -> LogConfig:
        info = self.store.topics.get(topic)
        return self._resolve(info.configs if info else {})[0]

    def min_insync_replicas(self, info: TopicInfo) -> int:
        return self._resolve(info.configs)[1]

    def _resolve(self, topic_configs: Mapping[str, str]) -> tuple[LogConfig, int]:
        dynamic = self.store.dynamic(self.node_id)
        if not isinstance(dynamic, config_defs.DynamicConfigs):
            return _resolve(topic_configs, self.static, dynamic)
        self._forget_unless_for(dynamic)
        key = tuple(sorted(topic_configs.items()))
        found = self._resolved.get(key)
        if found is None:
            found = self._resolved[key] = _resolve(topic_configs, self.static, dynamic)
            if len(self._resolved) > MAX_RESOLVED:
                del self._resolved[next(iter(self._resolved))]
        return found

    def cleaner_config(self) -> CleanerConfig:
        value = self.value
        return CleanerConfig(
            enable=bool(value("log.cleaner.enable")),
            threads=int(value("log.cleaner.threads")),
            dedupe_buffer_size=int(value("log.cleaner.dedupe.buffer.size")),
            io_buffer_size=int(value("log.cleaner.io.buffer.size")),
            io_buffer_load_factor=float(value("log.cleaner.io.buffer.load.factor")),
            io_max_bytes_per_second=float(value("log.cleaner.io.max.bytes.per.second")),
            backoff_ms=int(value("log.cleaner.backoff.ms")),
            in_process=bool(value("log.cleaner.worker.process")),
        )
