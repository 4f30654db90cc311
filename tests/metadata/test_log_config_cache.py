"""A topic's storage settings are resolved once per combination of settings: partitions of the
same topic share one LogConfig, and any change of a topic, static or dynamic setting is seen."""

from __future__ import annotations

from gregor.metadata import config_defs


def test_equal_settings_share_one_log_config_and_a_change_is_seen() -> None:
    static = {"log.segment.bytes": "2048"}
    first = config_defs.log_config({"retention.ms": "100"}, static, {})
    again = config_defs.log_config({"retention.ms": "100"}, dict(static), {})
    assert again is first and first.segment_bytes == 2048 and first.retention_ms == 100
    topic_changed = config_defs.log_config({"retention.ms": "200"}, static, {})
    assert topic_changed.retention_ms == 200
    dynamic = config_defs.log_config({"retention.ms": "100"}, static, {"log.segment.bytes": "4096"})
    assert dynamic.segment_bytes == 4096
    static_changed = config_defs.log_config({}, {"log.segment.bytes": "8192"}, {})
    assert static_changed.segment_bytes == 8192
    compact = config_defs.log_config({"cleanup.policy": "compact, delete"}, static, {})
    assert compact.compact and compact.cleanup_policy == "compact,delete"
