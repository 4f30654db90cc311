"""The cluster metadata of a one-voter KRaft quorum: `__cluster_metadata-0`, replayed into a
MetadataImage, with the read interface the broker uses.

    store = RaftMetadataStore.open(log_dir, node_id=1, cluster_id="J8qX...")
    store.topics["orders"]          # TopicInfo, by name       } cheap: dicts kept up to date as
    store.topic_by_id(topic_id)     # TopicInfo, by id         } records are replayed
    store.dynamic(1)                # dynamic broker configs as node 1 sees them
    store.commit([TopicRecord(...), PartitionRecord(...)])   # durable and replayed on return

It owns the Raft log (`<log dir>/__cluster_metadata-0`, raft/storage_log.py), its `quorum-state`
and a RaftNode whose only voter is this node. `open` polls the node once: a sole voter needs no
votes, so it leads at once (a new epoch at every start; quorum_state.py) and hands back every
committed record, which is replayed into the image. It never waits for a timer.

`commit(records)` encodes the records (metadata/records.py), appends them as one batch (more if
they pass `MAX_BATCH_BYTES`), polls the node, which fsyncs the log (`append.linger.ms` is 0) and,
as the only voter, advances the high watermark past them, and replays the committed records into
the image. So when it returns they are on disk and visible: an acknowledged change survives a
SIGKILL. A node that is not the leader refuses with NOT_CONTROLLER (never, with one voter).
Batches are atomic on disk (recovery keeps whole batches only).

Which records become which operation is the controller's business (controller/local.py); this
module only appends and replays (DESIGN principle 3). The views: `topics` (name -> TopicInfo) and
the id index are patched for the topics the replayed records touch; the dynamic configs are read
straight from the image. A TopicInfo object stays the same object while its topic lives.
`take_changes()` names the topics touched since it was last called, so the broker re-applies
only those to the partitions it hosts.

Not yet: snapshots. The log grows by every change; a restart replays it all.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from gregor.metadata import records as r
from gregor.metadata.config_defs import DynamicConfigs
from gregor.metadata.image import (
    BROKER_RESOURCE,
    EMPTY_IMAGE,
    TOPIC_RESOURCE,
    MetadataImage,
)
from gregor.metadata.store import TopicInfo
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.raft import messages as m
from gregor.raft.config import RaftConfig
from gregor.raft.leader import NEVER
from gregor.raft.node import Effects, NotLeader, RaftNode
from gregor.raft.storage_log import StorageRaftLog
from gregor.raft.store import FileQuorumStateStore
from gregor.storage.config import LogConfig

log = logging.getLogger("gregor.metadata")

NOT_CONTROLLER = errors.BY_NAME["NOT_CONTROLLER"].code
# One Raft batch holds at most this many bytes of records (Kafka's metadata batches: 8 MiB max);
# a larger commit is split into several batches.
MAX_BATCH_BYTES = 1024 * 1024
LOG_CONFIG = LogConfig(max_message_bytes=8 * 1024 * 1024)
MAX_COMMIT_POLLS = 8  # one poll commits with a single voter; more means something is wrong

_TOPIC_RECORDS = (r.TopicRecord, r.PartitionRecord, r.PartitionChangeRecord, r.RemoveTopicRecord)


class MetadataLogError(RuntimeError):
    """The metadata log cannot be used: not led by this node, a snapshot we cannot read, a
    commit that does not come."""


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class RaftMetadataStore:
    def __init__(self, node: RaftNode, cluster_id: str, clock: Callable[[], int] = wall_clock_ms) -> None:
        self.node = node
        self.cluster_id = cluster_id
        self.clock = clock
        self.image: MetadataImage = EMPTY_IMAGE
        self.topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        # Topic names created, changed or removed since take_changes(); None: anything may have.
        self._changed: set[str] | None = None
        self.wakeup: Callable[[], None] | None = None  # the broker's timer hook (unused: no work comes between polls)

    @classmethod
    def open(
        cls,
        log_dir: str,
        node_id: int,
        cluster_id: str,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        configs: Mapping[str, str] | None = None,
    ) -> RaftMetadataStore:
        """Open `<log_dir>/__cluster_metadata-0`, lead the one-voter quorum, replay the log.
        `configs`: controller.quorum.* settings (append.linger.ms is always 0 here)."""
        raft_log = StorageRaftLog.open(log_dir, LOG_CONFIG, clock)
        quorum_state = FileQuorumStateStore(raft_log.directory, voters=[node_id])
        config = replace(RaftConfig.from_configs(dict(configs or {})), append_linger_ms=0)
        node = RaftNode(
            node_id, [node_id], raft_log, quorum_state, random.Random(), clock(), config, cluster_id
        )
        store = cls(node, cluster_id, clock)
        store.poll(clock())
        if not node.is_leader:
            raise MetadataLogError(f"node {node_id} did not become the leader of its own quorum: {node!r}")
        log.info(
            "metadata log %s: leader in epoch %d, replayed up to offset %d",
            raft_log.directory, node.epoch, store.high_watermark,
        )
        return store

    # -- reads ----------------------------------------------------------------------------------

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def dynamic(self, node_id: int) -> DynamicConfigs:
        image = self.image
        return DynamicConfigs(image.config(BROKER_RESOURCE, ""), image.config(BROKER_RESOURCE, str(node_id)))

    def broker_configs_of(self, resource: str) -> dict[str, str]:
        """The dynamic configs of BROKER `resource` ("" for the cluster-wide default)."""
        return dict(self.image.config(BROKER_RESOURCE, resource))

    @property
    def broker_configs(self) -> dict[str, str]:
        return self.broker_configs_of("")

    @property
    def next_producer_id(self) -> int:
        return self.image.next_producer_id

    @property
    def node_id(self) -> int:
        return self.node.node_id

    @property
    def epoch(self) -> int:
        return self.node.epoch

    @property
    def high_watermark(self) -> int:
        hw = self.node.high_watermark
        return 0 if hw is None else hw

    @property
    def next_offset(self) -> int:
        """The offset the next record appended will have."""
        return self.node.log.end_offset

    def take_changes(self) -> set[str] | None:
        """The topics created, changed (partitions, configs) or removed since the last call;
        None for "any": the first call, or a dynamic broker config changed (every topic's
        effective configs may have)."""
        changed, self._changed = self._changed, set()
        return changed

    def describe_quorum(self, now_ms: int | None = None) -> m.DescribeQuorumResponse:
        return self.node.describe_quorum(self.clock() if now_ms is None else now_ms)

    # -- writes ---------------------------------------------------------------------------------

    def commit(self, records: Sequence[Any]) -> int:
        """Append `records` and return once they are committed (fsynced) and replayed; the offset
        of the last one (-1 for none)."""
        if not records:
            return -1
        last = -1
        now = self.clock()
        for batch in _batches([r.encode(rec) for rec in records]):
            appended = self.node.append(batch, now)
            if isinstance(appended, NotLeader):
                raise KafkaError(
                    NOT_CONTROLLER,
                    f"node {self.node.node_id} is not the active controller (leader "
                    f"{appended.leader_id}, epoch {appended.epoch})",
                )
            last = appended
        for _ in range(MAX_COMMIT_POLLS):
            self._apply(self.node.poll(self.clock()))
            if self.node.high_watermark is not None and self.node.high_watermark > last:
                return last
        raise MetadataLogError(f"records up to offset {last} were appended but not committed: {self.node!r}")

    # -- the node's timers ----------------------------------------------------------------------

    def poll(self, now_ms: int) -> int | None:
        """Run the node's timers; its next deadline (None: none)."""
        effects = self.node.poll(now_ms)
        self._apply(effects)
        return None if effects.next_deadline_ms >= NEVER else effects.next_deadline_ms

    def close(self) -> None:
        raft_log = self.node.log
        raft_log.flush()
        close = getattr(raft_log, "close", None)
        if close is not None:
            close()

    def _apply(self, effects: Effects) -> None:
        if effects.snapshot is not None:
            raise MetadataLogError(
                f"the metadata log starts at snapshot {effects.snapshot.snapshot_id}, which this "
                "version cannot load"
            )
        if effects.outbound:  # a sole voter has nobody to talk to
            log.warning("metadata quorum of one: dropping %d message(s) to other nodes", len(effects.outbound))
        if effects.leader_change is not None:
            change = effects.leader_change
            log.info("metadata leader: node %s in epoch %d", change.leader_id, change.epoch)
        entries = [(r.decode(e.data), e.offset, e.epoch) for e in effects.committed if not e.control]
        if entries:
            self._replay(entries)

    def _replay(self, entries: list[tuple[Any, int, int]]) -> None:
        self.image = self.image.replay(entries)
        self._update_topics(rec for rec, _, _ in entries)

    def _update_topics(self, replayed: Iterable[Any]) -> None:
        touched: dict[uuid.UUID, None] = {}  # in replay order
        everything = False
        for rec in replayed:
            if isinstance(rec, _TOPIC_RECORDS):
                touched[rec.topic_id] = None
            elif isinstance(rec, r.ConfigRecord):
                if rec.resource_type == BROKER_RESOURCE:
                    everything = True
                topic_id = self.image.topics_by_name.get(rec.resource_name)
                if rec.resource_type == TOPIC_RESOURCE and topic_id is not None:
                    touched[topic_id] = None
        image = self.image
        changed = self._changed
        if everything:
            self._changed = changed = None
        for topic_id in touched:
            topic = image.topics_by_id.get(topic_id)
            info = self._by_id.get(topic_id)
            if changed is not None:
                changed.update(t.name for t in (topic, info) if t is not None)
            if topic is None:
                if info is not None:
                    del self._by_id[topic_id]
                    self.topics.pop(info.name, None)
                continue
            replicas = [list(topic.partitions[i].replicas) for i in sorted(topic.partitions)]
            configs = dict(image.config(TOPIC_RESOURCE, topic.name))
            if info is None:
                info = TopicInfo(topic.name, topic_id, replicas, configs)
                self._by_id[topic_id] = info
                self.topics[topic.name] = info
            else:
                info.replicas, info.configs = replicas, configs


def _batches(encoded: list[bytes]) -> list[list[bytes]]:
    out: list[list[bytes]] = [[]]
    size = 0
    for data in encoded:
        if out[-1] and size + len(data) > MAX_BATCH_BYTES:
            out.append([])
            size = 0
        out[-1].append(data)
        size += len(data)
    return out
