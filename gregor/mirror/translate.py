"""`translate_offsets`: where a consumer group should resume on this cluster after failing over
from another, read from the checkpoints the mirror wrote (RemoteClusterUtils.translateOffsets).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gregor.mirror import clients
from gregor.mirror.offsets import offsets_from_checkpoints
from gregor.mirror.policy import DefaultReplicationPolicy


def translate_offsets(
    target: str | Mapping[str, str],
    source_alias: str,
    group: str,
    policy: DefaultReplicationPolicy | None = None,
    timeout_s: float = clients.ADMIN_TIMEOUT_S,
) -> dict[Any, int]:
    """`group`'s offsets on `target` (a bootstrap string or a client config) translated from
    cluster `source_alias`: {TopicPartition(remote topic, partition): offset}, from the
    latest checkpoint of each partition in `<source_alias>.checkpoints.internal`. Empty when
    no checkpoint of the group exists yet."""
    from confluent_kafka import TopicPartition

    config = {"bootstrap.servers": target} if isinstance(target, str) else dict(target)
    config.setdefault("group.id", f"translate-offsets-{source_alias}")
    config["enable.auto.commit"] = "false"
    topic = (policy or DefaultReplicationPolicy()).checkpoints_topic(source_alias)
    consumer = clients.consumer(config)
    try:
        records = clients.read_to_end(consumer, topic, timeout_s)
    finally:
        consumer.close()
    offsets = offsets_from_checkpoints(((m.key(), m.value()) for m in records), group)
    return {TopicPartition(t, p): offset for (t, p), (offset, _) in offsets.items()}
