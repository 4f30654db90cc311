"""The per-log settings storage honours, under Kafka's topic config names.

`LogConfig.from_topic_configs({"segment.bytes": "1048576", ...})` builds one from the strings a
topic's configuration holds; anything not named takes Kafka's default. The broker layer owns the
full config catalogue (validation, broker-level `log.*` defaults, sources); this is the slice that
storage reads on every append, kept as plain attributes so the hot path pays one lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

LONG_MAX = (1 << 63) - 1

# topic config name -> (attribute, parser)
_NAMES: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "max.message.bytes": "max_message_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "message.timestamp.type": "message_timestamp_type",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "cleanup.policy": "cleanup_policy",
    "compression.type": "compression_type",
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60000
    cleanup_policy: str = "delete"
    compression_type: str = "producer"

    @classmethod
    def from_topic_configs(cls, configs: dict[str, str], base: LogConfig | None = None) -> LogConfig:
        base = base or cls()
        changes: dict[str, Any] = {}
        types = {f.name: f.type for f in fields(cls)}
        for key, value in configs.items():
            attr = _NAMES.get(key)
            if attr is None or value is None:
                continue
            changes[attr] = value if types[attr] in ("str", str) else int(value)
        return replace(base, **changes)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"
