"""A simulated broker's metadata, as its cores read the real broker's store
(metadata/raft_store.py): the image replayed from what the controllers committed, the topics
of that image, and how far it is (for registration, heartbeats and partition hosting).

    view = MetadataView()
    view.replay(entries)       # (record, offset, epoch), committed, in order
    view.caught_up = True      # the broker has read up to the committed end the leader told

`take_changes` always says "any topic may have changed" (None): the simulation hosts one
topic, and resolving its configs again costs nothing worth tracking.
"""

from __future__ import annotations

from gregor.metadata.config_defs import DynamicConfigs
from gregor.metadata.image import BROKER_RESOURCE, EMPTY_IMAGE, TOPIC_RESOURCE, MetadataImage
from gregor.metadata.store import TopicInfo

CLUSTER_ID = "gregor-sim"


class MetadataView:
    cluster_id = CLUSTER_ID

    def __init__(self) -> None:
        self.image: MetadataImage = EMPTY_IMAGE
        self.caught_up = False
        self.topics: dict[str, TopicInfo] = {}

    @property
    def applied(self) -> int:
        """The offset of the last record replayed (-1: none)."""
        return self.image.offset

    @property
    def next_offset(self) -> int:
        return self.image.offset + 1

    def replay(self, entries: list[tuple[object, int, int]]) -> None:
        self.image = image = self.image.replay(entries)
        topics = {}
        for topic in image.topics_by_id.values():
            replicas = [list(topic.partitions[i].replicas) for i in sorted(topic.partitions)]
            configs = dict(image.config(TOPIC_RESOURCE, topic.name))
            topics[topic.name] = TopicInfo(topic.name, topic.topic_id, replicas, configs)
        self.topics = topics

    def take_changes(self) -> set[str] | None:
        return None

    def dynamic(self, node_id: int) -> DynamicConfigs:
        image = self.image
        return DynamicConfigs(
            image.config(BROKER_RESOURCE, ""), image.config(BROKER_RESOURCE, str(node_id))
        )
