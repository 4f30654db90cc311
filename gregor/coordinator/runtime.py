"""The group coordinator: `GroupCoordinator`, the classic-group API the handlers call, over the
generic `CoordinatorRuntime` with one `GroupCoordinatorShard` per `__consumer_offsets` partition
this broker leads.

    groups = GroupCoordinator(node_id, store, replicas, admin, config_value, apply_metadata)
    groups.on_metadata(now_ms, changed)  # after every metadata change: load / unload shards
    result = groups.join_group(request, now_ms)     # a result, or a Pending to wait on
    next_deadline_ms = groups.poll(now_ms)          # timers and loading; the broker calls it
                                                    # again at that deadline (or on `wakeup`)

A group lives in partition `abs(java_hashcode(group_id)) % partitions`, as in Kafka. What is
particular to groups (`GroupShardAdapter`): the `__consumer_offsets` formats, and the shard's
parked JoinGroup/SyncGroup answers (its completions), released after each step once what was
written before them is replicated; a due timer (group.initial.rebalance.delay.ms=0, say) runs
before an operation returns, so a lone consumer's JoinGroup is answered at once.

Transactional offsets: `txn_offset_commit` writes ONE transactional batch of the producer (its
id and epoch, sequence 0), appended with origin COORDINATOR, so an old epoch is refused
(INVALID_PRODUCER_EPOCH, passed on as Kafka does). Replayed, the offsets are pending in the
shard until the producer's COMMIT/ABORT marker: met in the log while loading, or appended by the
broker, which then calls `complete_transaction`; both apply it through
`shard.replay_end_transaction`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Collection, Iterable
from typing import Any

from gregor.coordinator.common.runtime import (
    CoordinatorRuntime,
    InternalTopic,
    TopicCreator,
    TopicSource,
)
from gregor.coordinator.common.service import CoordinatorService, same
from gregor.coordinator.group import codes
from gregor.coordinator.group.records import Record, decode, encode
from gregor.coordinator.group.results import (
    DescribedGroup,
    JoinRequest,
    JoinResult,
    LeaveResult,
    ListedGroup,
    OffsetCommitRequest,
    OffsetFetchResult,
    PartitionErrors,
    SyncRequest,
    SyncResult,
    TxnOffsetCommitRequest,
)
from gregor.coordinator.group.shard import GroupConfig, GroupCoordinatorShard, GroupStats
from gregor.coordinator.write_errors import CoordinatorWriteError, append_error_to_response_error
from gregor.replication.partition import ReplicaManager
from gregor.replication.pending import Pending, all_of

log = logging.getLogger("gregor.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS = InternalTopic(
    OFFSETS_TOPIC, "offsets.topic.num.partitions", "offsets.topic.replication.factor", "offsets.load.buffer.size",
    "gregor.coordinator",
)  # fmt: skip


class GroupShardAdapter:
    """The group coordinator's part of the runtime (`ShardAdapter`)."""

    def __init__(self, config: GroupConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self.stats = GroupStats()  # the node's, whichever shards come and go

    def new_shard(self, index: int) -> GroupCoordinatorShard:
        return GroupCoordinatorShard(index, self.config, self.rng, self.stats)

    def encode(self, record: Record) -> tuple[bytes, bytes | None]:
        return encode(record)

    def decode(self, key: bytes, value: bytes | None) -> Record | None:
        return decode(key, value)

    def after_step(
        self,
        runtime: CoordinatorRuntime[GroupCoordinatorShard, Record],
        shard: GroupCoordinatorShard,
        now_ms: int,
    ) -> bool:
        """Release the shard's completions, once what is written so far is replicated."""
        for pending, value in shard.take_completions():
            runtime.answer(
                shard, _completer(pending, value), _completer_failed(pending, value), now_ms
            )
        return False

    def on_unloaded(self, shard: GroupCoordinatorShard) -> None:
        for pending, value in shard.take_completions():  # NOT_COORDINATOR, set by `unload`
            pending.complete(value)

    def busy(self) -> bool:
        return False


class GroupCoordinator(CoordinatorService[GroupCoordinatorShard, Record, GroupConfig]):
    def __init__(
        self,
        node_id: int,
        store: TopicSource,
        replicas: ReplicaManager,
        admin: TopicCreator,
        config_value: Callable[[str], Any],
        apply_metadata: Callable[[], None],
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.config_value = config_value
        self.adapter: GroupShardAdapter = GroupShardAdapter(
            self._read_config(), rng or random.Random()
        )
        self.runtime: CoordinatorRuntime[GroupCoordinatorShard, Record] = CoordinatorRuntime(
            OFFSETS, node_id, store, replicas, admin, config_value, apply_metadata, self.adapter,
            lambda: self.write_timeout_ms,
        )  # fmt: skip
        self._topics: set[str] = set(store.topics)
        removed: list[str] | None = getattr(store, "removed_topics", None)
        self._removed_seen = None if removed is None else len(removed)

    # -- configuration and the topic ------------------------------------------------------------

    def _read_config(self) -> GroupConfig:
        c = self.config_value
        return GroupConfig(
            min_session_timeout_ms=int(c("group.min.session.timeout.ms")),
            max_session_timeout_ms=int(c("group.max.session.timeout.ms")),
            initial_rebalance_delay_ms=int(c("group.initial.rebalance.delay.ms")),
            max_size=int(c("group.max.size")),
            offsets_retention_ms=int(c("offsets.retention.minutes")) * 60_000,
            offsets_retention_check_interval_ms=int(c("offsets.retention.check.interval.ms")),
            offset_metadata_max_bytes=int(c("offset.metadata.max.bytes")),
        )

    @property
    def write_timeout_ms(self) -> int:
        """How long an answer may wait for its records to be replicated (Kafka's
        offsets.commit.timeout.ms, which its coordinator applies to every write)."""
        return int(self.config_value("offsets.commit.timeout.ms"))

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` on first use (FindCoordinator), as Kafka does."""
        self.runtime.ensure_topic(lambda _factor: {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.config_value("offsets.topic.segment.bytes")),
        })  # fmt: skip

    # -- leadership and timers ------------------------------------------------------------------

    def on_metadata(self, now_ms: int, changed: Collection[str] | None = None) -> None:
        """Coordinate exactly the `__consumer_offsets` partitions this broker leads; drop the
        committed offsets of topics deleted since. `changed`: the topics that may have changed
        since the last call (None: any)."""
        self.runtime.on_metadata(now_ms, changed)
        deleted = self._deleted_topics()
        if deleted:
            self._delete_topic_offsets(deleted, now_ms)

    def _deleted_topics(self) -> set[str]:
        """Topics deleted since the last call: from the store's list of removals when it keeps
        one (the cost grows with the deletions, not with the topics), else by comparing."""
        topics = self.store.topics
        removed: list[str] | None = getattr(self.store, "removed_topics", None)
        if removed is None or self._removed_seen is None:
            deleted = self._topics - set(topics)
            self._topics = set(topics)
            return deleted
        new, self._removed_seen = removed[self._removed_seen :], len(removed)
        return {name for name in new if name not in topics}

    def _delete_topic_offsets(self, topics: set[str], now_ms: int) -> None:
        # Loaded shards only: one still loading may replay offsets of a deleted topic; they expire.
        for shard in self.runtime.shards():
            try:
                self.runtime.write(shard, shard.delete_topic_offsets(topics), now_ms, atomic=False)
            except CoordinatorWriteError:
                pass  # logged
        log.info("removed the committed offsets of deleted topics %s", sorted(topics))

    def poll(self, now_ms: int) -> int | None:
        """Load a step, run due timers, time out answers waiting too long for replication;
        the next deadline (now, while loading remains)."""
        self.refresh_config()
        return self.runtime.poll(now_ms)

    # -- operations -----------------------------------------------------------------------------

    def join_group(self, r: JoinRequest, now_ms: int) -> JoinResult | Pending:
        return self.runtime.run(
            r.group_id,
            lambda s: s.join_group(r, now_ms),
            lambda e: JoinResult.failed(e, r.member_id),
            now_ms,
        )

    def sync_group(self, r: SyncRequest, now_ms: int) -> SyncResult | Pending:
        return self.runtime.run(
            r.group_id, lambda s: s.sync_group(r, now_ms), SyncResult.failed, now_ms
        )

    def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        now_ms: int,
    ) -> int | Pending:
        return self.runtime.run(
            group_id, lambda s: s.heartbeat(group_id, generation_id, member_id, instance_id, now_ms), same, now_ms,
            what="heartbeat",
        )  # fmt: skip

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]], now_ms: int
    ) -> LeaveResult | Pending:
        return self.runtime.run(
            group_id,
            lambda s: s.leave_group(group_id, members, now_ms),
            LeaveResult,
            now_ms,
            what="leave",
        )

    def commit_offsets(self, r: OffsetCommitRequest, now_ms: int) -> PartitionErrors | Pending:
        def failed(e: int) -> PartitionErrors:
            return PartitionErrors(e, [(t, p, e) for t, p, *_ in r.offsets])

        return self.runtime.run(
            r.group_id, lambda s: s.commit_offsets(r, now_ms), failed, now_ms, what="commit"
        )

    def txn_offset_commit(
        self, r: TxnOffsetCommitRequest, now_ms: int
    ) -> PartitionErrors | Pending:
        """TxnOffsetCommit: the offsets, pending until the producer's marker (see the module
        docstring); per-partition errors in request order."""

        def failed(e: int) -> PartitionErrors:
            return PartitionErrors(e, [(t, p, e) for t, p, *_ in r.offsets])

        if not r.group_id:
            return failed(codes.INVALID_GROUP_ID)
        producer = (r.producer_id, r.producer_epoch)
        return self.runtime.run(
            r.group_id,
            lambda s: s.txn_offset_commit(r, now_ms),
            failed,
            now_ms,
            producer,
            "txn commit",
        )

    def complete_transaction(
        self, offsets_partition: int, producer_id: int, committed: bool
    ) -> None:
        """The broker has just appended `producer_id`'s COMMIT (`committed`) or ABORT marker to
        `__consumer_offsets` partition `offsets_partition`: apply it, as loading applies a
        marker it reads. Nothing to do if this broker does not coordinate the partition, or is
        still loading it (the load will read the marker from the log)."""
        shard = self.runtime.active(offsets_partition)
        if shard is not None:
            shard.replay_end_transaction(producer_id, committed)

    def fetch_offsets(
        self,
        group_id: str,
        topics: list[tuple[str, list[int]]] | None,
        require_stable: bool = False,
        now_ms: int | None = None,
    ) -> OffsetFetchResult | Pending:
        """The committed offsets; if the partition holds writes not yet replicated, answered
        once they are (what it reads may depend on them: Kafka reads only the replicated state).
        A timeout is NOT_COORDINATOR, as Kafka answers OffsetFetch (older consumers retry it)."""
        error, shard = self.runtime.locate(group_id)
        if shard is None:
            return OffsetFetchResult(error)
        result = shard.fetch_offsets(group_id, topics, require_stable)

        def failed(code: int) -> OffsetFetchResult:
            return OffsetFetchResult(
                codes.NOT_COORDINATOR if code == codes.REQUEST_TIMED_OUT else code
            )

        box = Pending(f"fetch offsets {group_id}")
        if self.runtime.answer(
            shard, lambda: box.complete(result), lambda code: box.complete(failed(code)), now_ms
        ):
            return result
        return box

    def delete_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]], now_ms: int
    ) -> PartitionErrors | Pending:
        if not group_id:  # as Kafka: OffsetDelete, unlike OffsetCommit, refuses the empty id
            return PartitionErrors(codes.INVALID_GROUP_ID)
        return self.runtime.run(
            group_id,
            lambda s: s.delete_offsets(group_id, topics),
            PartitionErrors,
            now_ms,
            what="delete offsets",
        )

    def describe_group(self, group_id: str) -> DescribedGroup | int | None:
        """The group; None if unknown; an error code if this broker cannot say."""
        error, shard = self.runtime.locate(group_id)
        if shard is None:
            return error
        return shard.describe_group(group_id)

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> tuple[int, list[ListedGroup]]:
        states, types = list(states), list(types)
        out: list[ListedGroup] = []
        for shard in self.runtime.shards():
            out += shard.list_groups(states, types)
        return (codes.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.loading else codes.NONE), out

    def delete_groups(self, group_ids: list[str], now_ms: int) -> dict[str, int] | Pending:
        """An error code per group; a Pending of them if one must wait for replication."""
        out: dict[str, Any] = {}
        for gid in group_ids:  # the empty group id too, as in Kafka
            out[gid] = self.runtime.run(gid, _delete_one(gid), same, now_ms, what="delete group")
        return all_of(out)


def _delete_one(group_id: str) -> Callable[[GroupCoordinatorShard], tuple[list[Record], int]]:
    def op(shard: GroupCoordinatorShard) -> tuple[list[Record], int]:
        records, by_group = shard.delete_groups([group_id])
        return records, by_group[group_id]

    return op


def _completer(pending: Pending, value: Any) -> Callable[[], object]:
    return lambda: pending.complete(value)


def _completer_failed(pending: Pending, value: Any) -> Callable[[int], object]:
    """Fails a parked JoinGroup / SyncGroup (the only requests the shard parks) with `code`
    as a client hears it (REQUEST_TIMED_OUT: COORDINATOR_NOT_AVAILABLE, as Kafka maps it)."""

    def fail(code: int) -> None:
        error = append_error_to_response_error(code)
        if isinstance(value, JoinResult):
            pending.complete(JoinResult.failed(error, value.member_id))
        elif isinstance(value, SyncResult):
            pending.complete(SyncResult.failed(error))
        else:
            pending.complete(value)

    return fail
