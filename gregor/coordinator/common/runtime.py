"""The coordinator runtime, generic over a shard type (Kafka's CoordinatorRuntime over a
CoordinatorShard): one shard per partition of an internal topic this broker leads, its loading,
its writes, its answers and its timers.

    runtime = CoordinatorRuntime(topic, node_id, store, replicas, admin, config_value,
                                 apply_metadata, adapter, write_timeout_ms)
    runtime.on_metadata(now_ms, changed)         # load, unload, reload: exactly the led partitions
    answer = runtime.run(key, op, failed, now_ms)   # op(shard) -> (records, response)
    next_deadline_ms = runtime.poll(now_ms)      # loading, timers, held answers' deadlines

Invariants:
- A shard exists for a partition exactly while this broker leads it, in the leader epoch it was
  loaded at (the coordinator epoch): a new epoch unloads and reloads it.
- A shard's durable state changes only by replaying records: the log's while it loads (to the
  log end, `load_buffer_key` bytes per poll; its keys get COORDINATOR_LOAD_IN_PROGRESS
  meanwhile), then its own, each batch's right after that batch is appended.
- No answer leaves before the high watermark passes every record written before it
  (`HeldAnswers`); unloading fails the held ones with NOT_COORDINATOR.
- An operation's records are one batch (atomic; a transactional one for a producer's writes);
  timers' and clean-ups' records go in as many batches under the partition's max.message.bytes
  as they need.

What differs per coordinator is its `ShardAdapter`: the shard to make, the record format, and
what to release after each step (the group's parked answers, the transaction's markers).
Synchronous: it appends to and reads from storage through the replica manager, but never waits,
sleeps, reads a clock or touches an event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from gregor.controller.admin import TopicSpec
from gregor.coordinator.deferred import HeldAnswers
from gregor.coordinator.group.records import partition_for
from gregor.coordinator.record_reader import RecordFormatError
from gregor.coordinator.write_errors import CoordinatorWriteError, append_error_to_response_error
from gregor.metadata.store import TopicInfo
from gregor.protocol.errors import BY_NAME, KafkaError
from gregor.protocol.records.batch import HEADER_SIZE, NO_PRODUCER_ID, iter_headers
from gregor.protocol.records.records import (
    build_batch,
    encode_record,
    read_batch_records,
    read_end_txn_marker,
)
from gregor.replication.partition import Partition, ReplicaManager
from gregor.replication.pending import Pending
from gregor.storage.log import AppendInfo
from gregor.storage.producer_state import AppendOrigin

NONE = 0
NOT_COORDINATOR = BY_NAME["NOT_COORDINATOR"].code
COORDINATOR_LOAD_IN_PROGRESS = BY_NAME["COORDINATOR_LOAD_IN_PROGRESS"].code
REQUEST_TIMED_OUT = BY_NAME["REQUEST_TIMED_OUT"].code
_PRODUCER_ERRORS = frozenset(
    {BY_NAME["PRODUCER_FENCED"].code, BY_NAME["INVALID_PRODUCER_EPOCH"].code}
)

MAX_SETTLE_ROUNDS = 100
R = TypeVar("R")


class CoordinatorShard(Protocol[R]):
    """The state machine of one partition (Kafka's CoordinatorShard): operations return
    `(records, response)`; state changes only in `replay`."""

    partition: int

    def replay(self, record: R, offset: int, producer_id: int) -> None: ...

    def replay_end_transaction(self, producer_id: int, committed: bool) -> None:
        """A COMMIT/ABORT marker of `producer_id` met in the log (loading) or just written."""

    def on_loaded(self, now_ms: int) -> None: ...

    def unload(self) -> None: ...

    def poll(self, now_ms: int) -> list[R]:
        """Run the timers due; the records they produce."""

    def next_deadline_ms(self) -> int | None: ...


S = TypeVar("S", bound=CoordinatorShard[Any])


class ShardAdapter(Protocol[S, R]):
    """What the runtime asks of one kind of coordinator."""

    def new_shard(self, index: int) -> S: ...

    def encode(self, record: R) -> tuple[bytes, bytes | None]: ...

    def decode(self, key: bytes, value: bytes | None) -> R | None:
        """The record; None to skip it; RecordFormatError if damaged."""

    def after_step(self, runtime: CoordinatorRuntime[S, R], shard: S, now_ms: int) -> bool:
        """Release what the last step of `shard` produced (through `runtime.answer`); True if
        that wrote records or otherwise calls for another round."""

    def on_unloaded(self, shard: S) -> None: ...

    def busy(self) -> bool:
        """Work is waiting for the next poll (then `poll` asks to be called again at once)."""


class TopicSource(Protocol):
    """The topics as the broker's metadata has them (the broker's `RaftMetadataStore`; a
    simulated broker's view of its image)."""

    @property
    def topics(self) -> Mapping[str, TopicInfo]: ...

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader by the metadata (-1: none, or no such partition)."""
        ...


class TopicCreator(Protocol):
    """What creates the internal topic on first use (the broker's `Admin`)."""

    @property
    def broker_ids(self) -> Sequence[int]: ...

    def create_topic(self, spec: TopicSpec) -> TopicInfo: ...


@dataclass(frozen=True)
class InternalTopic:
    """The topic a runtime keeps its records in, and the config keys that size it."""

    name: str
    num_partitions_key: str
    replication_factor_key: str
    load_buffer_key: str
    logger: str


@dataclass
class _Context(Generic[S]):
    """A partition coordinated here: its shard, the leader epoch it was loaded at, and how far
    its loading has come."""

    index: int
    shard: S
    epoch: int
    loading: bool = True
    next_offset: int = 0
    records: int = 0
    started_ms: int = 0


class CoordinatorRuntime(Generic[S, R]):
    def __init__(
        self,
        topic: InternalTopic,
        node_id: int,
        store: TopicSource,
        replicas: ReplicaManager,
        admin: TopicCreator,
        config_value: Callable[[str], Any],
        apply_metadata: Callable[[], None],
        adapter: ShardAdapter[S, R],
        write_timeout_ms: Callable[[], int],
    ) -> None:
        self.topic = topic
        self.node_id = node_id
        self.store = store
        self.replicas = replicas
        self.admin = admin
        self.config_value = config_value
        self.apply_metadata = apply_metadata
        self.adapter = adapter
        self.write_timeout_ms = write_timeout_ms
        self.log = logging.getLogger(topic.logger)
        self.contexts: dict[int, _Context[S]] = {}
        self.held = HeldAnswers()
        # Called when a deadline earlier than the one `poll` last returned appears, or work
        # arrives outside a step (`stepping` is False).
        self.wakeup: Callable[[], None] | None = None
        self.stepping = False
        self._polled_deadline: int | None = None

    # -- the topic, and where a key lives --------------------------------------------------------

    @property
    def num_partitions(self) -> int | None:
        info = self.store.topics.get(self.topic.name)
        return info.partitions if info is not None else None

    def partition_for(self, key: str) -> int:
        n = self.num_partitions or int(self.config_value(self.topic.num_partitions_key))
        return partition_for(key, n)

    def ensure_topic(self, configs: Callable[[int], dict[str, str | None]]) -> None:
        """Create the topic on first use, as Kafka does; `configs(replication_factor)`."""
        name = self.topic.name
        if name in self.store.topics:
            return
        partitions = int(self.config_value(self.topic.num_partitions_key))
        factor = int(self.config_value(self.topic.replication_factor_key))
        brokers = len(self.admin.broker_ids)
        if factor > brokers:
            # Kafka would refuse until enough brokers exist; a one-broker cluster is a normal
            # way to run gregor, so the factor is capped instead.
            self.log.info(
                "%s is %d but only %d broker(s) exist: creating %s with replication factor %d",
                self.topic.replication_factor_key, factor, brokers, name, brokers,
            )  # fmt: skip
            factor = brokers
        self.admin.create_topic(TopicSpec(name, partitions, factor, configs=configs(factor)))
        self.log.info("created %s with %d partitions", name, partitions)
        self.apply_metadata()

    def locate(self, key: str) -> tuple[int, S | None]:
        """(NONE, the key's loaded shard), or (the error, None)."""
        n = self.num_partitions
        if n is None:
            return NOT_COORDINATOR, None
        index = partition_for(key, n)
        ctx = self.contexts.get(index)
        if ctx is None:
            # Named leader by the metadata but not hosting the partition at all yet (its files
            # are being made): about to load, as Kafka's coordinator says while it loads.
            name = self.topic.name
            if (
                self.replicas.get(name, index) is None
                and self.store.leader_of(name, index) == self.node_id
            ):
                return COORDINATOR_LOAD_IN_PROGRESS, None
            return NOT_COORDINATOR, None
        if ctx.loading:
            return COORDINATOR_LOAD_IN_PROGRESS, None
        return NONE, ctx.shard

    def is_leader_for(self, key: str) -> bool:
        return self.num_partitions is not None and self.partition_for(key) in self.contexts

    def active(self, index: int) -> S | None:
        """The loaded shard of partition `index`, if it is coordinated here."""
        ctx = self.contexts.get(index)
        return ctx.shard if ctx is not None and not ctx.loading else None

    def shards(self) -> list[S]:
        """The loaded shards, by partition."""
        return [c.shard for _, c in sorted(self.contexts.items()) if not c.loading]

    @property
    def loading(self) -> list[int]:
        """The partitions still loading."""
        return [i for i, c in self.contexts.items() if c.loading]

    def epoch(self, index: int) -> int:
        """The coordinator epoch of partition `index`: its leader epoch when it was loaded."""
        return self.contexts[index].epoch

    # -- leadership and loading -----------------------------------------------------------------

    def on_metadata(self, now_ms: int, changed: Collection[str] | None = None) -> None:
        """Coordinate exactly the partitions this broker leads, each at the leader epoch it was
        loaded with. `changed`: the topics whose records or hosting here may have changed since
        the last call (None: any); when the topic is not among them there is nothing to look at,
        so an unrelated metadata change costs nothing here, however many partitions it has."""
        if changed is not None and self.topic.name not in changed:
            return
        led = self._led()
        for index in sorted(self.contexts):
            if led.get(index) != self.contexts[index].epoch:
                self.unload(index)
        for index in sorted(set(led) - set(self.contexts)):
            self._load(index, led[index], now_ms)
        if self.loading:
            self.log.info("loading %d partitions of %s", len(self.loading), self.topic.name)
            self.wake()

    def _led(self) -> dict[int, int]:
        """The leader epoch of each partition of the topic led here."""
        info = self.store.topics.get(self.topic.name)
        led: dict[int, int] = {}
        for index in range(info.partitions if info is not None else 0):
            p = self.replicas.get(self.topic.name, index)
            if p is not None and p.leader_id == self.node_id:
                led[index] = p.leader_epoch
        return led

    def _load(self, index: int, epoch: int, now_ms: int) -> None:
        p = self.replicas.get(self.topic.name, index)
        assert p is not None, "a led partition is hosted here"
        ctx = _Context(index, self.adapter.new_shard(index), epoch, started_ms=now_ms)
        ctx.next_offset = p.log.log_start_offset
        self.contexts[index] = ctx
        if p.log.log_end_offset <= p.log.log_start_offset:
            self._finish_load(ctx, now_ms)  # nothing to read: ready at once

    def unload(self, index: int) -> None:
        """No longer coordinated here: held answers fail NOT_COORDINATOR, the shard forgets."""
        ctx = self.contexts.pop(index)
        self.held.unload(index)
        ctx.shard.unload()
        self.adapter.on_unloaded(ctx.shard)
        self.log.info("%s-%d: no longer its coordinator", self.topic.name, index)

    def _load_step(self, ctx: _Context[S], budget: int) -> bool:
        """Replay up to `budget` bytes more of the partition; True when it is all replayed."""
        p = self.replicas.get(self.topic.name, ctx.index)
        if p is None:
            return True
        lg = p.log
        # To the log end, as Kafka's coordinator loader: a new leader's high watermark may still
        # trail records its predecessor had committed (it learns the HW from its followers).
        end = lg.log_end_offset
        ctx.next_offset = max(ctx.next_offset, lg.log_start_offset)
        if ctx.next_offset >= end:
            return True
        data = lg.read_bytes(ctx.next_offset, budget, max_offset=end)
        if not data:
            return True
        for pos, header in iter_headers(data):
            if not header.is_control:
                producer_id = header.producer_id if header.is_transactional else NO_PRODUCER_ID
                self._replay_batch(ctx, producer_id, data, pos)
            elif header.base_offset >= ctx.next_offset:
                self._replay_marker(ctx, header.producer_id, data, pos)
            ctx.next_offset = header.next_offset
        return ctx.next_offset >= end

    def _replay_batch(
        self, ctx: _Context[S], producer_id: int, data: bytes | memoryview, pos: int
    ) -> None:
        _, recs = read_batch_records(data, pos)
        for rec in recs:
            if rec.offset < ctx.next_offset or rec.key is None:
                continue
            try:
                record = self.adapter.decode(rec.key, rec.value)
            except RecordFormatError as exc:
                self.log.warning(
                    "%s-%d offset %d: skipping a damaged record: %s",
                    self.topic.name,
                    ctx.index,
                    rec.offset,
                    exc,
                )
                continue
            if record is not None:
                ctx.shard.replay(record, rec.offset, producer_id)
                ctx.records += 1

    def _replay_marker(
        self, ctx: _Context[S], producer_id: int, data: bytes | memoryview, pos: int
    ) -> None:
        """A control batch: a COMMIT/ABORT marker ends its producer's transaction (an emptied
        one, or another kind of control record, changes nothing)."""
        try:
            marker = read_end_txn_marker(data, pos)
        except KafkaError:
            return  # not a transaction marker
        if marker is not None:
            ctx.shard.replay_end_transaction(producer_id, marker[0])

    def _finish_load(self, ctx: _Context[S], now_ms: int) -> None:
        ctx.loading = False
        ctx.shard.on_loaded(now_ms)
        if ctx.records:
            self.log.info(
                "%s-%d loaded at coordinator epoch %d: %d records in %d ms",
                self.topic.name, ctx.index, ctx.epoch, ctx.records, now_ms - ctx.started_ms,
            )  # fmt: skip
        self.settle(ctx.shard, now_ms)  # what loading left to do (a transaction's markers)

    # -- writing and answering ------------------------------------------------------------------

    def write(
        self,
        shard: S,
        records: list[R],
        now_ms: int,
        producer: tuple[int, int] | None = None,
        atomic: bool = True,
    ) -> None:
        """Append `records` (one transactional batch of `producer` = (id, epoch), if given) and
        replay each batch's records with their offsets once it is appended. Not `atomic`: in as
        many batches as max.message.bytes asks. CoordinatorWriteError (with the client's error)
        if an append fails; the batches before it stay written and replayed."""
        if not records:
            return
        p = self.replicas.get(self.topic.name, shard.partition)
        if p is None or self.active(shard.partition) is not shard:
            raise CoordinatorWriteError(
                NOT_COORDINATOR, f"{self.topic.name}-{shard.partition} is not coordinated here"
            )
        encoded = [self.adapter.encode(r) for r in records]
        chunks = (
            [encoded]
            if atomic or producer is not None
            else _split(encoded, p.log.config.max_message_bytes)
        )
        producer_id = producer[0] if producer is not None else NO_PRODUCER_ID
        done = 0
        for chunk in chunks:
            info = self._append(p, chunk, producer, now_ms)
            for i in range(len(chunk)):
                shard.replay(records[done + i], info.first_offset + i, producer_id)
            done += len(chunk)

    def _append(
        self,
        p: Partition,
        encoded: list[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None,
        now_ms: int,
    ) -> AppendInfo:
        try:
            if producer is None:
                return p.append_as_leader(build_batch(encoded, base_timestamp=now_ms), -1, now_ms)
            return _append_transactional(p, encoded, producer, now_ms)
        except KafkaError as exc:
            level = (
                logging.INFO
                if producer is not None and exc.code in _PRODUCER_ERRORS
                else logging.ERROR
            )
            self.log.log(level, "%s: writing %d records failed: %s", p.name, len(encoded), exc)
            raise CoordinatorWriteError(
                append_error_to_response_error(exc.code), str(exc)
            ) from None

    def answer(
        self,
        shard: S,
        release: Callable[[], object],
        fail: Callable[[int], object],
        now_ms: int | None,
    ) -> bool:
        """Run `release` now if the partition's high watermark is at its log end (True), else
        once it is (`HeldAnswers`): `fail` gets NOT_COORDINATOR if the leadership goes first,
        REQUEST_TIMED_OUT after the write timeout (from `now_ms`; None: no limit)."""
        p = self.replicas.get(self.topic.name, shard.partition)
        if p is None:
            fail(NOT_COORDINATOR)
            return False
        deadline = None if now_ms is None else now_ms + self.write_timeout_ms()
        answered = self.held.answer(shard.partition, p, release, fail, deadline)
        if not answered:
            self.maybe_wake(self.held.next_deadline_ms())
        return answered

    def result(
        self, shard: S, result: Any, failed: Callable[[int], Any], now_ms: int, what: str
    ) -> Any:
        """`result` now, or a Pending of it (of `failed(code)`, the code as a client hears it)
        if it must wait for replication."""
        box = Pending(what)

        def fail(code: int) -> None:
            box.complete(failed(append_error_to_response_error(code)))

        if self.answer(shard, lambda: box.complete(result), fail, now_ms):
            return result
        return box

    def run(
        self,
        key: str,
        op: Callable[[S], tuple[list[R], Any]],
        failed: Callable[[int], Any],
        now_ms: int,
        producer: tuple[int, int] | None = None,
        what: str = "",
    ) -> Any:
        """Run `op` on the key's shard, write its records, and answer: at once if they (and
        every earlier write) are replicated, else a Pending released when they are. A Pending
        the shard returns (a parked request) is released by the adapter's `after_step`."""
        error, shard = self.locate(key)
        if shard is None:
            return failed(error)
        records, result = op(shard)
        try:
            self.write(shard, records, now_ms, producer)
        except CoordinatorWriteError as exc:
            if isinstance(result, Pending):
                result.complete(failed(exc.code))
            else:
                result = failed(exc.code)
            self.settle(shard, now_ms)
            return result  # nothing was written: the failure is the answer now, as in Kafka
        self.settle(shard, now_ms)
        if isinstance(result, Pending):
            return result
        return self.result(shard, result, failed, now_ms, f"{what} {key}")

    # -- steps and timers -----------------------------------------------------------------------

    def settle(self, shard: S, now_ms: int) -> None:
        """Release what the last step produced and run the timers already due, until nothing
        more happens."""
        was_stepping, self.stepping = self.stepping, True
        try:
            for _ in range(MAX_SETTLE_ROUNDS):
                progressed = self.adapter.after_step(self, shard, now_ms)
                if self.active(shard.partition) is not shard:
                    break
                deadline = shard.next_deadline_ms()
                if deadline is not None and deadline <= now_ms:
                    self._poll_shard(shard, now_ms)
                    progressed = True
                if not progressed:
                    break
        finally:
            self.stepping = was_stepping
        self.maybe_wake(shard.next_deadline_ms())

    def _poll_shard(self, shard: S, now_ms: int) -> None:
        try:
            self.write(shard, shard.poll(now_ms), now_ms, atomic=False)
        except CoordinatorWriteError:
            pass  # logged; the timers' work is done again at their next run

    def poll(self, now_ms: int) -> int | None:
        """Load a step, run due timers, time out answers waiting too long for replication;
        the next deadline (now, while loading remains or the adapter is busy)."""
        self.held.expire(now_ms, REQUEST_TIMED_OUT)
        loading = self.loading
        if loading:
            ctx = self.contexts[loading[0]]
            if self._load_step(ctx, int(self.config_value(self.topic.load_buffer_key))):
                self._finish_load(ctx, now_ms)
        deadline: int | None = None
        for shard in self.shards():
            if self.active(shard.partition) is not shard:
                continue  # unloaded by an earlier shard's step
            self._poll_shard(shard, now_ms)
            self.settle(shard, now_ms)
            deadline = _earliest(deadline, shard.next_deadline_ms())
        deadline = _earliest(deadline, self.held.next_deadline_ms())
        if self.loading or self.adapter.busy():
            deadline = now_ms
        self._polled_deadline = deadline
        return deadline

    def maybe_wake(self, deadline: int | None) -> None:
        """Bring the next poll forward to `deadline` if it is earlier than the one planned."""
        if deadline is not None and (
            self._polled_deadline is None or deadline < self._polled_deadline
        ):
            self._polled_deadline = deadline
            self.wake()

    def wake(self) -> None:
        if self.wakeup is not None:
            self.wakeup()


def _earliest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _split(
    encoded: list[tuple[bytes, bytes | None]], max_bytes: int
) -> list[list[tuple[bytes, bytes | None]]]:
    """`encoded` in order, in chunks whose batches are at most `max_bytes` (a record too large
    alone is a chunk alone, which the append refuses)."""
    chunks: list[list[tuple[bytes, bytes | None]]] = []
    chunk: list[tuple[bytes, bytes | None]] = []
    size = HEADER_SIZE
    for key, value in encoded:
        n = _record_size(len(chunk), key, value)
        if chunk and size + n > max_bytes:
            chunks.append(chunk)
            chunk, size = [], HEADER_SIZE
            n = _record_size(0, key, value)
        chunk.append((key, value))
        size += n
    if chunk:
        chunks.append(chunk)
    return chunks


def _record_size(offset_delta: int, key: bytes, value: bytes | None) -> int:
    """The bytes a record adds to an uncompressed batch at `offset_delta` (every timestamp of a
    coordinator's batch is the same: delta 0)."""
    scratch = bytearray()
    encode_record(scratch, offset_delta, 0, key, value, ())
    return len(scratch)


def _append_transactional(
    p: Partition, encoded: list[tuple[bytes, bytes | None]], producer: tuple[int, int], now_ms: int
) -> AppendInfo:
    """One transactional batch of the producer, appended as a coordinator's write: the epoch is
    checked against the partition's producer state, the sequence is not (Kafka's
    AppendOrigin.COORDINATOR). `Partition.append_as_leader` appends as a client, so this takes
    the path `Partition.write_txn_marker` takes for markers."""
    producer_id, producer_epoch = producer
    batch = build_batch(
        encoded, base_timestamp=now_ms, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=0, transactional=True,
    )  # fmt: skip
    info = p.log.append(
        batch, leader_epoch=p.leader_epoch, now_ms=now_ms, origin=AppendOrigin.COORDINATOR
    )
    p.after_leader_append(now_ms)
    return info
