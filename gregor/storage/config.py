"""The per-log settings storage honours, under Kafka's topic config names.

`LogConfig.from_topic_configs({"segment.bytes": "1048576", ...})` builds one from the strings a
topic's configuration holds; anything not named takes Kafka's default. The broker layer owns the
full config catalogue (validation, broker-level `log.*` defaults, sources); this is the slice that
storage reads on every append, kept as plain attributes so the hot path pays one lookup.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gregor.protocol.records.validate import uncompressed_limit

LONG_MAX = (1 << 63) - 1

# topic config name -> attribute (its parser follows the attribute's type)
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
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "delete.retention.ms": "delete_retention_ms",
}


@functools.lru_cache(maxsize=64)
def _holds_compact(cleanup_policy: str) -> bool:
    return "compact" in cleanup_policy.split(",")


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
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3600 * 1000
    # Log compaction (cleaner.py).
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 24 * 3600 * 1000
    # Derived from the above when made (`__post_init__`), read once a produced batch (as
    # attributes: a property would cost a call each): the topic stamps LogAppendTime;
    # cleanup.policy holds `compact` (alone or with `delete`); the most a batch's records may
    # decompress to (`validate.uncompressed_limit` of max.message.bytes).
    log_append_time: bool = field(init=False, repr=False, compare=False)
    compact: bool = field(init=False, repr=False, compare=False)
    max_uncompressed_bytes: int = field(init=False, repr=False, compare=False)

    @classmethod
    def from_topic_configs(
        cls, configs: dict[str, str], base: LogConfig | None = None
    ) -> LogConfig:
        base = base or cls()
        changes: dict[str, Any] = {}
        types = {f.name: f.type for f in fields(cls)}
        for key, value in configs.items():
            attr = _NAMES.get(key)
            if attr is None or value is None:
                continue
            kind = types[attr]
            if kind in ("str", str):
                changes[attr] = value
            elif kind in ("float", float):
                changes[attr] = float(value)
            else:
                changes[attr] = int(value)
        return replace(base, **changes)

    def __post_init__(self) -> None:
        set_derived = object.__setattr__  # (frozen)
        set_derived(self, "log_append_time", self.message_timestamp_type == "LogAppendTime")
        set_derived(self, "compact", _holds_compact(self.cleanup_policy))
        set_derived(self, "max_uncompressed_bytes", uncompressed_limit(self.max_message_bytes))
