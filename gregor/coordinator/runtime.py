"""The group coordinator runtime: one `GroupCoordinatorShard` per `__consumer_offsets` partition
this broker leads, its records written to that partition, its timers, its loading.

    groups = GroupCoordinator(node_id, store, replicas, admin, config_value, apply_metadata)
    groups.on_metadata(now_ms)          # after every metadata change: load / unload shards
    result = groups.join_group(request, now_ms)     # a result, or a Pending to wait on
    next_deadline_ms = groups.poll(now_ms)          # timers and loading; the broker calls it
                                                    # again at that deadline (or on `wakeup`)

A group lives in partition `abs(java_hashcode(group_id)) % partitions` (Kafka's
`Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`), so Kafka and gregor agree on
where a group's records are. Each operation runs the shard's rule, appends the records it
returns as one batch to the partition (acks=all; with one broker the append is complete when it
returns), replays them into the shard, and only then releases the answers the shard produced
(its completions): the same order Kafka's CoordinatorRuntime keeps. If a timer is already due
(group.initial.rebalance.delay.ms=0, say) it runs before the operation returns, so a lone
consumer's JoinGroup is answered at once.

Transactional offsets: `txn_offset_commit` appends its records as ONE transactional batch of the
producer (its id and epoch, sequence 0, the transactional attribute: what Kafka's coordinator
writes), appended with origin COORDINATOR, so the partition's producer state refuses an old
epoch (INVALID_PRODUCER_EPOCH, passed on to the client as Kafka does) but checks no sequence. Replayed, they are pending in the shard. The broker
appends the producer's COMMIT/ABORT marker to the partition and then calls
`complete_transaction`, which applies it to the shard exactly as loading does when it meets the
marker's control batch in the log: one function, `shard.replay_end_transaction`. Every record is
replayed with its log offset (a committed transaction's offset replaces a committed one only if
its record is the later).

Loading is replay: when this broker becomes leader of a partition (at start-up, or when the
topic is created) its shard is made empty and every record from the log start to the high
watermark is decoded and replayed, `offsets.load.buffer.size` bytes per `poll`, so the event loop
keeps serving meanwhile; requests for its groups get COORDINATOR_LOAD_IN_PROGRESS until it ends.

Synchronous and single-threaded: it does the storage I/O of an append and a read but never
waits, sleeps or touches an event loop.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gregor.controller.admin import Admin, TopicSpec
from gregor.coordinator.deferred import HeldAnswers
from gregor.coordinator.group import codes
from gregor.coordinator.group.pending import Pending, all_of
from gregor.coordinator.group.records import (
    Record,
    RecordFormatError,
    decode,
    encode,
    end_transaction_result,
    partition_for,
)
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
from gregor.coordinator.group.shard import NO_PRODUCER_ID, GroupConfig, GroupCoordinatorShard
from gregor.coordinator.write_errors import CoordinatorWriteError, append_error_to_response_error
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.protocol.errors import KafkaError
from gregor.protocol.records.batch import iter_headers
from gregor.protocol.records.records import build_batch, read_batch_records
from gregor.replication.partition import Partition, ReplicaManager
from gregor.storage.log import AppendInfo
from gregor.storage.producer_state import AppendOrigin

log = logging.getLogger("gregor.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"
MAX_SETTLE_ROUNDS = 100


@dataclass
class _Load:
    shard: GroupCoordinatorShard
    next_offset: int = 0
    records: int = 0
    started_ms: int = 0


class GroupCoordinator:
    def __init__(
        self,
        node_id: int,
        store: RaftMetadataStore,
        replicas: ReplicaManager,
        admin: Admin,
        config_value: Callable[[str], Any],
        apply_metadata: Callable[[], None],
        rng: random.Random | None = None,
    ) -> None:
        self.node_id = node_id
        self.store = store
        self.replicas = replicas
        self.admin = admin
        self.config_value = config_value
        self.apply_metadata = apply_metadata
        self.rng = rng or random.Random()
        self.shards: dict[int, GroupCoordinatorShard] = {}
        self.loading: dict[int, _Load] = {}
        self.config = self._read_config()
        self._topics: set[str] = set(store.topics)
        self.held = HeldAnswers()
        # Called when a deadline earlier than the one `poll` last returned appears.
        self.wakeup: Callable[[], None] | None = None
        self._polled_deadline: int | None = None

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

    def refresh_config(self) -> None:
        config = self._read_config()
        if config != self.config:
            self.config = config
            for shard in self.shards.values():
                shard.config = config

    @property
    def num_partitions(self) -> int | None:
        info = self.store.topics.get(OFFSETS_TOPIC)
        return info.partitions if info is not None else None

    def partition_for(self, group_id: str) -> int:
        n = self.num_partitions or int(self.config_value("offsets.topic.num.partitions"))
        return partition_for(group_id, n)

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` on first use (FindCoordinator), as Kafka does."""
        if OFFSETS_TOPIC in self.store.topics:
            return
        partitions = int(self.config_value("offsets.topic.num.partitions"))
        factor = int(self.config_value("offsets.topic.replication.factor"))
        brokers = len(self.admin.broker_ids)
        if factor > brokers:
            # Kafka would refuse (and keep answering COORDINATOR_NOT_AVAILABLE); a one-broker
            # cluster is a normal way to run gregor, so the factor is capped instead.
            log.info(
                "offsets.topic.replication.factor is %d but only %d broker(s) exist: creating %s "
                "with replication factor %d",
                factor, brokers, OFFSETS_TOPIC, brokers,
            )
            factor = brokers
        configs: dict[str, str | None] = {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.config_value("offsets.topic.segment.bytes")),
        }
        self.admin.create_topic(TopicSpec(OFFSETS_TOPIC, partitions, factor, configs=configs))
        log.info("created %s with %d partitions", OFFSETS_TOPIC, partitions)
        self.apply_metadata()

    def coordinator_error(self, group_id: str) -> int:
        """NONE if this broker coordinates the group and has loaded it."""
        return self._locate(group_id)[0]

    def _locate(self, group_id: str) -> tuple[int, GroupCoordinatorShard | None]:
        """(NONE, the group's shard), or (the error, None)."""
        n = self.num_partitions
        if n is None:
            return codes.NOT_COORDINATOR, None
        index = partition_for(group_id, n)
        shard = self.shards.get(index)
        if shard is None:
            return codes.NOT_COORDINATOR, None
        if index in self.loading:
            return codes.COORDINATOR_LOAD_IN_PROGRESS, None
        return codes.NONE, shard

    def is_leader_for(self, group_id: str) -> bool:
        return self.num_partitions is not None and self.partition_for(group_id) in self.shards

    # -- leadership and loading -----------------------------------------------------------------

    def on_metadata(self, now_ms: int) -> None:
        """Coordinate exactly the `__consumer_offsets` partitions this broker leads."""
        info = self.store.topics.get(OFFSETS_TOPIC)
        led: set[int] = set()
        if info is not None:
            for index in range(info.partitions):
                p = self.replicas.get(OFFSETS_TOPIC, index)
                if p is not None and p.leader_id == self.node_id:
                    led.add(index)
        for index in sorted(set(self.shards) - led):
            self._unload(index)
        deleted = self._topics - set(self.store.topics)
        self._topics = set(self.store.topics)
        if deleted:
            self._delete_topic_offsets(deleted, now_ms)
        for index in sorted(led - set(self.shards)):
            shard = GroupCoordinatorShard(index, self.config, self.rng)
            self.shards[index] = shard
            p = self.replicas.get(OFFSETS_TOPIC, index)
            assert p is not None
            self.loading[index] = _Load(shard, p.log.log_start_offset, started_ms=now_ms)
            if p.log.log_end_offset == p.log.log_start_offset:
                self._finish_load(index, now_ms)  # nothing to read: ready at once
        if self.loading:
            log.info("loading %d partitions of %s", len(self.loading), OFFSETS_TOPIC)
            self._wake()

    def _delete_topic_offsets(self, topics: set[str], now_ms: int) -> None:
        for index, shard in self.shards.items():
            if index in self.loading:
                continue  # replaying an offset of a deleted topic is harmless; it expires
            try:
                self._write(shard, shard.delete_topic_offsets(topics), now_ms)
            except CoordinatorWriteError:
                pass  # logged
        log.info("removed the committed offsets of deleted topics %s", sorted(topics))

    def _unload(self, index: int) -> None:
        shard = self.shards.pop(index)
        self.loading.pop(index, None)
        self.held.unload(index)  # NOT_COORDINATOR for answers still waiting for replication
        shard.unload()
        for pending, value in shard.take_completions():
            pending.complete(value)
        log.info("%s-%d: no longer its coordinator", OFFSETS_TOPIC, index)

    def _load_step(self, index: int, load: _Load, budget: int) -> bool:
        """Replay up to `budget` bytes more of the partition; True when it is all replayed."""
        p = self.replicas.get(OFFSETS_TOPIC, index)
        if p is None:
            return True
        lg = p.log
        # To the log end, as Kafka's coordinator loader: a new leader's high watermark may still
        # trail records its predecessor had committed (it learns the HW from its followers).
        end = lg.log_end_offset
        load.next_offset = max(load.next_offset, lg.log_start_offset)
        if load.next_offset >= end:
            return True
        data = lg.read_bytes(load.next_offset, budget, max_offset=end)
        if not data:
            return True
        for pos, header in iter_headers(data):
            if header.is_control:
                if header.base_offset >= load.next_offset:
                    self._replay_marker(load.shard, header.producer_id, data, pos)
            else:
                producer_id = header.producer_id if header.is_transactional else NO_PRODUCER_ID
                _, recs = read_batch_records(data, pos)
                for rec in recs:
                    if rec.offset < load.next_offset or rec.key is None:
                        continue
                    try:
                        record = decode(rec.key, rec.value)
                    except RecordFormatError as exc:
                        log.warning("%s-%d offset %d: skipping a damaged record: %s", OFFSETS_TOPIC, index, rec.offset, exc)
                        continue
                    if record is not None:
                        load.shard.replay(record, rec.offset, producer_id)
                        load.records += 1
            load.next_offset = header.next_offset
        return load.next_offset >= end

    def _replay_marker(self, shard: GroupCoordinatorShard, producer_id: int, data: bytes | memoryview, pos: int) -> None:
        """A control batch met while loading: a COMMIT/ABORT marker ends its producer's
        transaction (an emptied one, or another kind of control record, changes nothing)."""
        _, recs = read_batch_records(data, pos)
        if not recs:
            return
        committed = end_transaction_result(recs[0].key)
        if committed is not None:
            shard.replay_end_transaction(producer_id, committed)

    def _finish_load(self, index: int, now_ms: int) -> None:
        load = self.loading.pop(index)
        load.shard.on_loaded(now_ms)
        if load.records:
            log.info(
                "%s-%d loaded: %d records, %d groups, in %d ms",
                OFFSETS_TOPIC, index, load.records, len(load.shard.groups), now_ms - load.started_ms,
            )

    # -- the write path -------------------------------------------------------------------------

    def _write(
        self, shard: GroupCoordinatorShard, records: list[Record], now_ms: int, producer: tuple[int, int] | None = None
    ) -> None:
        """Append `records` as one batch (a transactional one of `producer` = (id, epoch), if
        given) and replay them with their offsets. Whatever is answered after this waits until
        the batch is replicated (`_answer`)."""
        if not records:
            return
        p = self.replicas.get(OFFSETS_TOPIC, shard.partition)
        if p is None:
            raise CoordinatorWriteError(codes.NOT_COORDINATOR, f"{OFFSETS_TOPIC}-{shard.partition} is not hosted here")
        encoded = [encode(r) for r in records]
        try:
            if producer is None:
                info = p.append_as_leader(build_batch(encoded, base_timestamp=now_ms), -1, now_ms)
            else:
                info = _append_transactional(p, encoded, producer, now_ms)
        except KafkaError as exc:
            level = logging.INFO if producer is not None and exc.code in _PRODUCER_ERRORS else logging.ERROR
            log.log(level, "%s-%d: writing %d records failed: %s", OFFSETS_TOPIC, shard.partition, len(records), exc)
            raise CoordinatorWriteError(append_error_to_response_error(exc.code), str(exc)) from None
        producer_id = producer[0] if producer is not None else NO_PRODUCER_ID
        for i, r in enumerate(records):
            shard.replay(r, info.first_offset + i, producer_id)

    def _deliver(self, shard: GroupCoordinatorShard, now_ms: int) -> None:
        """Release the shard's completions, once what is written so far is replicated."""
        for pending, value in shard.take_completions():
            self._answer(shard, _completer(pending, value), _completer_failed(pending, value), now_ms)

    def _answer(
        self, shard: GroupCoordinatorShard, release: Callable[[], object], fail: Callable[[int], object], now_ms: int | None
    ) -> bool:
        """Run `release` now if the partition's high watermark is at its log end (True), else
        once it is (`HeldAnswers`): `fail` gets NOT_COORDINATOR if the leadership goes first,
        REQUEST_TIMED_OUT after offsets.commit.timeout.ms (from `now_ms`; None: no limit)."""
        p = self.replicas.get(OFFSETS_TOPIC, shard.partition)
        if p is None:
            fail(codes.NOT_COORDINATOR)
            return False
        deadline = None if now_ms is None else now_ms + self.write_timeout_ms
        answered = self.held.answer(shard.partition, p, release, fail, deadline)
        if not answered:
            self._maybe_wake(self.held.next_deadline_ms())
        return answered

    def _result(self, shard: GroupCoordinatorShard, result: Any, failed: Callable[[int], Any], now_ms: int, what: str) -> Any:
        """`result` now, or a Pending of it (of `failed(code)` on a failure) if it must wait."""
        box = Pending(what)
        if self._answer(shard, lambda: box.complete(result), lambda code: box.complete(failed(_response_error(code))), now_ms):
            return result
        return box

    def _settle(self, shard: GroupCoordinatorShard, now_ms: int) -> None:
        """Release the answers of the last step, and run timers already due."""
        self._deliver(shard, now_ms)
        for _ in range(MAX_SETTLE_ROUNDS):
            deadline = shard.next_deadline_ms()
            if deadline is None or deadline > now_ms:
                break
            self._poll_shard(shard, now_ms)
        self._maybe_wake(shard.next_deadline_ms())

    def _maybe_wake(self, deadline: int | None) -> None:
        """Bring the next poll forward to `deadline` if it is earlier than the one planned."""
        if deadline is not None and (self._polled_deadline is None or deadline < self._polled_deadline):
            self._polled_deadline = deadline
            self._wake()

    def _poll_shard(self, shard: GroupCoordinatorShard, now_ms: int) -> None:
        records = shard.poll(now_ms)
        try:
            self._write(shard, records, now_ms)
        except CoordinatorWriteError:
            pass  # logged; timers' records are retried by the next rebalance or expiry run
        self._deliver(shard, now_ms)

    def _wake(self) -> None:
        if self.wakeup is not None:
            self.wakeup()

    def _run(
        self,
        group_id: str,
        op: Callable[[GroupCoordinatorShard], tuple[list[Record], Any]],
        failed: Callable[[int], Any],
        now_ms: int,
        producer: tuple[int, int] | None = None,
        what: str = "",
    ) -> Any:
        """Run `op` on the group's shard, write its records, and answer: at once if they (and
        every earlier write) are replicated, else a Pending released when they are."""
        error, shard = self._locate(group_id)
        if shard is None:
            return failed(error)
        records, result = op(shard)
        try:
            self._write(shard, records, now_ms, producer)
        except CoordinatorWriteError as exc:
            if isinstance(result, Pending):
                result.complete(failed(exc.code))
            else:
                result = failed(exc.code)
            self._settle(shard, now_ms)
            return result  # nothing was written: the failure is the answer now, as in Kafka
        self._settle(shard, now_ms)
        if isinstance(result, Pending):
            return result  # its value comes through `_deliver`
        return self._result(shard, result, failed, now_ms, f"{what} {group_id}")

    # -- timers ---------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> int | None:
        """Load a step, run due timers, time out answers waiting too long for replication;
        the next deadline (now, while loading remains)."""
        self.refresh_config()
        self.held.expire(now_ms, codes.REQUEST_TIMED_OUT)
        if self.loading:
            index = next(iter(self.loading))
            budget = int(self.config_value("offsets.load.buffer.size"))
            if self._load_step(index, self.loading[index], budget):
                self._finish_load(index, now_ms)
        deadline: int | None = None
        for index, shard in self.shards.items():
            if index in self.loading:
                continue
            self._poll_shard(shard, now_ms)
            d = shard.next_deadline_ms()
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        held = self.held.next_deadline_ms()
        if held is not None and (deadline is None or held < deadline):
            deadline = held
        if self.loading:
            deadline = now_ms
        self._polled_deadline = deadline
        return deadline

    # -- operations -----------------------------------------------------------------------------

    def join_group(self, r: JoinRequest, now_ms: int) -> JoinResult | Pending:
        return self._run(r.group_id, lambda s: s.join_group(r, now_ms), lambda e: JoinResult.failed(e, r.member_id), now_ms)

    def sync_group(self, r: SyncRequest, now_ms: int) -> SyncResult | Pending:
        return self._run(r.group_id, lambda s: s.sync_group(r, now_ms), SyncResult.failed, now_ms)

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None, now_ms: int) -> int | Pending:
        return self._run(
            group_id, lambda s: s.heartbeat(group_id, generation_id, member_id, instance_id, now_ms), _same, now_ms,
            what="heartbeat",
        )  # fmt: skip

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]], now_ms: int) -> LeaveResult | Pending:
        return self._run(group_id, lambda s: s.leave_group(group_id, members, now_ms), LeaveResult, now_ms, what="leave")

    def commit_offsets(self, r: OffsetCommitRequest, now_ms: int) -> PartitionErrors | Pending:
        def failed(e: int) -> PartitionErrors:
            return PartitionErrors(e, [(t, p, e) for t, p, *_ in r.offsets])

        return self._run(r.group_id, lambda s: s.commit_offsets(r, now_ms), failed, now_ms, what="commit")

    def txn_offset_commit(self, r: TxnOffsetCommitRequest, now_ms: int) -> PartitionErrors | Pending:
        """TxnOffsetCommit: the offsets, pending until the producer's marker (see the module
        docstring); per-partition errors in request order."""

        def failed(e: int) -> PartitionErrors:
            return PartitionErrors(e, [(t, p, e) for t, p, *_ in r.offsets])

        if not r.group_id:
            return failed(codes.INVALID_GROUP_ID)
        producer = (r.producer_id, r.producer_epoch)
        return self._run(r.group_id, lambda s: s.txn_offset_commit(r, now_ms), failed, now_ms, producer, "txn commit")

    def complete_transaction(self, offsets_partition: int, producer_id: int, committed: bool) -> None:
        """The broker has just appended `producer_id`'s COMMIT (`committed`) or ABORT marker to
        `__consumer_offsets` partition `offsets_partition`: apply it, as loading applies a
        marker it reads. Nothing to do if this broker does not coordinate the partition, or is
        still loading it (the load will read the marker from the log)."""
        shard = self.shards.get(offsets_partition)
        if shard is None or offsets_partition in self.loading:
            return
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
        error, shard = self._locate(group_id)
        if shard is None:
            return OffsetFetchResult(error)
        result = shard.fetch_offsets(group_id, topics, require_stable)

        def failed(code: int) -> OffsetFetchResult:
            return OffsetFetchResult(codes.NOT_COORDINATOR if code == codes.REQUEST_TIMED_OUT else code)

        box = Pending(f"fetch offsets {group_id}")
        if self._answer(shard, lambda: box.complete(result), lambda code: box.complete(failed(code)), now_ms):
            return result
        return box

    def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]], now_ms: int) -> PartitionErrors | Pending:
        if not group_id:  # as Kafka: OffsetDelete, unlike OffsetCommit, refuses the empty id
            return PartitionErrors(codes.INVALID_GROUP_ID)
        return self._run(group_id, lambda s: s.delete_offsets(group_id, topics), PartitionErrors, now_ms, what="delete offsets")

    def describe_group(self, group_id: str) -> DescribedGroup | int | None:
        """The group; None if unknown; an error code if this broker cannot say."""
        error, shard = self._locate(group_id)
        if shard is None:
            return error
        return shard.describe_group(group_id)

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> tuple[int, list[ListedGroup]]:
        states, types = list(states), list(types)
        out: list[ListedGroup] = []
        for index, shard in sorted(self.shards.items()):
            if index not in self.loading:
                out += shard.list_groups(states, types)
        return (codes.COORDINATOR_LOAD_IN_PROGRESS if self.loading else codes.NONE), out

    def delete_groups(self, group_ids: list[str], now_ms: int) -> dict[str, int] | Pending:
        """An error code per group; a Pending of them if one must wait for replication."""
        out: dict[str, Any] = {}
        for gid in group_ids:  # the empty group id too, as in Kafka
            out[gid] = self._run(gid, _delete_one(gid), _same, now_ms, what="delete group")
        return all_of(out)


_PRODUCER_ERRORS = frozenset({codes.PRODUCER_FENCED, codes.INVALID_PRODUCER_EPOCH})


def _append_transactional(p: Partition, encoded: list[tuple[bytes, bytes | None]], producer: tuple[int, int], now_ms: int) -> AppendInfo:
    """One transactional batch of the producer, appended as a coordinator's write: the epoch is
    checked against the partition's producer state, the sequence is not (Kafka's
    AppendOrigin.COORDINATOR). `Partition.append_as_leader` appends as a client, so this takes
    the path `Partition.write_txn_marker` takes for markers."""
    producer_id, producer_epoch = producer
    batch = build_batch(
        encoded, base_timestamp=now_ms, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=0, transactional=True,
    )  # fmt: skip
    info = p.log.append(batch, leader_epoch=p.leader_epoch, now_ms=now_ms, origin=AppendOrigin.COORDINATOR)
    p.after_leader_append(now_ms)
    return info


def _delete_one(group_id: str) -> Callable[[GroupCoordinatorShard], tuple[list[Record], int]]:
    def op(shard: GroupCoordinatorShard) -> tuple[list[Record], int]:
        records, by_group = shard.delete_groups([group_id])
        return records, by_group[group_id]

    return op


def _same(code: int) -> int:
    return code


def _response_error(code: int) -> int:
    """What a client hears when its answer could not wait any longer (REQUEST_TIMED_OUT:
    COORDINATOR_NOT_AVAILABLE, as Kafka's group coordinator maps it) or lost the leadership."""
    return append_error_to_response_error(code)


def _completer(pending: Pending, value: Any) -> Callable[[], object]:
    return lambda: pending.complete(value)


def _completer_failed(pending: Pending, value: Any) -> Callable[[int], object]:
    """Fails a parked JoinGroup / SyncGroup (the only requests the shard parks) with `code`."""

    def fail(code: int) -> None:
        error = _response_error(code)
        if isinstance(value, JoinResult):
            pending.complete(JoinResult.failed(error, value.member_id))
        elif isinstance(value, SyncResult):
            pending.complete(SyncResult.failed(error))
        else:
            pending.complete(value)

    return fail
