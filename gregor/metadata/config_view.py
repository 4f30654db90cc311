"""A broker's configuration as it is now: a key's dynamic value for this broker (or the cluster
default) from the metadata log, else its static value (server.properties, `--set`), else Kafka's
default; and what the log layer needs of it per topic.

    view = BrokerConfigView(store, node_id=1, static={"num.partitions": "3"})
    view.value("num.partitions")          # 3, typed by config_defs
    view.log_config_for("orders")         # LogConfig: topic configs over broker configs

Reads the store on every call, so a committed AlterConfigs is seen at once, without listeners.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gregor.metadata import config_defs
from gregor.metadata.store import TopicInfo
from gregor.storage.cleaner import CleanerConfig
from gregor.storage.config import LogConfig


class ConfigSource(Protocol):
    @property
    def topics(self) -> Mapping[str, TopicInfo]: ...

    def dynamic(self, node_id: int) -> Mapping[str, str]: ...


class BrokerConfigView:
    def __init__(self, store: ConfigSource, node_id: int, static: Mapping[str, str]) -> None:
        self.store = store
        self.node_id = node_id
        self.static = static

    def value(self, key: str) -> Any:
        """A broker config, typed, after dynamic and static overrides."""
        d = config_defs.BROKER_CONFIGS[key]
        raw = self.store.dynamic(self.node_id).get(key, self.static.get(key, d.default))
        return d.parse(raw)

    def log_config_for(self, topic: str) -> LogConfig:
        info = self.store.topics.get(topic)
        return config_defs.log_config(
            info.configs if info else {}, self.static, self.store.dynamic(self.node_id)
        )

    def min_insync_replicas(self, info: TopicInfo) -> int:
        resolved = config_defs.resolve_topic_config(
            "min.insync.replicas", info.configs, self.static, self.store.dynamic(self.node_id)
        )
        return int(resolved.value or 1)

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
