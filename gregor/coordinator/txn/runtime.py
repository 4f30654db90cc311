"""The transaction coordinator runtime: one `TransactionCoordinatorShard` per `__transaction_state`
partition this broker leads, its records written to that partition, its timers, its loading,
and the markers its transactions owe.

    txns = TransactionCoordinator(node_id, store, replicas, admin, config_value, apply_metadata,
                                  new_producer_id, write_markers)
    txns.on_metadata(now_ms)               # after every metadata change: load / unload shards
    answer = txns.end_txn(tid, pid, epoch, committed, 0, now_ms)
    next_deadline_ms = txns.poll(now_ms)   # timers, loading, late marker answers; the broker
                                           # calls it again at that deadline (or on `wakeup`)

A transactional id lives in partition `abs(java_hashcode(id)) % partitions`, as in Kafka. Each
operation runs the shard's rule, appends the records it returns as one batch (acks=all;
uncompressed, as Kafka enforces for this topic), replays them into the shard, and only then
answers. The coordinator epoch is the partition's leader epoch when the shard was loaded; a new
leader epoch reloads it.

Markers: when a replayed PrepareCommit/PrepareAbort asks for markers, the runtime calls the
injected writer

    write_markers(transactional_id, producer_id, producer_epoch, coordinator_epoch, committed,
                  partitions, done)

and `done(errors)` (an error code per partition) hands the answer back to the shard, whose
Complete* record is then appended. `done` may be called at once (a one-node cluster writes the
markers in place) or later from elsewhere: then it is taken up by the next `poll`, which
`wakeup` brings forward. An answer for a shard since unloaded or reloaded is dropped. In a
cluster the broker's writer (`gregor/broker/marker_sender.py`) writes the partitions led here in
place and sends the others to their leaders (WriteTxnMarkers); it never retries: the shard
retries the partitions whose answer is retriable, after its backoff (`markers_written`).

Loading is replay: when this broker becomes leader of a partition its shard is made empty and
every record from the log start to the high watermark is decoded and replayed,
`transaction.state.log.load.buffer.size` bytes per `poll`; requests for its ids get
COORDINATOR_LOAD_IN_PROGRESS until it ends. Transactions the log leaves preparing get their
markers written again.

Synchronous and single-threaded: it does the storage I/O of an append and a read but never
waits, sleeps or touches an event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from gregor.controller.admin import Admin, TopicSpec
from gregor.coordinator.deferred import HeldAnswers
from gregor.coordinator.group.pending import Pending
from gregor.coordinator.group.records import partition_for
from gregor.coordinator.txn import codes
from gregor.coordinator.txn.records import (
    RecordFormatError,
    TopicPartition,
    TxnRecord,
    decode,
    encode,
)
from gregor.coordinator.txn.results import (
    DescribedTransaction,
    ListedTransactions,
    MarkerRequest,
    ProducerIdAndEpoch,
)
from gregor.coordinator.txn.shard import TransactionCoordinatorShard, TxnConfig
from gregor.coordinator.txn.state import BY_NAME as STATE_BY_NAME
from gregor.coordinator.write_errors import CoordinatorWriteError, append_error_to_response_error
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.protocol.errors import KafkaError
from gregor.protocol.records.batch import iter_headers
from gregor.protocol.records.records import build_batch, read_batch_records
from gregor.replication.partition import ReplicaManager

log = logging.getLogger("gregor.coordinator.txn")

TRANSACTION_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
MAX_SETTLE_ROUNDS = 100
RECORDS_PER_BATCH = 500  # tombstones of many expired ids go out in batches of this many
# How long an answer may wait for its records to be replicated: Kafka's transaction coordinator
# appends with the broker's request.timeout.ms (30 s by default).
WRITE_TIMEOUT_MS = 30_000


class MarkerWriter(Protocol):
    def __call__(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        partitions: list[tuple[str, int]],
        done: Callable[[dict[tuple[str, int], int]], None],
    ) -> None: ...


def produce_error(code: int, abortable_supported: bool = False) -> int:
    """A verification answer as the produce path reports it (Kafka's AddPartitionsToTxnManager
    and ReplicaManager): PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH; a partition not in the
    transaction INVALID_TXN_STATE (TRANSACTION_ABORTABLE to clients that know it, Produce v11+);
    a coordinator that cannot say yet NOT_ENOUGH_REPLICAS, which every client retries."""
    if code == codes.PRODUCER_FENCED:
        return codes.INVALID_PRODUCER_EPOCH
    if code == codes.TRANSACTION_ABORTABLE and not abortable_supported:
        return codes.INVALID_TXN_STATE
    if code in (
        codes.CONCURRENT_TRANSACTIONS, codes.NETWORK_EXCEPTION, codes.COORDINATOR_LOAD_IN_PROGRESS,
        codes.COORDINATOR_NOT_AVAILABLE, codes.NOT_COORDINATOR,
    ):
        return codes.NOT_ENOUGH_REPLICAS
    return code


@dataclass
class _Load:
    shard: TransactionCoordinatorShard
    next_offset: int = 0
    records: int = 0
    started_ms: int = 0


@dataclass
class _MarkerAnswer:
    index: int
    shard: TransactionCoordinatorShard
    request: MarkerRequest
    errors: dict[TopicPartition, int]


class TransactionCoordinator:
    def __init__(
        self,
        node_id: int,
        store: RaftMetadataStore,
        replicas: ReplicaManager,
        admin: Admin,
        config_value: Callable[[str], Any],
        apply_metadata: Callable[[], None],
        new_producer_id: Callable[[], int],
        write_markers: MarkerWriter,
    ) -> None:
        self.node_id = node_id
        self.store = store
        self.replicas = replicas
        self.admin = admin
        self.config_value = config_value
        self.apply_metadata = apply_metadata
        self.new_producer_id = new_producer_id
        self.write_markers = write_markers
        self.shards: dict[int, TransactionCoordinatorShard] = {}
        self.coordinator_epochs: dict[int, int] = {}
        self.loading: dict[int, _Load] = {}
        self.config = self._read_config()
        # Called when a deadline earlier than the one `poll` last returned appears, or a marker
        # answer arrives outside an operation.
        self.wakeup: Callable[[], None] | None = None
        self._polled_deadline: int | None = None
        self._answers: list[_MarkerAnswer] = []
        self._stepping = False
        self.held = HeldAnswers()
        # Marker requests whose PrepareCommit/PrepareAbort is replicated, to send.
        self._released: list[tuple[int, TransactionCoordinatorShard, MarkerRequest]] = []

    # -- configuration and the topic ------------------------------------------------------------

    def _read_config(self) -> TxnConfig:
        c = self.config_value
        return TxnConfig(
            max_timeout_ms=int(c("transaction.max.timeout.ms")),
            transactional_id_expiration_ms=int(c("transactional.id.expiration.ms")),
            abort_timed_out_interval_ms=int(c("transaction.abort.timed.out.transaction.cleanup.interval.ms")),
            remove_expired_interval_ms=int(c("transaction.remove.expired.transaction.cleanup.interval.ms")),
        )

    def refresh_config(self) -> None:
        config = self._read_config()
        if config != self.config:
            self.config = config
            for shard in self.shards.values():
                shard.config = config

    @property
    def num_partitions(self) -> int | None:
        info = self.store.topics.get(TRANSACTION_TOPIC)
        return info.partitions if info is not None else None

    def partition_for(self, transactional_id: str) -> int:
        n = self.num_partitions or int(self.config_value("transaction.state.log.num.partitions"))
        return partition_for(transactional_id, n)

    def offsets_partition_for(self, group_id: str) -> int:
        """The `__consumer_offsets` partition of a group, as the group coordinator places it."""
        info = self.store.topics.get(OFFSETS_TOPIC)
        n = info.partitions if info is not None else int(self.config_value("offsets.topic.num.partitions"))
        return partition_for(group_id, n)

    def ensure_transaction_topic(self) -> None:
        """Create `__transaction_state` on first use (FindCoordinator), as Kafka does."""
        if TRANSACTION_TOPIC in self.store.topics:
            return
        partitions = int(self.config_value("transaction.state.log.num.partitions"))
        factor = int(self.config_value("transaction.state.log.replication.factor"))
        brokers = len(self.admin.broker_ids)
        if factor > brokers:
            # Kafka would refuse until enough brokers exist; gregor caps it (a one-broker cluster
            # is a normal way to run it), and min.insync.replicas with it.
            log.info(
                "transaction.state.log.replication.factor is %d but only %d broker(s) exist: creating %s "
                "with replication factor %d",
                factor, brokers, TRANSACTION_TOPIC, brokers,
            )
            factor = brokers
        min_isr = min(int(self.config_value("transaction.state.log.min.isr")), factor)
        configs: dict[str, str | None] = {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(min_isr),
            "segment.bytes": str(self.config_value("transaction.state.log.segment.bytes")),
        }
        self.admin.create_topic(TopicSpec(TRANSACTION_TOPIC, partitions, factor, configs=configs))
        log.info("created %s with %d partitions", TRANSACTION_TOPIC, partitions)
        self.apply_metadata()

    def coordinator_error(self, transactional_id: str) -> int:
        """NONE if this broker coordinates the id and has loaded its partition."""
        return self._locate(transactional_id)[0]

    def is_leader_for(self, transactional_id: str) -> bool:
        return self.num_partitions is not None and self.partition_for(transactional_id) in self.shards

    def _locate(self, transactional_id: str) -> tuple[int, TransactionCoordinatorShard | None]:
        n = self.num_partitions
        if n is None:
            return codes.NOT_COORDINATOR, None
        index = partition_for(transactional_id, n)
        shard = self.shards.get(index)
        if shard is None:
            return codes.NOT_COORDINATOR, None
        if index in self.loading:
            return codes.COORDINATOR_LOAD_IN_PROGRESS, None
        return codes.NONE, shard

    # -- leadership and loading -----------------------------------------------------------------

    def on_metadata(self, now_ms: int) -> None:
        """Coordinate exactly the `__transaction_state` partitions this broker leads, each at the
        leader epoch it was loaded with."""
        info = self.store.topics.get(TRANSACTION_TOPIC)
        led: dict[int, int] = {}
        if info is not None:
            for index in range(info.partitions):
                p = self.replicas.get(TRANSACTION_TOPIC, index)
                if p is not None and p.leader_id == self.node_id:
                    led[index] = p.leader_epoch
        for index in sorted(self.shards):
            if led.get(index) != self.coordinator_epochs[index]:
                self._unload(index)
        for index in sorted(set(led) - set(self.shards)):
            shard = TransactionCoordinatorShard(index, self.config, self.new_producer_id)
            self.shards[index] = shard
            self.coordinator_epochs[index] = led[index]
            p = self.replicas.get(TRANSACTION_TOPIC, index)
            assert p is not None
            self.loading[index] = _Load(shard, p.log.log_start_offset, started_ms=now_ms)
            if p.log.log_end_offset <= p.log.log_start_offset:
                self._finish_load(index, now_ms)  # nothing to read: ready at once
        if self.loading:
            log.info("loading %d partitions of %s", len(self.loading), TRANSACTION_TOPIC)
            self._wake()

    def _unload(self, index: int) -> None:
        shard = self.shards.pop(index)
        self.coordinator_epochs.pop(index, None)
        self.loading.pop(index, None)
        self.held.unload(index)  # NOT_COORDINATOR for answers still waiting for replication
        shard.unload()
        log.info("%s-%d: no longer its coordinator", TRANSACTION_TOPIC, index)

    def _load_step(self, index: int, load: _Load, budget: int) -> bool:
        """Replay up to `budget` bytes more of the partition; True when it is all replayed."""
        p = self.replicas.get(TRANSACTION_TOPIC, index)
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
            if not header.is_control:
                _, recs = read_batch_records(data, pos)
                for rec in recs:
                    if rec.offset < load.next_offset or rec.key is None:
                        continue
                    try:
                        record = decode(rec.key, rec.value)
                    except RecordFormatError as exc:
                        log.warning("%s-%d offset %d: skipping a damaged record: %s", TRANSACTION_TOPIC, index, rec.offset, exc)
                        continue
                    if record is None:
                        log.warning("%s-%d offset %d: skipping a record with an unknown key version", TRANSACTION_TOPIC, index, rec.offset)
                        continue
                    load.shard.replay(record)
                    load.records += 1
            load.next_offset = header.next_offset
        return load.next_offset >= end

    def _finish_load(self, index: int, now_ms: int) -> None:
        load = self.loading.pop(index)
        load.shard.on_loaded(now_ms)
        if load.records:
            log.info(
                "%s-%d loaded at coordinator epoch %d: %d records, %d transactional ids, in %d ms",
                TRANSACTION_TOPIC, index, self.coordinator_epochs[index], load.records, len(load.shard.txns),
                now_ms - load.started_ms,
            )
        self._settle(load.shard, now_ms)  # the markers of transactions left preparing

    # -- the write path -------------------------------------------------------------------------

    def _write(self, shard: TransactionCoordinatorShard, records: list[TxnRecord], now_ms: int) -> None:
        if not records:
            return
        p = self.replicas.get(TRANSACTION_TOPIC, shard.partition)
        if p is None or self.shards.get(shard.partition) is not shard:
            raise CoordinatorWriteError(codes.NOT_COORDINATOR, f"{TRANSACTION_TOPIC}-{shard.partition} is not coordinated here")
        for start in range(0, len(records), RECORDS_PER_BATCH):
            chunk = records[start : start + RECORDS_PER_BATCH]
            batch = build_batch([encode(r) for r in chunk], base_timestamp=now_ms)
            try:
                p.append_as_leader(batch, -1, now_ms)
            except KafkaError as exc:
                log.error("%s-%d: writing %d records failed: %s", TRANSACTION_TOPIC, shard.partition, len(chunk), exc)
                raise CoordinatorWriteError(append_error_to_response_error(exc.code), str(exc)) from None
            for r in chunk:
                shard.replay(r)

    def _send_markers(self, index: int, shard: TransactionCoordinatorShard) -> bool:
        """Send the markers the shard asks for, each once its PrepareCommit/PrepareAbort is
        replicated (Kafka sends them from the append's completion): a marker written for a
        prepare record a failover then loses would commit half a transaction."""
        for request in shard.take_marker_requests():
            self._answer(shard, _releaser(self._release_markers, index, shard, request), _ignore, None)
        mine = [r for r in self._released if r[1] is shard]
        if not mine:
            return False
        self._released = [r for r in self._released if r[1] is not shard]
        for _, _, request in mine:
            if self.shards.get(index) is not shard:
                break  # unloaded meanwhile: the next coordinator sends them
            if not request.partitions:
                self._answers.append(_MarkerAnswer(index, shard, request, {}))
                continue
            self.write_markers(
                request.transactional_id, request.producer_id, request.producer_epoch,
                self.coordinator_epochs[index], request.committed, list(request.partitions),
                self._done_callback(index, shard, request),
            )
        return True

    def _release_markers(self, index: int, shard: TransactionCoordinatorShard, request: MarkerRequest) -> None:
        self._released.append((index, shard, request))
        if not self._stepping:
            self._wake()  # released by a high watermark move: the next poll sends them

    def _answer(
        self, shard: TransactionCoordinatorShard, release: Callable[[], object], fail: Callable[[int], object], now_ms: int | None
    ) -> bool:
        """Run `release` now if the partition's high watermark is at its log end (True), else
        once it is (`HeldAnswers`): `fail` gets NOT_COORDINATOR if the leadership goes first,
        REQUEST_TIMED_OUT after WRITE_TIMEOUT_MS (from `now_ms`; None: no limit)."""
        p = self.replicas.get(TRANSACTION_TOPIC, shard.partition)
        if p is None:
            fail(codes.NOT_COORDINATOR)
            return False
        deadline = None if now_ms is None else now_ms + WRITE_TIMEOUT_MS
        answered = self.held.answer(shard.partition, p, release, fail, deadline)
        if not answered and deadline is not None and (self._polled_deadline is None or deadline < self._polled_deadline):
            self._polled_deadline = deadline
            self._wake()
        return answered

    def _done_callback(self, index: int, shard: TransactionCoordinatorShard, request: MarkerRequest) -> Callable[[dict[TopicPartition, int]], None]:
        called = False

        def done(errors: dict[TopicPartition, int]) -> None:
            nonlocal called
            if called:
                return
            called = True
            self._answers.append(_MarkerAnswer(index, shard, request, dict(errors)))
            if not self._stepping:
                self._wake()  # answered later: the next poll takes it up

        return done

    def _take_answers(self, now_ms: int) -> bool:
        answers, self._answers = self._answers, []
        for a in answers:
            if self.shards.get(a.index) is not a.shard or a.index in self.loading:
                continue  # unloaded or reloaded since: the new coordinator writes its own
            records = a.shard.markers_written(a.request, a.errors, now_ms)
            try:
                self._write(a.shard, records, now_ms)
            except CoordinatorWriteError:
                pass  # logged; the shard offers the record again
        return bool(answers)

    def _settle(self, shard: TransactionCoordinatorShard, now_ms: int) -> None:
        """Send the markers asked for, take the answers, and run timers already due, until
        nothing more happens."""
        was_stepping, self._stepping = self._stepping, True
        try:
            for _ in range(MAX_SETTLE_ROUNDS):
                progressed = self._send_markers(shard.partition, shard) if self.shards.get(shard.partition) is shard else False
                progressed = self._take_answers(now_ms) or progressed
                deadline = shard.next_deadline_ms()
                if deadline is not None and deadline <= now_ms and self.shards.get(shard.partition) is shard:
                    self._poll_shard(shard, now_ms)
                    progressed = True
                if not progressed:
                    break
        finally:
            self._stepping = was_stepping
        deadline = shard.next_deadline_ms()
        if deadline is not None and (self._polled_deadline is None or deadline < self._polled_deadline):
            self._polled_deadline = deadline
            self._wake()

    def _poll_shard(self, shard: TransactionCoordinatorShard, now_ms: int) -> None:
        try:
            self._write(shard, shard.poll(now_ms), now_ms)
        except CoordinatorWriteError:
            pass  # logged; timers' work is tried again at their next run

    def _wake(self) -> None:
        if self.wakeup is not None:
            self.wakeup()

    def _run(self, transactional_id: str, op: Callable[[TransactionCoordinatorShard], tuple[list[TxnRecord], Any]], failed: Callable[[int], Any], now_ms: int) -> Any:
        """Run `op` on the id's shard, write its records, and answer: at once if they (and
        every earlier write) are replicated, else a Pending released when they are."""
        error, shard = self._locate(transactional_id)
        if shard is None:
            return failed(error)
        records, answer = op(shard)
        try:
            self._write(shard, records, now_ms)
        except CoordinatorWriteError as exc:
            self._settle(shard, now_ms)
            return failed(exc.code)  # nothing was written: the failure is the answer now
        self._settle(shard, now_ms)
        box = Pending(f"transaction {transactional_id}")

        def fail(code: int) -> None:
            box.complete(failed(append_error_to_response_error(code)))

        if self._answer(shard, lambda: box.complete(answer), fail, now_ms):
            return answer
        return box

    # -- timers ---------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> int | None:
        """Load a step, take late marker answers, run due timers, time out answers waiting too
        long for replication; the next deadline (now, while loading remains)."""
        self.refresh_config()
        self.held.expire(now_ms, codes.REQUEST_TIMED_OUT)
        if self.loading:
            index = next(iter(self.loading))
            budget = int(self.config_value("transaction.state.log.load.buffer.size"))
            if self._load_step(index, self.loading[index], budget):
                self._finish_load(index, now_ms)
        self._stepping = True
        try:
            self._take_answers(now_ms)
        finally:
            self._stepping = False
        deadline: int | None = None
        for index, shard in list(self.shards.items()):
            if index in self.loading:
                continue
            self._poll_shard(shard, now_ms)
            self._settle(shard, now_ms)
            d = shard.next_deadline_ms()
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        held = self.held.next_deadline_ms()
        if held is not None and (deadline is None or held < deadline):
            deadline = held
        if self.loading or self._answers or self._released:
            deadline = now_ms
        self._polled_deadline = deadline
        return deadline

    # -- operations -----------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int, now_ms: int) -> ProducerIdAndEpoch | Pending:
        """InitProducerId with a transactional id; `producer_id`/`producer_epoch` -1 unless the
        client names them (v3+, KIP-360)."""
        if (producer_id == -1) != (producer_epoch == -1):
            return ProducerIdAndEpoch(codes.INVALID_REQUEST)
        expected = None if producer_id == -1 else (producer_id, producer_epoch)
        return self._run(
            transactional_id, lambda s: s.init_producer_id(transactional_id, timeout_ms, expected, now_ms),
            ProducerIdAndEpoch, now_ms,
        )

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition], now_ms: int) -> int | Pending:
        tps = list(partitions)
        return self._run(
            transactional_id, lambda s: s.add_partitions(transactional_id, producer_id, producer_epoch, tps, now_ms),
            _same, now_ms,
        )

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, now_ms: int) -> int | Pending:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction."""
        tp = (OFFSETS_TOPIC, self.offsets_partition_for(group_id))
        return self.add_partitions(transactional_id, producer_id, producer_epoch, [tp], now_ms)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ verify_only: Kafka's coordinator answers, per partition."""
        tps = list(partitions)
        error, shard = self._locate(transactional_id)
        if shard is None:
            return dict.fromkeys(tps, error)
        return shard.verify(transactional_id, producer_id, producer_epoch, tps)

    def verify_partition(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int,
        *, abortable_supported: bool = False,
    ) -> int:
        """For the produce path (KIP-890 part 1): NONE when the partition is in the open
        transaction of this producer and epoch; otherwise the error the Produce response
        carries (`produce_error`). `abortable_supported`: the Produce request is v11+."""
        code = self.verify_partitions(transactional_id, producer_id, producer_epoch, [(topic, partition)])[(topic, partition)]
        return produce_error(code, abortable_supported)

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool, client_version: int, now_ms: int) -> ProducerIdAndEpoch | Pending:
        """EndTxn; `client_version` 2 for EndTxn v5 (KIP-890 part 2), else 0."""
        return self._run(
            transactional_id,
            lambda s: s.end_txn(transactional_id, producer_id, producer_epoch, committed, client_version, now_ms),
            ProducerIdAndEpoch, now_ms,
        )

    def describe(self, transactional_id: str) -> DescribedTransaction:
        if not transactional_id:
            return DescribedTransaction(codes.INVALID_REQUEST, transactional_id)
        error, shard = self._locate(transactional_id)
        if shard is None:
            return DescribedTransaction(error, transactional_id)
        return shard.describe(transactional_id)

    def list_transactions(self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int, now_ms: int) -> ListedTransactions:
        if self.loading:
            return ListedTransactions(codes.COORDINATOR_LOAD_IN_PROGRESS)
        states, producer_ids = list(states), list(producer_ids)
        out = ListedTransactions(codes.NONE, [s for s in states if s not in STATE_BY_NAME])
        for _, shard in sorted(self.shards.items()):
            out.transactions += shard.list_transactions(states, producer_ids, duration_ms, now_ms).transactions
        return out


def _same(code: int) -> int:
    return code


def _ignore(code: int) -> None:
    """Held markers whose prepare record lost its leader: the next coordinator loads it and
    sends them itself."""


def _releaser(
    release: Callable[[int, TransactionCoordinatorShard, MarkerRequest], None],
    index: int,
    shard: TransactionCoordinatorShard,
    request: MarkerRequest,
) -> Callable[[], None]:
    return lambda: release(index, shard, request)
