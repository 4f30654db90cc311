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

`commit(records)` encodes the records (metadata/records.py), appends them as one batch, polls
the node, which fsyncs the log (`append.linger.ms` is 0) and, as the only voter, advances the
high watermark past them, and replays the committed records into the image. So when it returns
they are on disk and visible: an acknowledged change survives a SIGKILL. A node that is not the
leader refuses with NOT_CONTROLLER (never, with one voter).

Atomicity (KIP-868). A batch is atomic on disk (recovery keeps whole batches only) and in
replication. Records past `MAX_BATCH_BYTES` (or half a segment) take several batches, which a
crash or a change of leader can cut: they are framed as a metadata transaction,
BeginTransactionRecord first and EndTransactionRecord last (transactions.py), and replay holds
a transaction's records back until its End, on every node. A transaction still open at the end
of the log (its writer died) is not applied; the next active controller aborts it
(`abort_open_transaction`, AbortTransactionRecord: controller/local.py calls it on activation)
and replay drops its records. A commit that fits one batch is written as before, unframed.
`applied` never points inside an open transaction.

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
never by time) after it if anything was committed since (checked at every commit and at every
`poll`, whose deadline includes it). Never inside an open transaction, where the image is not
that of the log's end: a snapshot due (or asked for) then is taken once the transaction ends or
is aborted.
`metadata.log.segment.bytes` (1 GiB, as Kafka) sizes the log's segments, so bounds what stays on
disk below a snapshot. Opening loads the latest snapshot, then replays the log after it; a damaged
snapshot file is skipped with a warning (renamed `.corrupt`) when the log still reaches back far
enough, else `open` fails with MetadataLogError naming the file, why it is damaged and what to
do (in a quorum: move `__cluster_metadata-0` aside to fetch the leader's; alone: restore it),
and so does every later start, which would otherwise come up with part of the metadata.

Off the event loop. When the server has given the store its `in_thread` (runtime/log_io.py, set
once its event loop runs), a snapshot that falls due is taken in three steps: on the loop, the
image and the snapshot's id (end offset, epoch) are taken; on a worker thread, the image is encoded (it is immutable: replays on
the loop make new images) and the `.checkpoint` file written, fsynced and renamed
(`StorageRaftLog.write_snapshot_file`); back on the loop, it is added to the log and the log
start moves up to it. Encoding is the costly part (about 250 ms for 25,000 records, where the
write and fsync took 10 ms): on the loop it stalled it that long. So the log start moves only once the file is durable. One at a time
(`snapshot_in_flight`): thresholds passed meanwhile are checked again when it is done. The log
may move on meanwhile: if a newer snapshot (one fetched from the leader, or `snapshot()`) got
there first, this one's file is removed instead. A failed write keeps the log whole and is tried
again at the next commit. Without `in_thread` (tools, tests, the simulation) and for `snapshot()`,
all on the caller's thread.

Networked (a quorum of several voters, `controller.quorum.voters`): `open_networked` opens the
same log and quorum-state but makes no node; the broker runs a RaftDriver over them
(runtime/raft_driver.py) and `attach`es it. The driver's callbacks feed the store:
`on_committed` replays what the quorum committed, on every node, followers too, and then calls
`on_replayed` (the broker brings its partitions in line); `on_leader_change` fails the writes
waiting for a commit when this node stops leading. `commit(records)` then only appends, on the
active controller (NOT_CONTROLLER elsewhere), and returns the offset of the last record; the
caller hands `wait_committed(offset, done)` a callback, called with None once the quorum
committed and this node replayed it, or with NOT_CONTROLLER (a KafkaError) when leadership is
lost first (the records may still be committed by the next leader: the client retries and
finds the change made). No event loop: a driver that must await it makes a future of it. The node is
the active controller once it leads and its own start-of-epoch record is committed, so its
image holds everything committed before its epoch (`is_active`).

Snapshots when networked: every node takes its own, by the same thresholds, as in Kafka: checked
as it replays commits, and by the broker's timer through `poll` (which runs no Raft timer here,
the driver does), so the time-based one fires with no further commit (Kafka's SnapshotGenerator
schedules it as a deferred event). A snapshot the driver hands over (the log's latest at start,
or one fetched from the leader by a follower that fell behind the leader's log start,
FetchSnapshot) replaces the image, and what an open transaction held (a snapshot ends outside
any), and counts as replayed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from gregor.clock import SYSTEM_CLOCK, Clock
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
from gregor.metadata.transactions import FAILOVER_REASON, TransactionBuffer
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.raft import messages as m
from gregor.raft.config import RaftConfig
from gregor.raft.leader import NEVER
from gregor.raft.log import RaftLog, SnapshotId
from gregor.raft.node import Effects, Entry, LeaderAndEpoch, LoadSnapshot, NotLeader, RaftNode
from gregor.raft.storage_log import (
    CORRUPT_SUFFIX,
    DIR_NAME,
    SNAPSHOT_SUFFIX,
    SnapshotUnavailableError,
    StorageRaftLog,
    snapshot_file_name,
)
from gregor.raft.store import FileQuorumStateStore
from gregor.security.scram import ScramCredential
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

# What `wait_committed` calls: with None once committed, with the KafkaError that prevented it.
CommitCallback = Callable[[KafkaError | None], object]

_TOPIC_RECORDS = (r.TopicRecord, r.PartitionRecord, r.PartitionChangeRecord, r.RemoveTopicRecord)


class MetadataLogError(RuntimeError):
    """The metadata log cannot be used: not led by this node, a snapshot we cannot read, a
    commit that does not come."""


class QuorumDriver(Protocol):
    """What the store needs of the runtime's RaftDriver (it cannot import the runtime)."""

    node: RaftNode | None

    def append(self, records: Sequence[bytes]) -> int | NotLeader: ...


# in_thread(work, done): `work()` on a worker thread, then `done(its result or exception)` on
# the event loop (runtime/log_io.py::in_thread).
InThread = Callable[[Callable[[], int], Callable[[Any], None]], None]


class RaftMetadataStore:
    def __init__(
        self,
        node: RaftNode | None,
        cluster_id: str,
        clock: Callable[[], int] = SYSTEM_CLOCK.now_ms,
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
        self._dynamic: tuple[MetadataImage, int, DynamicConfigs] | None = None
        # Every topic name removed from `topics`, in order (deletions are rare): a reader that
        # remembers how many it saw learns of deletions without comparing every topic.
        self.removed_topics: list[str] = []
        # Topic names created, changed or removed since take_changes(); None: anything may have.
        self._changed: set[str] | None = None
        self.wakeup: Callable[[], None] | None = (
            None  # the broker's timer hook (unused: no work comes between polls)
        )
        # Networked only: called after committed records were replayed (on every node).
        self.on_replayed: Callable[[], None] | None = None
        # Networked only: called once a commit has woken waiters (`wait_committed`), before
        # its records are replayed: the broker writes the answers they completed at once.
        self.on_answered: Callable[[], None] | None = None
        # The offset of the last committed entry replayed (control ones too) and visible: not
        # inside a metadata transaction still open (its records wait for its End).
        self.applied = -1
        self.last_appended = -1
        self.records_offset = -1  # the offset the first record of the last commit got
        self._txn = TransactionBuffer()
        self._snapshot_deferred = False  # asked for inside a transaction: taken once it closes
        self._in_flight: SnapshotId | None = None  # being written on a worker thread
        # Writes a snapshot file durably (thread-safe); None: the log's own. Tests slow it down.
        self.write_snapshot_file: Callable[[SnapshotId, bytes], None] | None = None
        # Runs its work on a worker thread, then its callback with the result (or the exception
        # raised) back on the event loop; set by the server once its loop runs. None: snapshots
        # are written on the caller's thread.
        self.in_thread: InThread | None = None
        self._closed = False
        self._waiters: list[tuple[int, CommitCallback]] = []
        self._raft_log: object | None = None  # a networked store's log, before its driver runs
        self.log_dir: str | None = None  # the log dir holding __cluster_metadata-0
        # Told the ms from an append here to its commit (the metrics' commit latency), if set.
        self.on_commit_latency: Callable[[int], None] | None = None
        self._appended_at: deque[tuple[int, int]] = deque()  # (last offset, ms), networked
        # Networked, on the active controller: the records appended here and not yet committed,
        # by offset, each with its bytes. Their replay takes the record from here rather than
        # decoding the bytes it was just encoded to, when the committed entry at that offset
        # holds those very bytes (so it is that record); the rest are decoded.
        self._appended: dict[int, tuple[bytes, Any]] = {}

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
        clock: Clock = SYSTEM_CLOCK,
        configs: Mapping[str, str] | None = None,
    ) -> tuple[RaftMetadataStore, RaftLog, FileQuorumStateStore, RaftConfig]:
        """The store of a node among `voters`, with the log, quorum-state and Raft settings a
        RaftDriver is to run on; `attach` the driver before starting it."""
        configs = dict(configs or {})
        raft_log, log_config = _open_log(log_dir, clock, configs, networked=True)
        quorum_state = FileQuorumStateStore(raft_log.directory, voters=sorted(voters))
        config = replace(RaftConfig.from_configs(configs), append_linger_ms=0)
        store = cls(None, cluster_id, clock.now_ms, *_snapshot_settings(configs, log_config))
        store._raft_log = raft_log  # the driver that runs the node opens nothing more
        store.local_id = node_id
        store.log_dir = log_dir
        return store, raft_log, quorum_state, config

    def attach(self, driver: QuorumDriver) -> None:
        self.driver = driver

    # -- the driver's callbacks (networked) -----------------------------------------------------

    def on_committed(self, entries: list[Entry]) -> None:
        if not entries:
            self._wake_waiters()
            if self._snapshot_deferred:
                self._maybe_snapshot(self.clock())
            return
        top = entries[-1].offset
        if self._appended_at:
            now = self.clock()
            while self._appended_at and self._appended_at[0][0] <= top:
                self._commit_took(now - self._appended_at.popleft()[1])
        replay: list[tuple[Any, int, int]] = []
        size = 0
        # Nothing appended here (a follower, always): every record is decoded.
        record_of = self._record_of if self._appended else _decode_entry
        for e in entries:
            if not e.control:
                replay.append((record_of(e), e.offset, e.epoch))
                size += len(e.data)
        if self._appended:
            self._forget_appended(top)
        ready = self._txn.feed(replay) if replay else None
        self.applied = max(self.applied, self._txn.stable_offset(top))
        if self._waiters and self._wake_waiters() and self.on_answered is not None:
            self.on_answered()  # their answers leave before the replay below, in this turn
        if ready:
            self._replay_ready(ready)
        if replay:
            self._bytes_since_snapshot += size
            self._last_commit_ms = self.clock()
        if replay and self.on_replayed is not None:
            self.on_replayed()
        if replay or self._snapshot_deferred:
            self._maybe_snapshot(self.clock())

    def _record_of(self, entry: Entry) -> Any:
        """The record a committed entry holds: as appended here, or decoded."""
        mine = self._appended.pop(entry.offset, None) if self._appended else None
        if mine is not None and mine[0] == entry.data:
            return mine[1]
        return r.decode(entry.data)

    def _forget_appended(self, top: int) -> None:
        """Drop what was noted as appended up to `top` and not taken (an append refused, an
        entry of other bytes): everything up to it is committed."""
        appended = self._appended
        while appended:
            offset = next(iter(appended))
            if offset > top:
                return
            del appended[offset]

    def _wake_waiters(self) -> bool:
        """Call back the waiters `applied` now covers; whether there were any."""
        if not self._waiters:
            return False
        done = [(o, f) for o, f in self._waiters if o <= self.applied]
        self._waiters = [(o, f) for o, f in self._waiters if o > self.applied]
        for _offset, callback in done:
            _call(callback, None)
        return bool(done)

    def on_snapshot(self, snapshot: LoadSnapshot) -> None:
        """The driver's node starts from a snapshot (its log's latest, or one fetched from the
        leader): it replaces the image, and everything below its end counts as replayed."""
        self._load_snapshot(snapshot.snapshot_id, snapshot.data)
        self.applied = max(self.applied, snapshot.snapshot_id.end_offset - 1)
        self._forget_appended(snapshot.snapshot_id.end_offset - 1)
        self._wake_waiters()
        if self.on_replayed is not None:
            self.on_replayed()

    def on_leader_change(self, change: LeaderAndEpoch) -> None:
        log.info("metadata leader: node %s in epoch %d", change.leader_id, change.epoch)
        # What this node appended in an earlier term is committed or gone with it: no answer
        # of the new term waits for it.
        self.last_appended = -1
        self._appended_at.clear()
        self._appended.clear()
        if change.leader_id != self.local_id:
            self._fail_waiters(f"node {self.local_id} is no longer the active controller")

    def _fail_waiters(self, why: str) -> None:
        waiters, self._waiters = self._waiters, []
        for _offset, callback in waiters:
            _call(callback, KafkaError(NOT_CONTROLLER, why))

    @property
    def caught_up(self) -> bool:
        """The image is a committed prefix this node may act on: always with one voter; once
        the high watermark is known when networked."""
        node = self._node if self.driver is None else self.driver.node
        return node is not None and node.high_watermark is not None

    @property
    def raft_node(self) -> Any:
        """This store's KRaft node (None until a networked one's driver starts)."""
        return self._node if self.driver is None else self.driver.node

    @property
    def leader_id(self) -> int | None:
        node = self._node if self.driver is None else self.driver.node
        return None if node is None else node.leader_id

    def is_active(self) -> bool:
        """This node is the active controller: it leads, and everything committed before its
        epoch is replayed here (its start-of-epoch record is committed)."""
        if self.driver is None:
            return self._node is not None and self._node.is_leader
        return self.active_epoch() is not None

    def active_epoch(self) -> int | None:
        """Networked: the leader epoch of this node as the active controller (`is_active`), or
        None when it is not."""
        node = self.driver.node if self.driver is not None else None
        return None if node is None else node.active_epoch

    def wait_committed(self, offset: int, done: CommitCallback) -> None:
        """Call `done(None)` once `offset` is committed (now, if it is; on a commit, before
        the replay of its records here, which follows in the same call: nothing else runs
        between), or
        `done(KafkaError(NOT_CONTROLLER))` if this node is not the active controller, or stops
        being it (or the store closes) first. Once per call; in the order of the calls."""
        if offset <= self.applied:
            done(None)
        elif not self.is_active():
            done(KafkaError(NOT_CONTROLLER, f"node {self.local_id} is not the active controller"))
        else:
            self._waiters.append((offset, done))

    @classmethod
    def open(
        cls,
        log_dir: str,
        node_id: int,
        cluster_id: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        configs: Mapping[str, str] | None = None,
    ) -> RaftMetadataStore:
        """Open `<log_dir>/__cluster_metadata-0`, lead the one-voter quorum, replay the log.
        `configs`: controller.quorum.* settings (append.linger.ms is always 0 here)."""
        configs = dict(configs or {})
        raft_log, log_config = _open_log(log_dir, clock, configs, networked=False)
        quorum_state = FileQuorumStateStore(raft_log.directory, voters=[node_id])
        config = replace(RaftConfig.from_configs(configs), append_linger_ms=0)
        node = RaftNode(
            node_id,
            [node_id],
            raft_log,
            quorum_state,
            random.Random(),
            clock.now_ms(),
            config,
            cluster_id,
        )
        store = cls(node, cluster_id, clock.now_ms, *_snapshot_settings(configs, log_config))
        store.log_dir = log_dir
        store.poll(clock.now_ms())
        if not node.is_leader:
            raise MetadataLogError(
                f"node {node_id} did not become the leader of its own quorum: {node!r}"
            )
        log.info(
            "metadata log %s: leader in epoch %d, replayed up to offset %d",
            raft_log.directory,
            node.epoch,
            store.high_watermark,
        )
        return store

    # -- reads ----------------------------------------------------------------------------------

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def dynamic(self, node_id: int) -> DynamicConfigs:
        """The dynamic broker configs `node_id` sees (one object per image and node: a
        broker reads them on every config it reads)."""
        image = self.image
        kept = self._dynamic
        if kept is not None and kept[0] is image and kept[1] == node_id:
            return kept[2]
        found = DynamicConfigs(
            image.config(BROKER_RESOURCE, ""), image.config(BROKER_RESOURCE, str(node_id))
        )
        self._dynamic = (image, node_id, found)
        return found

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader by the image (-1: none, or no such partition)."""
        t = self.image.topic(topic)
        reg = t.partitions.get(partition) if t is not None else None
        return reg.leader if reg is not None else -1

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The committed SCRAM credential of `user` for `mechanism`: what SCRAM servers check."""
        return self.image.scram_credential(user, mechanism)

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

    def commit(self, records: Sequence[Any], name: str | None = None) -> int:
        """Append `records` and return once they are committed (fsynced) and replayed; the offset
        of the last record written (-1 for none). More than one batch of them is framed as a
        metadata transaction (`name` describes it), and the last record is its End."""
        if not records:
            return -1
        if self.driver is not None:
            return self._append_networked(records, name)
        last = -1
        now = self.clock()
        for batch in self._frame(records, name):
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
                self._commit_took(self.clock() - now)
                self._maybe_snapshot(self.clock())
                return last
        raise MetadataLogError(
            f"records up to offset {last} were appended but not committed: {self.node!r}"
        )

    def _append_networked(self, records: Sequence[Any], name: str | None) -> int:
        """Append on the active controller without waiting; the offset of the last record."""
        assert self.driver is not None
        if not self.is_active():
            leader = self.leader_id
            raise KafkaError(
                NOT_CONTROLLER,
                f"node {self.local_id} is not the active controller (leader {leader})",
            )
        last = -1
        batches = self._frame(records, name)
        # the record each appended entry encodes (a transaction's Begin and End: none)
        framed = len(batches) > 1
        objects = iter([None, *records, None] if framed else records)
        first = self.records_offset - framed  # of the first batch; each next one follows
        for batch in batches:
            # noted before the append: the driver may replay what commits before it returns
            for i, data in enumerate(batch):
                record = next(objects)
                if record is not None:
                    self._appended[first + i] = (data, record)
            appended = self.driver.append(batch)
            if isinstance(appended, NotLeader):
                raise KafkaError(
                    NOT_CONTROLLER,
                    f"node {self.local_id} is not the active controller (leader "
                    f"{appended.leader_id}, epoch {appended.epoch})",
                )
            last = appended
            first = last + 1
        self.last_appended = last
        if self.on_commit_latency is not None and len(self._appended_at) < 10_000:
            self._appended_at.append((last, self.clock()))
        return last

    def _commit_took(self, ms: int) -> None:
        if self.on_commit_latency is not None:
            self.on_commit_latency(ms)

    def _frame(self, records: Sequence[Any], name: str | None) -> list[list[bytes]]:
        """The batches `records` are appended as: one if they fit, else a metadata transaction
        (Begin first, End last) cut into batches. Sets `records_offset`."""
        encoded = [r.encode(rec) for rec in records]
        batches = _batches(encoded, self.max_batch_bytes)
        self.records_offset = self.next_offset
        if len(batches) > 1:
            begin = r.encode(r.BeginTransactionRecord(name=name))
            end = r.encode(r.EndTransactionRecord())
            batches = _batches([begin, *encoded, end], self.max_batch_bytes)
            self.records_offset += 1
            log.info(
                "metadata log: %d records in %d batches, as a transaction from offset %d",
                len(records),
                len(batches),
                self.next_offset,
            )
        return batches

    def needs_transaction(self, records: Sequence[Any]) -> bool:
        """Whether `records` take more than one batch, so `commit` frames them as a transaction
        (their first offset is then `next_offset + 1`: the Begin comes first)."""
        return len(_batches([r.encode(rec) for rec in records], self.max_batch_bytes)) > 1

    @property
    def in_transaction(self) -> bool:
        """A metadata transaction is open in what was replayed (its records wait for its End)."""
        return self._txn.open

    def abort_open_transaction(self) -> bool:
        """On a newly active controller: a transaction left open at the end of the log (its
        writer died between its batches) is aborted, so that its records are never applied and
        what comes next is not taken into it. True if there was one."""
        if not self._txn.open:
            return False
        start = self._txn.start_offset
        log.warning(
            "metadata log: aborting the transaction begun at offset %d and never ended (%d "
            "record(s) held back): its writer stopped before its last batch",
            start,
            self._txn.held,
        )
        self.commit([r.AbortTransactionRecord(reason=FAILOVER_REASON)])
        return True

    # -- the node's timers ----------------------------------------------------------------------

    def poll(self, now_ms: int) -> int | None:
        """Run the node's timers (networked, the driver runs them) and the snapshot timer; the
        next deadline (None: none)."""
        if self.driver is not None:
            if self.driver.node is None:
                return None
            self._maybe_snapshot(now_ms)
            deadline = self._snapshot_deadline()
            return None if deadline >= NEVER else deadline
        effects = self.node.poll(now_ms)
        self._apply(effects)
        self._maybe_snapshot(now_ms)
        deadline = min(effects.next_deadline_ms, self._snapshot_deadline())
        return None if deadline >= NEVER else deadline

    def _snapshot_deadline(self) -> int:
        """When the time-based snapshot is due (NEVER: not by time, or nothing to cover)."""
        if self.snapshot_interval_ms > 0 and self._bytes_since_snapshot > 0:
            return self._last_snapshot_ms + self.snapshot_interval_ms
        return NEVER

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot(self) -> SnapshotId | None:
        """Write a snapshot of the committed image and drop the log below it, on this thread;
        its id, or None when there is nothing new to cover (the log starts where the latest
        snapshot ends) or a metadata transaction is open (it is then taken once the
        transaction ends or is aborted)."""
        if self._txn.open:
            self._defer_snapshot()
            return None
        now = self.clock()
        prepared = self._prepare_snapshot(now)
        if prepared is None:
            return None
        snapshot_id, data = prepared
        self.node.create_snapshot(snapshot_id.end_offset, data)
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now
        log.info(
            "metadata log: snapshot %s written (%d bytes); the log starts at %d",
            snapshot_id,
            len(data),
            self.node.log.start_offset,
        )
        return snapshot_id

    def _defer_snapshot(self) -> None:
        if not self._snapshot_deferred:
            log.info(
                "metadata log: snapshot deferred: the transaction begun at offset %d is open",
                self._txn.start_offset,
            )
        self._snapshot_deferred = True

    def _prepare_snapshot(self, now_ms: int) -> tuple[SnapshotId, bytes] | None:
        """The id and bytes of a snapshot of the image at the applied offset (outside any
        transaction); None if the log starts there already."""
        snapshot_id = self._next_snapshot_id()
        if snapshot_id is None:
            return None
        data = metadata_snapshot.encode_snapshot(
            self.image, snapshot_id.epoch, self._last_commit_ms, now_ms
        )
        return snapshot_id, data

    def _next_snapshot_id(self) -> SnapshotId | None:
        """The id a snapshot of the image would have: it ends at the applied offset."""
        node = self.node
        end = node.applied_offset
        if end <= node.log.start_offset:
            return None
        last = node.log.read(end - 1, 1)[0]
        if last.next_offset != end:
            raise ValueError(f"snapshot end {end} is inside the batch at {last.base_offset}")
        return SnapshotId(end, last.epoch)

    def _maybe_snapshot(self, now_ms: int) -> None:
        """Take a snapshot when one is due: by bytes, by time, or deferred by an open
        transaction; never inside a transaction, never while one is being written."""
        if self._in_flight is not None or self._closed:
            return
        pending = self._bytes_since_snapshot
        due_by_time = (
            self.snapshot_interval_ms > 0
            and pending > 0
            and now_ms - self._last_snapshot_ms >= self.snapshot_interval_ms
        )
        if not (
            self._snapshot_deferred
            or due_by_time
            or (pending > 0 and pending >= self.snapshot_bytes)
        ):
            return
        if self._txn.open:
            self._defer_snapshot()
            return
        self._snapshot_deferred = False
        try:
            if self._can_write_in_background():
                self._snapshot_in_background(now_ms)
            else:
                self.snapshot()
        except (OSError, ValueError):
            log.exception("metadata log: snapshot failed; the log keeps every record")
            self._last_snapshot_ms = now_ms  # retry at the next interval or byte threshold

    def on_log_failure(self, handler: Callable[[str, OSError], None]) -> None:
        """Call `handler(what, error)` when a write to the metadata log fails."""
        raft_log = self._raft_log if self._raft_log is not None else self.node.log
        if isinstance(raft_log, StorageRaftLog):
            raft_log.on_failure = handler

    def _can_write_in_background(self) -> bool:
        return self.in_thread is not None and isinstance(self.node.log, StorageRaftLog)

    def _snapshot_in_background(self, now_ms: int) -> None:
        """Take the image (immutable: the loop's next replays make new ones) and the snapshot's
        id here; encode it, write and fsync the file on a worker thread; then, back on the loop,
        add it to the log and move the log start up to it."""
        snapshot_id = self._next_snapshot_id()
        if snapshot_id is None:
            return
        raft_log = self.node.log
        assert isinstance(raft_log, StorageRaftLog)
        write = self.write_snapshot_file or raft_log.write_snapshot_file
        image, last_commit_ms = self.image, self._last_commit_ms

        def encode_and_write() -> int:
            data = metadata_snapshot.encode_snapshot(
                image, snapshot_id.epoch, last_commit_ms, now_ms
            )
            write(snapshot_id, data)
            return len(data)

        pending = self._bytes_since_snapshot
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now_ms
        self._in_flight = snapshot_id
        assert self.in_thread is not None
        self.in_thread(
            encode_and_write,
            lambda outcome: self._snapshot_written(raft_log, snapshot_id, pending, outcome),
        )

    def _snapshot_written(
        self,
        raft_log: StorageRaftLog,
        snapshot_id: SnapshotId,
        pending: int,
        outcome: int | BaseException,
    ) -> None:
        """On the loop, once the file is durable (or failed). Meanwhile the log may have moved
        on: a snapshot fetched from the leader, or a newer one written on this thread, makes
        this one useless (its file is removed); else it is added and the log start moves."""
        self._in_flight = None
        if raft_log.closed:
            return  # stopping: a whole file is used at the next start, a partial one deleted
        if isinstance(outcome, BaseException):
            log.error(
                "metadata log: snapshot %s could not be written: %s; the log keeps every record",
                snapshot_id,
                outcome,
            )
            self._bytes_since_snapshot += pending
            return
        latest = raft_log.latest_snapshot()
        superseded = latest is not None and latest.end_offset >= snapshot_id.end_offset
        if superseded or not raft_log.start_offset <= snapshot_id.end_offset <= raft_log.end_offset:
            if latest != snapshot_id:
                log.info(
                    "metadata log: snapshot %s is superseded by %s; its file is removed",
                    snapshot_id,
                    latest,
                )
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(raft_log.directory, snapshot_file_name(snapshot_id)))
            return
        try:
            raft_log.add_snapshot(snapshot_id)
            raft_log.delete_before_snapshot()
        except (OSError, ValueError, KafkaError):
            log.exception(
                "metadata log: snapshot %s was written but the log could not move up to it",
                snapshot_id,
            )
            return
        log.info(
            "metadata log: snapshot %s written (%d bytes, off the event loop); the log starts at %d",
            snapshot_id,
            outcome,
            raft_log.start_offset,
        )
        if not self._closed:
            self._maybe_snapshot(self.clock())  # more may have come while it was written

    @property
    def snapshot_in_flight(self) -> SnapshotId | None:
        """The snapshot being written on a worker thread, if any."""
        return self._in_flight

    def close(self) -> None:
        self._closed = True
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
            self.applied = max(self.applied, effects.snapshot.snapshot_id.end_offset - 1)
        if effects.outbound:  # a sole voter has nobody to talk to
            log.warning(
                "metadata quorum of one: dropping %d message(s) to other nodes",
                len(effects.outbound),
            )
        if effects.leader_change is not None:
            change = effects.leader_change
            log.info("metadata leader: node %s in epoch %d", change.leader_id, change.epoch)
        entries = [
            (r.decode(e.data), e.offset, e.epoch) for e in effects.committed if not e.control
        ]
        if effects.committed:
            self._bytes_since_snapshot += sum(
                len(e.data) for e in effects.committed if not e.control
            )
            self._last_commit_ms = self.clock()
        if entries:
            self._replay(entries)
        if effects.committed:
            self.applied = max(self.applied, self._txn.stable_offset(effects.committed[-1].offset))

    def _load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Reset the image to a snapshot's (at open, or one installed from a leader)."""
        try:
            image = metadata_snapshot.from_snapshot(data, snapshot_id)
        except ValueError as exc:
            raise MetadataLogError(
                f"metadata snapshot {snapshot_id} cannot be loaded: {exc}"
            ) from None
        self.image = image
        for info in list(self._by_id.values()):
            if info.topic_id not in image.topics_by_id:
                del self._by_id[info.topic_id]
                self.topics.pop(info.name, None)
                self.removed_topics.append(info.name)
        self._changed = None
        self._txn.reset()  # a snapshot is never inside a transaction
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.clock()
        self._update_topics(
            r.TopicRecord(name=t.name, topic_id=t.topic_id) for t in image.topics_by_id.values()
        )
        log.info(
            "metadata log: loaded snapshot %s (%d topics)", snapshot_id, len(image.topics_by_id)
        )

    def _replay(self, entries: list[tuple[Any, int, int]]) -> None:
        """Committed records onto the image; those of a metadata transaction once its End
        comes (transactions.py)."""
        ready = self._txn.feed(entries)
        if ready:
            self._replay_ready(ready)

    def _replay_ready(self, ready: list[tuple[Any, int, int]]) -> None:
        self.image = self.image.replay(ready)
        self._update_topics([rec for rec, _, _ in ready])

    def _update_topics(self, replayed: Iterable[Any]) -> None:
        touched: dict[uuid.UUID, uuid.UUID] = {}  # in replay order
        everything = False
        last = None  # a topic's records come together, with one id object when made here
        for rec in replayed:
            if isinstance(rec, _TOPIC_RECORDS):
                if rec.topic_id is not last:  # a UUID's hash is a Python call: one per topic
                    last = touched[rec.topic_id] = rec.topic_id
            elif isinstance(rec, r.ConfigRecord):
                if rec.resource_type == BROKER_RESOURCE:
                    everything = True
                topic_id = self.image.topics_by_name.get(rec.resource_name)
                if rec.resource_type == TOPIC_RESOURCE and topic_id is not None:
                    touched[topic_id] = topic_id
        image = self.image
        changed = self._changed
        if everything:
            self._changed = changed = None
        for topic_id in touched:
            topic = image.topics_by_id.get(topic_id)
            info = self._by_id.get(topic_id)
            if changed is not None:
                if topic is not None:
                    changed.add(topic.name)
                if info is not None:
                    changed.add(info.name)
            if topic is None:
                if info is not None:
                    del self._by_id[topic_id]
                    self.topics.pop(info.name, None)
                    self.removed_topics.append(info.name)
                continue
            parts = topic.partitions
            replicas = [list(parts[i].replicas) for i in sorted(parts)]
            found = image.configs.get((TOPIC_RESOURCE, topic.name))  # none: most topics
            configs = {} if found is None else dict(found)
            if info is None:
                info = TopicInfo(topic.name, topic_id, replicas, configs)
                self._by_id[topic_id] = info
                self.topics[topic.name] = info
            else:
                info.replicas, info.configs = replicas, configs


def _decode_entry(entry: Entry) -> Any:
    return r.decode(entry.data)


def _call(callback: CommitCallback, error: KafkaError | None) -> None:
    """Run one waiter's callback; one that fails must not keep the others (or replay) back."""
    try:
        callback(error)
    except Exception:
        log.exception("a callback waiting for a metadata commit failed")


def _open_log(
    log_dir: str, clock: Clock, configs: Mapping[str, str], networked: bool
) -> tuple[StorageRaftLog, LogConfig]:
    """The metadata log, its segments sized by `metadata.log.segment.bytes`, its latest valid
    snapshot found (a damaged one is set aside when the log still reaches back past it; else
    MetadataLogError says which file, why, and what to do)."""
    log_config = replace(
        LOG_CONFIG, segment_bytes=int(configs.get(SEGMENT_BYTES_CONFIG, LOG_CONFIG.segment_bytes))
    )
    problems: list[str] = []

    def check(data: bytes) -> str | None:
        problem = metadata_snapshot.check_snapshot(data)
        if problem is not None:
            problems.append(problem)
        return problem

    directory = os.path.join(log_dir, DIR_NAME)
    try:
        raft_log = StorageRaftLog.open(log_dir, log_config, clock, check_snapshot=check)
    except SnapshotUnavailableError as exc:
        raise MetadataLogError(
            _unusable_snapshot(directory, problems, networked) or str(exc)
        ) from None
    snap = raft_log.latest_snapshot()
    if raft_log.start_offset > (0 if snap is None else snap.end_offset):
        # A hole: the snapshot that covered the start was set aside at an earlier start (the
        # error then said so); a start again must not come up with part of the metadata.
        raft_log.close()
        why = ["set aside as damaged at an earlier start"]
        message = _unusable_snapshot(directory, why, networked) or (
            f"{directory}: the log starts at offset {raft_log.start_offset} but no snapshot "
            "covers the offsets below it"
        )
        raise MetadataLogError(message)
    return raft_log, log_config


def _unusable_snapshot(directory: str, problems: list[str], networked: bool) -> str | None:
    """What went wrong when the latest snapshot is damaged and the log no longer reaches back
    to replace it, and what the operator can do (we do not repair it on our own)."""
    names = sorted(os.listdir(directory))
    damaged = [n for n in names if n.endswith(SNAPSHOT_SUFFIX + CORRUPT_SUFFIX)]
    segments = [n for n in names if n.endswith(".log")]
    if not damaged or not problems:
        return None
    name = damaged[-1][: -len(CORRUPT_SUFFIX)]  # the latest: names sort by end offset
    first = int(segments[0][:20]) if segments else 0
    what = (
        f"the metadata snapshot {os.path.join(directory, name)} is damaged ({problems[0]}); it was "
        f"renamed {name}{CORRUPT_SUFFIX}. No older snapshot and no log reaches back to replace it "
        f"(the log's segments start at offset {first}, deleted below it when it was taken), so "
        "this node cannot rebuild the cluster metadata on its own."
    )
    if networked:
        todo = (
            f" To recover: stop this node, move {directory} aside (this data dir's "
            f"{DIR_NAME}, its quorum-state included) and start it again: it rejoins the quorum "
            "with an empty metadata log and fetches the leader's snapshot and log. Do this only "
            "if the other voters hold the metadata log: a majority of controller.quorum.voters "
            "running with their logs intact, never on several voters at once; keep the moved "
            "directory until this node has caught up."
        )
    else:
        todo = (
            " This node is its quorum's only voter: no other node holds the metadata. Restore "
            f"{name} from a backup into {directory} (under that name), then start again."
        )
    return what + todo


def _snapshot_settings(configs: Mapping[str, str], log_config: LogConfig) -> tuple[int, int, int]:
    """(snapshot bytes, snapshot interval ms, max batch bytes) for the store."""
    return (
        int(configs.get(SNAPSHOT_BYTES_CONFIG, DEFAULT_SNAPSHOT_BYTES)),
        int(configs.get(SNAPSHOT_INTERVAL_CONFIG, DEFAULT_SNAPSHOT_INTERVAL_MS)),
        # A batch must fit a segment: at most half of one (small segments are for tests).
        max(1, min(MAX_BATCH_BYTES, log_config.segment_bytes // 2)),
    )


def _batches(encoded: list[bytes], max_bytes: int) -> list[list[bytes]]:
    if sum(map(len, encoded)) <= max_bytes:  # the usual case: they fit one batch
        return [encoded]
    out: list[list[bytes]] = [[]]
    size = 0
    for data in encoded:
        if out[-1] and size + len(data) > max_bytes:
            out.append([])
            size = 0
        out[-1].append(data)
        size += len(data)
    return out
