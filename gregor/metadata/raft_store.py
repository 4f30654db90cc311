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

Networked (a quorum of several voters, `controller.quorum.voters`): `open_networked` opens the
same log and quorum-state but makes no node; the broker runs a RaftDriver over them
(runtime/raft_driver.py) and `attach`es it. The driver's callbacks feed the store:
`on_committed` replays what the quorum committed, on every node, followers too, and then calls
`on_replayed` (the broker brings its partitions in line); `on_leader_change` fails the writes
waiting for a commit when this node stops leading. `commit(records)` then only appends, on the
active controller (NOT_CONTROLLER elsewhere), and returns the offset of the last record; the
caller awaits `wait_committed(offset)`, which completes once the quorum committed and this node
replayed it, or fails with NOT_CONTROLLER when leadership is lost first (the records may still
be committed by the next leader: the client retries and finds the change made). The node is
the active controller once it leads and its own start-of-epoch record is committed, so its
image holds everything committed before its epoch (`is_active`).

Not yet: snapshots. The log grows by every change; a restart replays it all.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

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
from gregor.raft.log import RaftLog
from gregor.raft.node import Effects, Entry, LeaderAndEpoch, LoadSnapshot, NotLeader, RaftNode
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


class QuorumDriver(Protocol):
    """What the store needs of the runtime's RaftDriver (it cannot import the runtime)."""

    node: RaftNode | None

    def append(self, records: Sequence[bytes]) -> int | NotLeader: ...


class RaftMetadataStore:
    def __init__(
        self, node: RaftNode | None, cluster_id: str, clock: Callable[[], int] = wall_clock_ms
    ) -> None:
        self._node = node
        self.driver: QuorumDriver | None = None
        self.local_id = -1 if node is None else node.node_id
        self.cluster_id = cluster_id
        self.clock = clock
        self.image: MetadataImage = EMPTY_IMAGE
        self.topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        # Topic names created, changed or removed since take_changes(); None: anything may have.
        self._changed: set[str] | None = None
        self.wakeup: Callable[[], None] | None = None  # the broker's timer hook (unused: no work comes between polls)
        # Networked only: called after committed records were replayed (on every node).
        self.on_replayed: Callable[[], None] | None = None
        self.applied = -1  # the offset of the last committed entry replayed (control ones too)
        self.last_appended = -1
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    @property
    def node(self) -> RaftNode:
        node = self._node if self.driver is None else self.driver.node
        if node is None:
            raise MetadataLogError("the metadata quorum is not running yet")
        return node

    @property
    def networked(self) -> bool:
        return self.driver is not None

    @classmethod
    def open_networked(
        cls,
        log_dir: str,
        node_id: int,
        cluster_id: str,
        voters: Sequence[int],
        *,
        clock: Callable[[], int] = wall_clock_ms,
        configs: Mapping[str, str] | None = None,
    ) -> tuple[RaftMetadataStore, RaftLog, FileQuorumStateStore, RaftConfig]:
        """The store of a node among `voters`, with the log, quorum-state and Raft settings a
        RaftDriver is to run on; `attach` the driver before starting it."""
        raft_log = StorageRaftLog.open(log_dir, LOG_CONFIG, clock)
        quorum_state = FileQuorumStateStore(raft_log.directory, voters=sorted(voters))
        config = replace(RaftConfig.from_configs(dict(configs or {})), append_linger_ms=0)
        store = cls(None, cluster_id, clock)
        store.local_id = node_id
        return store, raft_log, quorum_state, config

    def attach(self, driver: QuorumDriver) -> None:
        self.driver = driver

    # -- the driver's callbacks (networked) -----------------------------------------------------

    def on_committed(self, entries: list[Entry]) -> None:
        replay = [(r.decode(e.data), e.offset, e.epoch) for e in entries if not e.control]
        if replay:
            self._replay(replay)
        if entries:
            self.applied = max(self.applied, entries[-1].offset)
        if self._waiters:
            done = [(o, f) for o, f in self._waiters if o <= self.applied]
            self._waiters = [(o, f) for o, f in self._waiters if o > self.applied]
            for _offset, fut in done:
                if not fut.done():
                    fut.set_result(None)
        if replay and self.on_replayed is not None:
            self.on_replayed()

    def on_snapshot(self, snapshot: LoadSnapshot) -> None:
        raise MetadataLogError(
            f"the metadata log starts at snapshot {snapshot.snapshot_id}, which this version "
            "cannot load"
        )

    def on_leader_change(self, change: LeaderAndEpoch) -> None:
        log.info("metadata leader: node %s in epoch %d", change.leader_id, change.epoch)
        if change.leader_id != self.local_id:
            self._fail_waiters(f"node {self.local_id} is no longer the active controller")

    def _fail_waiters(self, why: str) -> None:
        waiters, self._waiters = self._waiters, []
        for _offset, fut in waiters:
            if not fut.done():
                fut.set_exception(KafkaError(NOT_CONTROLLER, why))

    @property
    def caught_up(self) -> bool:
        """The image is a committed prefix this node may act on: always with one voter; once
        the high watermark is known when networked."""
        node = self._node if self.driver is None else self.driver.node
        return node is not None and node.high_watermark is not None

    @property
    def leader_id(self) -> int | None:
        node = self._node if self.driver is None else self.driver.node
        return None if node is None else node.leader_id

    def is_active(self) -> bool:
        """This node is the active controller: it leads, and everything committed before its
        epoch is replayed here (its start-of-epoch record is committed)."""
        node = self._node if self.driver is None else self.driver.node
        if node is None or not node.is_leader:
            return False
        if self.driver is None:
            return True
        leader = node.leader_state
        hw = node.high_watermark
        return leader is not None and hw is not None and hw > leader.epoch_start_offset

    def wait_committed(self, offset: int) -> asyncio.Future[None]:
        """Completes once `offset` is committed and replayed here; fails with NOT_CONTROLLER if
        this node stops leading first."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if offset <= self.applied:
            fut.set_result(None)
        elif not self.is_active():
            fut.set_exception(KafkaError(NOT_CONTROLLER, f"node {self.local_id} is not the active controller"))
        else:
            self._waiters.append((offset, fut))
        return fut

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
        return self.local_id

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
        if self.driver is not None:
            return self._append_networked(records)
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

    def _append_networked(self, records: Sequence[Any]) -> int:
        """Append on the active controller without waiting; the offset of the last record."""
        assert self.driver is not None
        if not self.is_active():
            leader = self.leader_id
            raise KafkaError(
                NOT_CONTROLLER,
                f"node {self.local_id} is not the active controller (leader {leader})",
            )
        last = -1
        for batch in _batches([r.encode(rec) for rec in records]):
            appended = self.driver.append(batch)
            if isinstance(appended, NotLeader):
                raise KafkaError(
                    NOT_CONTROLLER,
                    f"node {self.local_id} is not the active controller (leader "
                    f"{appended.leader_id}, epoch {appended.epoch})",
                )
            last = appended
        self.last_appended = last
        return last

    # -- the node's timers ----------------------------------------------------------------------

    def poll(self, now_ms: int) -> int | None:
        """Run the node's timers; its next deadline (None: none). Networked, the driver runs
        them."""
        if self.driver is not None:
            return None
        effects = self.node.poll(now_ms)
        self._apply(effects)
        return None if effects.next_deadline_ms >= NEVER else effects.next_deadline_ms

    def close(self) -> None:
        self._fail_waiters("the metadata log is closing")
        if self.driver is not None:
            return  # the driver closes the log when it stops
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
