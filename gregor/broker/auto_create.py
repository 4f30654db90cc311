"""Topics made on first use: a Metadata (or Produce, or FindCoordinator) naming a topic that does
not exist creates it with the broker's defaults when `auto.create.topics.enable` allows."""

from __future__ import annotations

import logging
from collections.abc import Callable

from gregor.controller.admin import Admin, TopicSpec
from gregor.metadata.config_view import BrokerConfigView
from gregor.metadata.store import TopicInfo
from gregor.raft.storage_log import TOPIC as METADATA_TOPIC

log = logging.getLogger("gregor.broker")


def auto_creator(
    config: BrokerConfigView, admin: Admin, apply_metadata: Callable[[], None]
) -> Callable[[str], TopicInfo | None]:
    def maybe_auto_create(topic: str) -> TopicInfo | None:
        if not config.value("auto.create.topics.enable") or topic == METADATA_TOPIC:
            return None
        # Off the active controller of a quorum this raises LEADER_NOT_AVAILABLE once the
        # creation is sent to the controller (forwarding.py); on it, the commit is not awaited:
        # the client asks again and finds the topic.
        info = admin.create_topic(TopicSpec(topic))
        log.info("auto-created topic %s with %d partitions", topic, info.partitions)
        apply_metadata()
        return info

    return maybe_auto_create
