"""What every layer reads of a topic (`TopicInfo`), the topic name rules, and the pre-KRaft store.

`MetadataStore` is how a node kept its metadata before the KRaft log (raft_store.py): a JSON
document `<first log dir>/__cluster_metadata.json` holding the cluster id, topics (name, id,
replicas per partition, configs), the dynamic broker configs and the producer-id high water
mark, rewritten atomically (temp file, fsync, rename) on every change. It stays to read such a
data dir, which start-up migrates into the log (controller/local.py), and for tests that make one.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field

from gregor.metadata.config_defs import DynamicConfigs
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError

FILE_NAME = "__cluster_metadata.json"
MIGRATED_SUFFIX = ".migrated"  # the file's name once its contents are in the KRaft log
MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    if not name:
        raise KafkaError(errors.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(errors.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(
            errors.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters",
        )
    if not _LEGAL.match(name):
        raise KafkaError(
            errors.INVALID_TOPIC_EXCEPTION,
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'",
        )


# The topics the coordinators own: marked internal in Metadata and closed to clients' writes.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    replicas: list[list[int]]  # per partition, the replica broker ids (leader first)
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def partitions(self) -> int:
        return len(self.replicas)

    @property
    def internal(self) -> bool:
        """Metadata's `is_internal`: Kafka's own topics only, not every `__`-prefixed name."""
        return self.name in INTERNAL_TOPICS


class MetadataStore:
    def __init__(self, data_dir: str, cluster_id: str | None = None) -> None:
        self.path = os.path.join(data_dir, FILE_NAME)
        self.topics: dict[str, TopicInfo] = {}
        self.broker_configs: dict[str, str] = {}  # cluster-wide dynamic defaults (BROKER "")
        self.node_configs: dict[str, dict[str, str]] = {}  # per broker (BROKER "<id>")
        self.cluster_id = cluster_id or ""
        # Producer ids below this are handed out (in blocks, see controller.producer_ids).
        self.next_producer_id_block = 0
        self._load()
        if not self.cluster_id:
            self.cluster_id = _new_cluster_id()
            self._save()

    @classmethod
    def load(cls, data_dir: str) -> MetadataStore | None:
        """The store in `data_dir` as it is on disk (nothing written); None if there is none."""
        if not os.path.exists(os.path.join(data_dir, FILE_NAME)):
            return None
        store = cls.__new__(cls)
        store.path = os.path.join(data_dir, FILE_NAME)
        store.topics, store.broker_configs, store.node_configs = {}, {}, {}
        store.cluster_id, store.next_producer_id_block = "", 0
        store._load()
        return store

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            return
        self.cluster_id = doc.get("cluster_id") or self.cluster_id
        self.broker_configs = dict(doc.get("broker_configs", {}))
        self.node_configs = {k: dict(v) for k, v in doc.get("node_configs", {}).items()}
        self.next_producer_id_block = int(doc.get("next_producer_id_block", 0))
        for t in doc.get("topics", []):
            self.topics[t["name"]] = TopicInfo(
                t["name"],
                uuid.UUID(t["topic_id"]),
                [list(r) for r in t["replicas"]],
                dict(t["configs"]),
            )

    def _save(self) -> None:
        doc = {
            "version": 0,
            "cluster_id": self.cluster_id,
            "broker_configs": self.broker_configs,
            "node_configs": self.node_configs,
            "next_producer_id_block": self.next_producer_id_block,
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "replicas": t.replicas,
                    "configs": t.configs,
                }
                for t in self.topics.values()
            ],
        }
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- changes ------------------------------------------------------------------------------

    def create_topic(
        self, name: str, replicas: list[list[int]], configs: dict[str, str]
    ) -> TopicInfo:
        validate_topic_name(name)
        if name in self.topics:
            raise KafkaError(errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        collides = [t for t in self.topics if t.replace(".", "_") == name.replace(".", "_")]
        if collides:
            raise KafkaError(
                errors.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topic: {collides[0]}",
            )
        info = TopicInfo(name, uuid.uuid4(), replicas, dict(configs))
        self.topics[name] = info
        self._save()
        return info

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.topics.pop(name, None)
        if info is None:
            raise KafkaError(errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
        self._save()
        return info

    def add_partitions(self, name: str, new_replicas: list[list[int]]) -> TopicInfo:
        info = self.topics[name]
        info.replicas = info.replicas + new_replicas  # a new list: readers may keep the old
        self._save()
        return info

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        self._save()

    def set_broker_configs(self, resource: str, configs: dict[str, str]) -> None:
        """The dynamic configs of BROKER `resource` ("" for the cluster-wide default)."""
        if resource:
            self.node_configs[resource] = dict(configs)
        else:
            self.broker_configs = dict(configs)
        self._save()

    def broker_configs_of(self, resource: str) -> dict[str, str]:
        return dict(self.node_configs.get(resource, {})) if resource else dict(self.broker_configs)

    def dynamic(self, node_id: int) -> DynamicConfigs:
        return DynamicConfigs(self.broker_configs, self.node_configs.get(str(node_id), {}))

    def allocate_producer_ids(self, count: int) -> int:
        """Reserve `count` producer ids; returns the first. Persisted before it is used."""
        first = self.next_producer_id_block
        self.next_producer_id_block = first + count
        self._save()
        return first

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for t in self.topics.values():
            if t.topic_id == topic_id:
                return t
        return None


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
