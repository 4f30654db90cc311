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

Snapshots (KIP-630). `snapshot()` writes the committed image as the records that rebuild it
(metadata/snapshot.py) in Kafka's file layout (raft/snapshot_file.py: a SnapshotHeader control
batch, the records, a SnapshotFooter control batch) and hands those bytes to
`RaftNode.create_snapshot`, which keeps them opaque: the `.checkpoint` file on disk is exactly
Kafka's. The log start then moves up to the snapshot's end, and segments wholly below it are
deleted. One is taken on its own once `metadata.log.max.record.bytes.between.snapshots` (20 MiB)
of records were committed since the last, or `metadata.log.max.snapshot.interval.ms` (1 h; 0:
never by time) after it if anything was committed since (checked at every commit and poll).
`metadata.log.segment.bytes` (1 GiB, as Kafka) sizes the log's segments, so bounds what stays on
disk below a snapshot. Opening loads the latest snapshot, then replays the log after it; a damaged
snapshot file is skipped with a warning (renamed `.corrupt`) when the log still reaches back far
enough, else `open` fails with MetadataLogError saying what to do (storage_log.py).

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

Snapshots when networked: every node takes its own, by the same thresholds (checked as it
replays commits; no timer of its own), as in Kafka; a snapshot the driver hands over (the log's
latest at start, or one fetched from the leader by a follower that fell behind the leader's log
start, FetchSnapshot) replaces the image and counts as replayed.
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
from gregor.metadata import snapshot as metadata_snapshot
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
from gregor.raft.log import RaftLog, SnapshotId
from gregor.raft.node import Effects, Entry, LeaderAndEpoch, LoadSnapshot, NotLeader, RaftNode
from gregor.raft.storage_log import SnapshotUnavailableError, StorageRaftLog
from gregor.raft.store import FileQuorumStateStore
from gregor.storage.config import LogConfig

log = logging.getLogger("gregor.metadata")

NOT_CONTROLLER = errors.BY_NAME["NOT_CONTROLLER"].code
# One Raft batch holds at most this many bytes of records (Kafka's metadata batches: 8 MiB max);
# a larger commit is split into several batches.
MAX_BATCH_BYTES = 1024 * 1024
LOG_CONFIG = LogConfig(max_message_bytes=8 * 1024 * 1024)
SNAPSHOT_BYTES_CONFIG = "metadata.log.max.record.bytes.between.snapshots"
SNAPSHOT_INTERVAL_CONFIG = "metadata.log.max.snapshot.interval.ms"
SEGMENT_BYTES_CONFIG = "metadata.log.segment.bytes"
DEFAULT_SNAPSHOT_BYTES = 20 * 1024 * 1024
DEFAULT_SNAPSHOT_INTERVAL_MS = 60 * 60 * 1000
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
        self,
        node: RaftNode | None,
        cluster_id: str,
        clock: Callable[[], int] = wall_clock_ms,
        snapshot_bytes: int = DEFAULT_SNAPSHOT_BYTES,
        snapshot_interval_ms: int = DEFAULT_SNAPSHOT_INTERVAL_MS,
        max_batch_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        self._node = node
        self.driver: QuorumDriver | None = None
        self.local_id = -1 if node is None else node.node_id
        self.snapshot_bytes = snapshot_bytes
        # A batch must fit a segment: at most half of one (small segments are for tests).
        self.max_batch_bytes = max_batch_bytes
        self.snapshot_interval_ms = snapshot_interval_ms
        # Bytes of records committed since the latest snapshot (or the log's start), the time
        # that snapshot was taken or loaded, and the time of the last commit we replayed.
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = clock()
        self._last_commit_ms = 0
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
        configs = dict(configs or {})
        raft_log, log_config = _open_log(log_dir, clock, configs)
        quorum_state = FileQuorumStateStore(raft_log.directory, voters=sorted(voters))
        config = replace(RaftConfig.from_configs(configs), append_linger_ms=0)
        store = cls(None, cluster_id, clock, *_snapshot_settings(configs, log_config))
        store.local_id = node_id
        return store, raft_log, quorum_state, config

    def attach(self, driver: QuorumDriver) -> None:
        self.driver = driver

    # -- the driver's callbacks (networked) -----------------------------------------------------

    def on_committed(self, entries: list[Entry]) -> None:
        replay = [(r.decode(e.data), e.offset, e.epoch) for e in entries if not e.control]
        if replay:
            self._replay(replay)
            self._bytes_since_snapshot += sum(len(e.data) for e in entries if not e.control)
            self._last_commit_ms = self.clock()
        if entries:
            self.applied = max(self.applied, entries[-1].offset)
        self._wake_waiters()
        if replay and self.on_replayed is not None:
            self.on_replayed()
        if replay:
            self._maybe_snapshot(self.clock())

    def _wake_waiters(self) -> None:
        if self._waiters:
            done = [(o, f) for o, f in self._waiters if o <= self.applied]
            self._waiters = [(o, f) for o, f in self._waiters if o > self.applied]
            for _offset, fut in done:
                if not fut.done():
                    fut.set_result(None)

    def on_snapshot(self, snapshot: LoadSnapshot) -> None:
        """The driver's node starts from a snapshot (its log's latest, or one fetched from the
        leader): it replaces the image, and everything below its end counts as replayed."""
        self._load_snapshot(snapshot.snapshot_id, snapshot.data)
        self.applied = max(self.applied, snapshot.snapshot_id.end_offset - 1)
        self._wake_waiters()
        if self.on_replayed is not None:
            self.on_replayed()

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
        configs = dict(configs or {})
        raft_log, log_config = _open_log(log_dir, clock, configs)
        quorum_state = FileQuorumStateStore(raft_log.directory, voters=[node_id])
        config = replace(RaftConfig.from_configs(configs), append_linger_ms=0)
        node = RaftNode(
            node_id, [node_id], raft_log, quorum_state, random.Random(), clock(), config, cluster_id
        )
        store = cls(node, cluster_id, clock, *_snapshot_settings(configs, log_config))
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
        for batch in _batches([r.encode(rec) for rec in records], self.max_batch_bytes):
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
                self._maybe_snapshot(self.clock())
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
        for batch in _batches([r.encode(rec) for rec in records], self.max_batch_bytes):
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
        self._maybe_snapshot(now_ms)
        deadline = effects.next_deadline_ms
        if self.snapshot_interval_ms > 0 and self._bytes_since_snapshot > 0:
            deadline = min(deadline, self._last_snapshot_ms + self.snapshot_interval_ms)
        return None if deadline >= NEVER else deadline

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot(self) -> SnapshotId | None:
        """Write a snapshot of the committed image and drop the log below it; its id, or None
        when there is nothing new to cover (the log starts where the latest snapshot ends)."""
        node = self.node
        end = node.applied_offset
        if end <= node.log.start_offset:
            return None
        now = self.clock()
        data = metadata_snapshot.encode_snapshot(
            self.image, node.log.read(end - 1, 1)[0].epoch, self._last_commit_ms, now
        )
        snapshot_id = node.create_snapshot(end, data)
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now
        log.info(
            "metadata log: snapshot %s written (%d bytes); the log starts at %d",
            snapshot_id, len(data), node.log.start_offset,
        )
        return snapshot_id

    def _maybe_snapshot(self, now_ms: int) -> None:
        pending = self._bytes_since_snapshot
        if pending <= 0:
            return
        due_by_time = self.snapshot_interval_ms > 0 and now_ms - self._last_snapshot_ms >= self.snapshot_interval_ms
        if pending >= self.snapshot_bytes or due_by_time:
            try:
                self.snapshot()
            except (OSError, ValueError):
                log.exception("metadata log: snapshot failed; the log keeps every record")
                self._last_snapshot_ms = now_ms  # retry at the next interval or byte threshold

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
            self._load_snapshot(effects.snapshot.snapshot_id, effects.snapshot.data)
        if effects.outbound:  # a sole voter has nobody to talk to
            log.warning("metadata quorum of one: dropping %d message(s) to other nodes", len(effects.outbound))
        if effects.leader_change is not None:
            change = effects.leader_change
            log.info("metadata leader: node %s in epoch %d", change.leader_id, change.epoch)
        entries = [(r.decode(e.data), e.offset, e.epoch) for e in effects.committed if not e.control]
        if effects.committed:
            self._bytes_since_snapshot += sum(len(e.data) for e in effects.committed if not e.control)
            self._last_commit_ms = self.clock()
        if entries:
            self._replay(entries)

    def _load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Reset the image to a snapshot's (at open, or one installed from a leader)."""
        try:
            image = metadata_snapshot.from_snapshot(data, snapshot_id)
        except ValueError as exc:
            raise MetadataLogError(f"metadata snapshot {snapshot_id} cannot be loaded: {exc}") from None
        self.image = image
        for info in list(self._by_id.values()):
            if info.topic_id not in image.topics_by_id:
                del self._by_id[info.topic_id]
                self.topics.pop(info.name, None)
        self._changed = None
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.clock()
        self._update_topics(r.TopicRecord(name=t.name, topic_id=t.topic_id) for t in image.topics_by_id.values())
        log.info("metadata log: loaded snapshot %s (%d topics)", snapshot_id, len(image.topics_by_id))

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


def _open_log(
    log_dir: str, clock: Callable[[], int], configs: Mapping[str, str]
) -> tuple[StorageRaftLog, LogConfig]:
    """The metadata log, its segments sized by `metadata.log.segment.bytes`, its latest valid
    snapshot found (a damaged one is set aside when the log still reaches back past it)."""
    log_config = replace(
        LOG_CONFIG, segment_bytes=int(configs.get(SEGMENT_BYTES_CONFIG, LOG_CONFIG.segment_bytes))
    )
    try:
        raft_log = StorageRaftLog.open(
            log_dir, log_config, clock, check_snapshot=metadata_snapshot.check_snapshot
        )
    except SnapshotUnavailableError as exc:
        raise MetadataLogError(str(exc)) from None
    return raft_log, log_config


def _snapshot_settings(configs: Mapping[str, str], log_config: LogConfig) -> tuple[int, int, int]:
    """(snapshot bytes, snapshot interval ms, max batch bytes) for the store."""
    return (
        int(configs.get(SNAPSHOT_BYTES_CONFIG, DEFAULT_SNAPSHOT_BYTES)),
        int(configs.get(SNAPSHOT_INTERVAL_CONFIG, DEFAULT_SNAPSHOT_INTERVAL_MS)),
        # A batch must fit a segment: at most half of one (small segments are for tests).
        max(1, min(MAX_BATCH_BYTES, log_config.segment_bytes // 2)),
    )


def _batches(encoded: list[bytes], max_bytes: int) -> list[list[bytes]]:
    out: list[list[bytes]] = [[]]
    size = 0
    for data in encoded:
        if out[-1] and size + len(data) > max_bytes:
            out.append([])
            size = 0
        out[-1].append(data)
        size += len(data)
    return out
