"""The transaction coordinator: `TransactionCoordinator`, the transactional-producer API the
handlers call, over the generic `CoordinatorRuntime` with one `TransactionCoordinatorShard` per
`__transaction_state` partition this broker leads, and the markers its transactions owe.

    txns = TransactionCoordinator(node_id, store, replicas, admin, config_value, apply_metadata,
                                  new_producer_id, write_markers)
    txns.on_metadata(now_ms, changed)      # after every metadata change: load / unload shards
    answer = txns.end_txn(tid, pid, epoch, committed, 0, now_ms)
    next_deadline_ms = txns.poll(now_ms)   # timers, loading, late marker answers; the broker
                                           # calls it again at that deadline (or on `wakeup`)

A transactional id lives in partition `abs(java_hashcode(id)) % partitions`, as in Kafka; the
coordinator epoch is the partition's leader epoch when the shard was loaded.

Markers (`TxnShardAdapter`, after each step): a replayed PrepareCommit/PrepareAbort asks for
markers; once that record is replicated (a marker written for a prepare record a failover then
loses would commit half a transaction) the runtime calls the injected writer

    write_markers(transactional_id, producer_id, producer_epoch, coordinator_epoch, committed,
                  partitions, done)

and `done(errors)` (an error code per partition) hands the answer back to the shard, whose
Complete* record is then appended. `done` may be called at once (one node writes the markers in
place) or later: then the next `poll` takes it up, which `wakeup` brings forward. An answer for
a shard since unloaded or reloaded is dropped. The writer (`gregor/coordinator/txn/markers.py`)
never retries: the shard retries the partitions whose answer is retriable (`markers_written`).
Loading finishes by writing again the markers of transactions the log leaves preparing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from gregor.coordinator.common.runtime import (
    CoordinatorRuntime,
    InternalTopic,
    TopicCreator,
    TopicSource,
)
from gregor.coordinator.common.service import CoordinatorService, same
from gregor.coordinator.group.records import partition_for
from gregor.coordinator.txn import codes
from gregor.coordinator.txn.records import TopicPartition, TxnRecord, decode, encode
from gregor.coordinator.txn.results import (
    DescribedTransaction,
    ListedTransactions,
    MarkerRequest,
    ProducerIdAndEpoch,
)
from gregor.coordinator.txn.shard import TransactionCoordinatorShard, TxnConfig
from gregor.coordinator.txn.state import BY_NAME as STATE_BY_NAME
from gregor.coordinator.write_errors import CoordinatorWriteError
from gregor.replication.partition import ReplicaManager
from gregor.replication.pending import Pending

log = logging.getLogger("gregor.coordinator.txn")

TRANSACTION_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTIONS = InternalTopic(
    TRANSACTION_TOPIC, "transaction.state.log.num.partitions", "transaction.state.log.replication.factor",
    "transaction.state.log.load.buffer.size", "gregor.coordinator.txn",
)  # fmt: skip
# How long an answer may wait for its records to be replicated: Kafka's transaction coordinator
# appends with the broker's request.timeout.ms (30 s by default).
WRITE_TIMEOUT_MS = 30_000

Runtime = CoordinatorRuntime[TransactionCoordinatorShard, TxnRecord]


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
        codes.CONCURRENT_TRANSACTIONS,
        codes.NETWORK_EXCEPTION,
        codes.COORDINATOR_LOAD_IN_PROGRESS,
        codes.COORDINATOR_NOT_AVAILABLE,
        codes.NOT_COORDINATOR,
    ):
        return codes.NOT_ENOUGH_REPLICAS
    return code


@dataclass
class _MarkerAnswer:
    shard: TransactionCoordinatorShard
    request: MarkerRequest
    errors: dict[TopicPartition, int]


class TxnShardAdapter:
    """The transaction coordinator's part of the runtime (`ShardAdapter`): its record format,
    and the markers its shards ask for, from the request to the answer (module docstring)."""

    def __init__(
        self, config: TxnConfig, new_producer_id: Callable[[], int], write_markers: MarkerWriter
    ) -> None:
        self.config = config
        self.new_producer_id = new_producer_id
        self.write_markers = write_markers
        self._answers: list[_MarkerAnswer] = []  # marker answers to hand to their shards
        # Marker requests whose PrepareCommit/PrepareAbort is replicated, to send.
        self._released: list[tuple[TransactionCoordinatorShard, MarkerRequest]] = []

    def new_shard(self, index: int) -> TransactionCoordinatorShard:
        return TransactionCoordinatorShard(index, self.config, self.new_producer_id)

    def encode(self, record: TxnRecord) -> tuple[bytes, bytes | None]:
        return encode(record)

    def decode(self, key: bytes, value: bytes | None) -> TxnRecord | None:
        record = decode(key, value)
        if record is None:
            log.warning("%s: skipping a record with an unknown key version", TRANSACTION_TOPIC)
        return record

    def after_step(self, runtime: Runtime, shard: TransactionCoordinatorShard, now_ms: int) -> bool:
        progressed = (
            self._send_markers(runtime, shard)
            if runtime.active(shard.partition) is shard
            else False
        )
        return self.take_answers(runtime, now_ms) or progressed

    def on_unloaded(self, shard: TransactionCoordinatorShard) -> None:
        """Nothing: its markers' answers and released requests are dropped when met."""

    def busy(self) -> bool:
        return bool(self._answers or self._released)

    def before_poll(self, runtime: Runtime, now_ms: int) -> None:
        """Take up the marker answers that came in since; forget the requests of shards gone."""
        was_stepping, runtime.stepping = runtime.stepping, True
        try:
            self.take_answers(runtime, now_ms)
        finally:
            runtime.stepping = was_stepping
        self._released = [r for r in self._released if runtime.active(r[0].partition) is r[0]]

    def _send_markers(self, runtime: Runtime, shard: TransactionCoordinatorShard) -> bool:
        """Send the markers the shard asks for, each once its PrepareCommit/PrepareAbort is
        replicated (Kafka sends them from the append's completion)."""
        for request in shard.take_marker_requests():
            runtime.answer(shard, _releaser(self._release, runtime, shard, request), _ignore, None)
        mine = [request for s, request in self._released if s is shard]
        if not mine:
            return False
        self._released = [r for r in self._released if r[0] is not shard]
        index = shard.partition
        for request in mine:
            if runtime.active(index) is not shard:
                break  # unloaded meanwhile: the next coordinator sends them
            if not request.partitions:
                self._answers.append(_MarkerAnswer(shard, request, {}))
                continue
            self.write_markers(
                request.transactional_id, request.producer_id, request.producer_epoch,
                runtime.epoch(index), request.committed, list(request.partitions),
                self._done_callback(runtime, shard, request),
            )  # fmt: skip
        return True

    def _release(
        self, runtime: Runtime, shard: TransactionCoordinatorShard, request: MarkerRequest
    ) -> None:
        self._released.append((shard, request))
        if not runtime.stepping:
            runtime.wake()  # released by a high watermark move: the next poll sends them

    def _done_callback(
        self, runtime: Runtime, shard: TransactionCoordinatorShard, request: MarkerRequest
    ) -> Callable[[dict[TopicPartition, int]], None]:
        called = False

        def done(errors: dict[TopicPartition, int]) -> None:
            nonlocal called
            if called:
                return
            called = True
            self._answers.append(_MarkerAnswer(shard, request, dict(errors)))
            if not runtime.stepping:
                runtime.wake()  # answered later: the next poll takes it up

        return done

    def take_answers(self, runtime: Runtime, now_ms: int) -> bool:
        answers, self._answers = self._answers, []
        for a in answers:
            if runtime.active(a.shard.partition) is not a.shard:
                continue  # unloaded or reloaded since: the new coordinator writes its own
            try:
                runtime.write(a.shard, a.shard.markers_written(a.request, a.errors, now_ms), now_ms)
            except CoordinatorWriteError:
                pass  # logged; the shard offers the record again
        return bool(answers)


class TransactionCoordinator(CoordinatorService[TransactionCoordinatorShard, TxnRecord, TxnConfig]):
    def __init__(
        self,
        node_id: int,
        store: TopicSource,
        replicas: ReplicaManager,
        admin: TopicCreator,
        config_value: Callable[[str], Any],
        apply_metadata: Callable[[], None],
        new_producer_id: Callable[[], int],
        write_markers: MarkerWriter,
    ) -> None:
        self.store = store
        self.config_value = config_value
        self.adapter: TxnShardAdapter = TxnShardAdapter(
            self._read_config(), new_producer_id, write_markers
        )
        self.runtime: Runtime = CoordinatorRuntime(
            TRANSACTIONS, node_id, store, replicas, admin, config_value, apply_metadata, self.adapter,
            lambda: WRITE_TIMEOUT_MS,
        )  # fmt: skip

    # -- configuration and the topic ------------------------------------------------------------

    def _read_config(self) -> TxnConfig:
        c = self.config_value
        return TxnConfig(
            max_timeout_ms=int(c("transaction.max.timeout.ms")),
            transactional_id_expiration_ms=int(c("transactional.id.expiration.ms")),
            abort_timed_out_interval_ms=int(
                c("transaction.abort.timed.out.transaction.cleanup.interval.ms")
            ),
            remove_expired_interval_ms=int(
                c("transaction.remove.expired.transaction.cleanup.interval.ms")
            ),
        )

    def offsets_partition_for(self, group_id: str) -> int:
        """The `__consumer_offsets` partition of a group, as the group coordinator places it."""
        info = self.store.topics.get(OFFSETS_TOPIC)
        n = (
            info.partitions
            if info is not None
            else int(self.config_value("offsets.topic.num.partitions"))
        )
        return partition_for(group_id, n)

    def ensure_transaction_topic(self) -> None:
        """Create `__transaction_state` on first use (FindCoordinator), as Kafka does; a capped
        replication factor caps min.insync.replicas with it."""

        def configs(factor: int) -> dict[str, str | None]:
            return {
                "cleanup.policy": "compact",
                "compression.type": "uncompressed",
                "unclean.leader.election.enable": "false",
                "min.insync.replicas": str(
                    min(int(self.config_value("transaction.state.log.min.isr")), factor)
                ),
                "segment.bytes": str(self.config_value("transaction.state.log.segment.bytes")),
            }

        self.runtime.ensure_topic(configs)

    # -- leadership and timers ------------------------------------------------------------------

    def on_metadata(self, now_ms: int, changed: Collection[str] | None = None) -> None:
        """Coordinate exactly the `__transaction_state` partitions this broker leads, each at the
        leader epoch it was loaded with. `changed`: the topics that may have changed since the
        last call (None: any)."""
        self.runtime.on_metadata(now_ms, changed)

    def poll(self, now_ms: int) -> int | None:
        """Load a step, take late marker answers, run due timers, time out answers waiting too
        long for replication; the next deadline (now, while loading or markers remain)."""
        self.refresh_config()
        self.adapter.before_poll(self.runtime, now_ms)
        return self.runtime.poll(now_ms)

    # -- operations -----------------------------------------------------------------------------

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
    ) -> ProducerIdAndEpoch | Pending:
        """InitProducerId with a transactional id; `producer_id`/`producer_epoch` -1 unless the
        client names them (v3+, KIP-360)."""
        if (producer_id == -1) != (producer_epoch == -1):
            return ProducerIdAndEpoch(codes.INVALID_REQUEST)
        expected = None if producer_id == -1 else (producer_id, producer_epoch)
        return self.runtime.run(
            transactional_id,
            lambda s: s.init_producer_id(transactional_id, timeout_ms, expected, now_ms),
            ProducerIdAndEpoch,
            now_ms,
            what="init producer id",
        )

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> int | Pending:
        tps = list(partitions)
        return self.runtime.run(
            transactional_id,
            lambda s: s.add_partitions(transactional_id, producer_id, producer_epoch, tps, now_ms),
            same,
            now_ms,
            what="add partitions",
        )

    def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        now_ms: int,
    ) -> int | Pending:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction."""
        tp = (OFFSETS_TOPIC, self.offsets_partition_for(group_id))
        return self.add_partitions(transactional_id, producer_id, producer_epoch, [tp], now_ms)

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ verify_only: Kafka's coordinator answers, per partition."""
        tps = list(partitions)
        error, shard = self.runtime.locate(transactional_id)
        if shard is None:
            return dict.fromkeys(tps, error)
        return shard.verify(transactional_id, producer_id, producer_epoch, tps)

    def verify_partition(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
        *,
        abortable_supported: bool = False,
    ) -> int:
        """For the produce path (KIP-890 part 1): NONE when the partition is in the open
        transaction of this producer and epoch; otherwise the error the Produce response
        carries (`produce_error`). `abortable_supported`: the Produce request is v11+."""
        code = self.verify_partitions(
            transactional_id, producer_id, producer_epoch, [(topic, partition)]
        )[(topic, partition)]
        return produce_error(code, abortable_supported)

    def end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        client_version: int,
        now_ms: int,
    ) -> ProducerIdAndEpoch | Pending:
        """EndTxn; `client_version` 2 for EndTxn v5 (KIP-890 part 2), else 0."""
        return self.runtime.run(
            transactional_id,
            lambda s: s.end_txn(
                transactional_id, producer_id, producer_epoch, committed, client_version, now_ms
            ),
            ProducerIdAndEpoch,
            now_ms,
            what="end txn",
        )

    def describe(self, transactional_id: str) -> DescribedTransaction:
        if not transactional_id:
            return DescribedTransaction(codes.INVALID_REQUEST, transactional_id)
        error, shard = self.runtime.locate(transactional_id)
        if shard is None:
            return DescribedTransaction(error, transactional_id)
        return shard.describe(transactional_id)

    def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int, now_ms: int
    ) -> ListedTransactions:
        if self.runtime.loading:
            return ListedTransactions(codes.COORDINATOR_LOAD_IN_PROGRESS)
        states, producer_ids = list(states), list(producer_ids)
        out = ListedTransactions(codes.NONE, [s for s in states if s not in STATE_BY_NAME])
        for shard in self.runtime.shards():
            out.transactions += shard.list_transactions(
                states, producer_ids, duration_ms, now_ms
            ).transactions
        return out


def _ignore(code: int) -> None:
    """Held markers whose prepare record lost its leader: the next coordinator loads it and
    sends them itself."""


def _releaser(
    release: Callable[[Runtime, TransactionCoordinatorShard, MarkerRequest], None],
    runtime: Runtime,
    shard: TransactionCoordinatorShard,
    request: MarkerRequest,
) -> Callable[[], None]:
    return lambda: release(runtime, shard, request)
