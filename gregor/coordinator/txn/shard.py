"""The transaction coordinator for the transactional ids of one `__transaction_state` partition.
Sans-I/O: no sockets, no event loop, no clock (every call takes `now_ms`); producer ids come from
an injected allocator, whose KafkaError (no block of ids at hand yet on a cluster node:
COORDINATOR_LOAD_IN_PROGRESS) is the operation's answer, as in Kafka.

How it is driven (`coordinator/common/runtime.py` does this, under `txn/runtime.py`; unit tests
do it by hand):

    records, answer = shard.end_txn(...)       # every operation: (records, answer)
    append `records` to the partition, then shard.replay(r) for each; answer the client
    for request in shard.take_marker_requests():    # markers owed, after a Prepare* is replayed
        write the markers, then
        records = shard.markers_written(request, errors, now_ms)   # the Complete* record, once
    records = shard.poll(now_ms)      # timers: timed-out transactions, expired ids, retries
    shard.next_deadline_ms()          # when to poll next

State is one `TransactionMetadata` per transactional id, and it changes only in `replay`, which
checks every transition against the table in `state.py` (while loading, the last record of an id
simply wins: compaction may have removed the ones before it). The operations follow Kafka's
TransactionCoordinator error for error:

InitProducerId: a new id gets a new producer id at epoch 0; an existing one its epoch bumped, or,
once the epoch is exhausted (>= 32766), a new producer id at epoch 0. An Ongoing transaction is
fenced first: PrepareAbort with the epoch bumped (so the old producer's writes and markers are
refused), the client told CONCURRENT_TRANSACTIONS until the abort is complete, and its retry then
bumps the epoch again. KIP-360: a request naming its producer id and epoch is fenced unless that
is the current producer (or a retry of the bump it caused: the last epoch, kept in memory only).
AddPartitionsToTxn / AddOffsetsToTxn: Ongoing, with the partitions added. EndTxn: PrepareCommit
or PrepareAbort; a retry of a finished EndTxn is answered NONE, one still writing markers
CONCURRENT_TRANSACTIONS, the wrong outcome INVALID_TXN_STATE.

Markers: replaying PrepareCommit/PrepareAbort (or finishing a load that left one) makes a
`MarkerRequest` for every partition of the transaction; `markers_written` takes the errors
partition by partition (written, or the topic is gone: done; retriable: asked again after
`marker_retry_backoff_ms`; the producer or coordinator epoch moved on: given up, as Kafka does)
and when all are done returns the CompleteCommit/CompleteAbort record. Which partitions still
owe a marker is soft state, rebuilt from the Prepare* record by a load.

KIP-890 part 2 (transaction.version 2, EndTxn v5): when the client's EndTxn says so, the epoch
is bumped at every EndTxn (and the producer id replaced when it is exhausted). We do not
advertise transaction.version 2, so clients use the v1 rules unless they send EndTxn v5.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from gregor.coordinator.common.shard import ShardBase
from gregor.coordinator.group.timers import Timers
from gregor.coordinator.txn import codes
from gregor.coordinator.txn.records import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionMetadata,
    TxnRecord,
)
from gregor.coordinator.txn.results import (
    DescribedTransaction,
    ListedTransaction,
    ListedTransactions,
    MarkerRequest,
    ProducerIdAndEpoch,
)
from gregor.coordinator.txn.state import (
    BY_NAME,
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    IllegalTransition,
    TxnState,
    check_transition,
)
from gregor.protocol.errors import KafkaError

log = logging.getLogger("gregor.coordinator.txn")

MAX_EPOCH = 32767  # Short.MaxValue
ABORT_KEY = ("abort-timed-out",)
EXPIRE_KEY = ("expire-ids",)
PREPARE_STATES = (PREPARE_COMMIT, PREPARE_ABORT)

# Marker errors (Kafka's TransactionMarkerRequestCompletionHandler): the marker is done, the
# transaction is given up (a newer producer epoch or coordinator took over), or it is retried.
MARKER_DONE = frozenset(
    {
        codes.NONE,
        codes.UNKNOWN_TOPIC_OR_PARTITION,
        codes.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        codes.UNSUPPORTED_VERSION,
    }
)
MARKER_GIVE_UP = frozenset({codes.INVALID_PRODUCER_EPOCH, codes.TRANSACTION_COORDINATOR_FENCED})
MARKER_FATAL = frozenset(
    {
        codes.CORRUPT_MESSAGE,
        codes.MESSAGE_TOO_LARGE,
        codes.RECORD_LIST_TOO_LARGE,
        codes.INVALID_REQUIRED_ACKS,
    }
)
MARKER_RETRIABLE = frozenset(
    {
        codes.NOT_LEADER_OR_FOLLOWER,
        codes.NOT_ENOUGH_REPLICAS,
        codes.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        codes.REQUEST_TIMED_OUT,
        codes.KAFKA_STORAGE_ERROR,
        codes.NETWORK_EXCEPTION,
    }
)
UNEXPECTED_MARKER_ERROR_BACKOFF_FACTOR = 50  # an unknown marker error is retried, 50x slower


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka never hands out Short.MaxValue, so it can always fence the last epoch it gave."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True)
class TxnConfig:
    """The broker configs the transaction coordinator obeys (Kafka's names in the comments)."""

    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_timed_out_interval_ms: int = (
        10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    )
    remove_expired_interval_ms: int = (
        3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
    )
    marker_retry_backoff_ms: int = 100  # Kafka's inter-broker retry.backoff.ms


@dataclass
class _Markers:
    """Markers a Prepare* transaction still owes (soft state)."""

    producer_id: int
    producer_epoch: int
    committed: bool
    remaining: set[TopicPartition] = field(default_factory=set)
    in_flight: MarkerRequest | None = None


class TransactionCoordinatorShard(ShardBase[TxnRecord, TxnConfig]):
    def __init__(
        self, partition: int, config: TxnConfig, new_producer_id: Callable[[], int]
    ) -> None:
        super().__init__(partition, config)
        self.new_producer_id = new_producer_id
        self.txns: dict[str, TransactionMetadata] = {}
        self._marker_requests: list[MarkerRequest] = []
        self._markers: dict[str, _Markers] = {}

    # -- effects --------------------------------------------------------------------------------

    def take_marker_requests(self) -> list[MarkerRequest]:
        out, self._marker_requests = self._marker_requests, []
        return out

    def _allocate_producer_id(self) -> tuple[int, int]:
        """(a new producer id, NONE), or (-1, the error to answer). As Kafka answers the
        allocator's error: a cluster node with no block of ids at hand yet raises
        COORDINATOR_LOAD_IN_PROGRESS, which the producer retries. Nothing is written then."""
        try:
            return self.new_producer_id(), codes.NONE
        except KafkaError as exc:
            log.info("no producer id to hand out yet: %s", exc)
            return -1, exc.code
        except Exception:
            log.exception("allocating a producer id failed")
            return -1, codes.UNKNOWN_SERVER_ERROR

    # -- replay: the one place state changes ----------------------------------------------------

    def replay(self, record: TxnRecord, offset: int = -1, producer_id: int = -1) -> None:
        """Apply a record (its log offset and producer do not matter here)."""
        tid, new = record.transactional_id, record.value
        current = self.txns.get(tid)
        if not self.loaded:
            if new is None:
                self.txns.pop(tid, None)
            elif new.state is PREPARE_EPOCH_FENCE:
                # Never written (state.py); if found, finish the abort it stands for.
                self.txns[tid] = replace(new, state=PREPARE_ABORT)
            else:
                self.txns[tid] = new
            return
        if new is None:
            if current is not None:
                check_transition(current.state, DEAD, tid)
                del self.txns[tid]
                log.info("transactional id %s expired and is removed", tid)
            return
        if current is None:
            if new.state is not EMPTY:
                raise IllegalTransition(
                    f"transactional id {tid!r}: a new id must start Empty, not {new.state}"
                )
        else:
            check_transition(current.state, new.state, tid)
        self.txns[tid] = new
        if new.state in PREPARE_STATES:
            self._start_markers(tid, new)
        elif new.state in (COMPLETE_COMMIT, COMPLETE_ABORT):
            self._markers.pop(tid, None)
            self.timers.cancel(("complete", tid))
            self.timers.cancel(("markers", tid))

    def replay_end_transaction(self, producer_id: int, committed: bool) -> None:
        """A transaction marker in this log: none is ever written to `__transaction_state`."""

    def on_loaded(self, now_ms: int) -> None:
        """Every record is replayed: start the timers, and finish every transaction a previous
        coordinator left preparing (its markers are written again: writing one twice is safe)."""
        self.loaded = True
        self.timers.schedule(
            ABORT_KEY, now_ms + self.config.abort_timed_out_interval_ms, self._abort_timed_out
        )
        self.timers.schedule(
            EXPIRE_KEY, now_ms + self.config.remove_expired_interval_ms, self._remove_expired
        )
        for tid, m in self.txns.items():
            if m.state in PREPARE_STATES:
                log.info("transactional id %s was left in %s: writing its markers", tid, m.state)
                self._start_markers(tid, m)

    def unload(self) -> None:
        """This broker no longer coordinates the partition: forget everything (the new
        coordinator loads it from the log)."""
        self.txns.clear()
        self._markers.clear()
        self._marker_requests.clear()
        self._records.clear()
        self.timers = Timers()
        self.loaded = False

    # -- timers ---------------------------------------------------------------------------------

    def _abort_timed_out(self, now_ms: int) -> None:
        """transaction.abort.timed.out.transaction.cleanup.interval.ms: a transaction open longer
        than its timeout is aborted, and its producer fenced (Kafka's abortTimedOutTransactions)."""
        for tid, m in self.txns.items():
            if m.state is ONGOING and m.start_ms + m.timeout_ms < now_ms:
                if m.producer_epoch >= MAX_EPOCH:
                    log.error(
                        "transactional id %s timed out at epoch %d, which cannot be bumped",
                        tid,
                        m.producer_epoch,
                    )
                    continue
                log.info(
                    "transactional id %s: transaction of producer %d epoch %d open for %d ms (timeout %d ms): aborting it",
                    tid,
                    m.producer_id,
                    m.producer_epoch,
                    now_ms - m.start_ms,
                    m.timeout_ms,
                )
                self._records.append(self._fence(tid, m, now_ms))
        self.timers.schedule(
            ABORT_KEY, now_ms + self.config.abort_timed_out_interval_ms, self._abort_timed_out
        )

    def _remove_expired(self, now_ms: int) -> None:
        """transactional.id.expiration.ms: ids idle that long with no open transaction are removed
        (a tombstone each)."""
        horizon = now_ms - self.config.transactional_id_expiration_ms
        expired = [
            tid
            for tid, m in self.txns.items()
            if m.state.expiration_allowed and m.last_update_ms <= horizon
        ]
        for tid in expired:
            self._records.append(TxnRecord(tid, None))
        if expired:
            log.info(
                "partition %d: %d transactional ids idle since before %d expire",
                self.partition,
                len(expired),
                horizon,
            )
        self.timers.schedule(
            EXPIRE_KEY, now_ms + self.config.remove_expired_interval_ms, self._remove_expired
        )

    def _fence(self, tid: str, m: TransactionMetadata, now_ms: int) -> TxnRecord:
        """Ongoing -> PrepareEpochFence -> PrepareAbort with the epoch bumped, in one step: only
        the PrepareAbort is written (state.py). The fence is not the client's: it carries no
        client transaction version (v1 rules, the server's own level)."""
        check_transition(m.state, PREPARE_EPOCH_FENCE, tid)
        check_transition(PREPARE_EPOCH_FENCE, PREPARE_ABORT, tid)
        return TxnRecord(
            tid,
            replace(
                m,
                state=PREPARE_ABORT,
                producer_epoch=m.producer_epoch + 1,
                last_producer_epoch=NO_PRODUCER_EPOCH,
                last_update_ms=now_ms,
                client_version=0,
                next_producer_id=NO_PRODUCER_ID,
            ),
        )

    # -- markers --------------------------------------------------------------------------------

    def _start_markers(self, tid: str, m: TransactionMetadata) -> None:
        markers = _Markers(
            m.producer_id, m.producer_epoch, m.state is PREPARE_COMMIT, set(m.partitions)
        )
        self._markers[tid] = markers
        self._send_markers(tid, markers)

    def _send_markers(self, tid: str, markers: _Markers) -> None:
        request = MarkerRequest(
            tid,
            markers.producer_id,
            markers.producer_epoch,
            markers.committed,
            tuple(sorted(markers.remaining)),
        )
        markers.in_flight = request
        self._marker_requests.append(request)

    def _resend_markers(self, tid: str) -> None:
        markers = self._markers.get(tid)
        if markers is not None and markers.in_flight is None:
            self._send_markers(tid, markers)

    def markers_written(
        self, request: MarkerRequest, errors: dict[TopicPartition, int], now_ms: int
    ) -> list[TxnRecord]:
        """The writer's answer to `request` (an error code per partition); the Complete* record
        once every partition has its marker. A stale answer (the transaction moved on, or this
        shard was reloaded) is ignored."""
        tid = request.transactional_id
        markers = self._markers.get(tid)
        if markers is None or markers.in_flight is not request:
            return []
        markers.in_flight = None
        unexpected = False
        for tp in request.partitions:
            error = errors.get(tp, codes.NETWORK_EXCEPTION)
            if error in MARKER_DONE:
                markers.remaining.discard(tp)
            elif error in MARKER_GIVE_UP or error in MARKER_FATAL:
                # Kafka stops here: another coordinator (or producer epoch) owns the transaction.
                log.error(
                    "transactional id %s: the marker for %s-%d failed with error %d; no more markers are sent",
                    tid,
                    tp[0],
                    tp[1],
                    error,
                )
                del self._markers[tid]
                return []
            elif error not in MARKER_RETRIABLE:
                log.warning(
                    "transactional id %s: the marker for %s-%d failed with error %d; retrying",
                    tid,
                    tp[0],
                    tp[1],
                    error,
                )
                unexpected = True
        if markers.remaining:
            backoff = self.config.marker_retry_backoff_ms
            if unexpected:
                backoff *= UNEXPECTED_MARKER_ERROR_BACKOFF_FACTOR
            self.timers.schedule(
                ("markers", tid), now_ms + backoff, lambda _t: self._resend_markers(tid)
            )
            return []
        return self._complete(tid, now_ms)

    def _complete(self, tid: str, now_ms: int) -> list[TxnRecord]:
        m = self.txns.get(tid)
        if m is None or m.state not in PREPARE_STATES:
            return []
        target = COMPLETE_COMMIT if m.state is PREPARE_COMMIT else COMPLETE_ABORT
        check_transition(m.state, target, tid)
        if m.client_version >= 2 and m.next_producer_id != NO_PRODUCER_ID:
            # KIP-890: the epoch ran out at this EndTxn; the producer continues with the new id.
            new = replace(
                m,
                state=target,
                producer_id=m.next_producer_id,
                producer_epoch=0,
                previous_producer_id=m.producer_id,
                next_producer_id=NO_PRODUCER_ID,
                last_producer_epoch=m.producer_epoch,
                partitions=frozenset(),
                last_update_ms=now_ms,
            )
        elif m.client_version >= 2:
            new = replace(
                m,
                state=target,
                partitions=frozenset(),
                last_update_ms=now_ms,
                last_producer_epoch=m.producer_epoch,
            )
        else:
            new = replace(m, state=target, partitions=frozenset(), last_update_ms=now_ms)
        # Should the append fail, the timer offers the record again.
        self.timers.schedule(
            ("complete", tid),
            now_ms + self.config.marker_retry_backoff_ms,
            lambda t: self._retry_complete(tid, t),
        )
        return [TxnRecord(tid, new)]

    def _retry_complete(self, tid: str, now_ms: int) -> None:
        self._records += self._complete(tid, now_ms)

    def pending_markers(self, tid: str) -> set[TopicPartition] | None:
        markers = self._markers.get(tid)
        return None if markers is None else set(markers.remaining)

    # -- InitProducerId -------------------------------------------------------------------------

    def init_producer_id(
        self, tid: str, timeout_ms: int, expected: tuple[int, int] | None, now_ms: int
    ) -> tuple[list[TxnRecord], ProducerIdAndEpoch]:
        """`expected`: the (producer id, epoch) of a KIP-360 request, None otherwise."""
        return self._done(self._init(tid, timeout_ms, expected, now_ms))

    def _init(
        self, tid: str, timeout_ms: int, expected: tuple[int, int] | None, now_ms: int
    ) -> ProducerIdAndEpoch:
        if not tid:
            return ProducerIdAndEpoch(codes.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return ProducerIdAndEpoch(codes.INVALID_TRANSACTION_TIMEOUT)
        m = self.txns.get(tid)
        if m is None:
            pid, error = self._allocate_producer_id()
            if error:
                return ProducerIdAndEpoch(error)
            # Not kept until its Empty record is replayed.
            m = TransactionMetadata(
                pid, NO_PRODUCER_EPOCH, timeout_ms, EMPTY, last_update_ms=now_ms
            )
        if expected is not None and not _valid_expected_producer(m, expected):
            return ProducerIdAndEpoch(codes.PRODUCER_FENCED)
        if m.state in PREPARE_STATES:
            return ProducerIdAndEpoch(codes.CONCURRENT_TRANSACTIONS)
        if m.state is ONGOING:
            log.info(
                "transactional id %s: a new producer fences epoch %d of producer %d; aborting its transaction",
                tid,
                m.producer_epoch,
                m.producer_id,
            )
            self._records.append(self._fence(tid, m, now_ms))
            return ProducerIdAndEpoch(codes.CONCURRENT_TRANSACTIONS)
        if m.state not in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
            raise IllegalTransition(f"transactional id {tid!r} found in {m.state}")
        new = self._next_producer(tid, m, timeout_ms, expected, now_ms)
        if isinstance(new, ProducerIdAndEpoch):
            return new
        check_transition(m.state, EMPTY, tid)
        self._records.append(TxnRecord(tid, new))
        return ProducerIdAndEpoch(codes.NONE, new.producer_id, new.producer_epoch)

    def _next_producer(
        self,
        tid: str,
        m: TransactionMetadata,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
    ) -> TransactionMetadata | ProducerIdAndEpoch:
        """The Empty metadata InitProducerId leaves: the epoch bumped, or a new producer id
        once the epochs are exhausted; the error to answer if neither can be."""
        if is_epoch_exhausted(m.producer_epoch) and (
            expected is None or expected[1] == m.producer_epoch
        ):
            pid, error = self._allocate_producer_id()
            if error:
                return ProducerIdAndEpoch(error)
            log.info(
                "transactional id %s: epochs of producer %d are exhausted; new producer id %d",
                tid,
                m.producer_id,
                pid,
            )
            return TransactionMetadata(
                pid,
                0,
                timeout_ms,
                EMPTY,
                last_update_ms=now_ms,
                previous_producer_id=m.producer_id,
                last_producer_epoch=m.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
            )
        bumped = _bump_epoch(m, None if expected is None else expected[1])
        if bumped is None:
            log.info(
                "transactional id %s: epoch %s is neither the current %d nor the last %d: fenced",
                tid,
                expected,
                m.producer_epoch,
                m.last_producer_epoch,
            )
            return ProducerIdAndEpoch(codes.PRODUCER_FENCED)
        epoch, last_epoch = bumped
        return replace(
            m,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            timeout_ms=timeout_ms,
            state=EMPTY,
            partitions=frozenset(),
            start_ms=-1,
            last_update_ms=now_ms,
            next_producer_id=NO_PRODUCER_ID,
            client_version=0,
        )

    # -- AddPartitionsToTxn, AddOffsetsToTxn and their verification -------------------------------

    def add_partitions(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> tuple[list[TxnRecord], int]:
        return self._done(
            self._add(tid, producer_id, producer_epoch, frozenset(partitions), now_ms)
        )

    def _add(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
        now_ms: int,
    ) -> int:
        if not tid:
            return codes.INVALID_REQUEST
        m = self.txns.get(tid)
        if m is None or m.producer_id != producer_id:
            return codes.INVALID_PRODUCER_ID_MAPPING
        if m.producer_epoch != producer_epoch:
            return codes.PRODUCER_FENCED
        if m.state in PREPARE_STATES:
            return codes.CONCURRENT_TRANSACTIONS
        if m.state is ONGOING and partitions <= m.partitions:
            return codes.NONE  # already in: nothing to write
        check_transition(m.state, ONGOING, tid)
        start = now_ms if m.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) else m.start_ms
        new = replace(
            m,
            state=ONGOING,
            partitions=m.partitions | partitions,
            start_ms=start,
            last_update_ms=now_ms,
            client_version=0,
        )
        self._records.append(TxnRecord(tid, new))
        return codes.NONE

    def verify(
        self, tid: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """KIP-890 part 1: is each partition in the producer's open transaction? Kafka's answers
        (AddPartitionsToTxn v4+ verify_only): NONE, or TRANSACTION_ABORTABLE if not added; for
        all of them INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED or CONCURRENT_TRANSACTIONS."""
        tps = list(partitions)
        m = self.txns.get(tid)
        if not tid:
            error = codes.INVALID_REQUEST
        elif m is None or m.producer_id != producer_id:
            error = codes.INVALID_PRODUCER_ID_MAPPING
        elif m.producer_epoch != producer_epoch:
            error = codes.PRODUCER_FENCED
        elif m.state in PREPARE_STATES:
            error = codes.CONCURRENT_TRANSACTIONS
        else:
            return {
                tp: codes.NONE if tp in m.partitions else codes.TRANSACTION_ABORTABLE for tp in tps
            }
        return dict.fromkeys(tps, error)

    # -- EndTxn ---------------------------------------------------------------------------------

    def end_txn(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        client_version: int,
        now_ms: int,
    ) -> tuple[list[TxnRecord], ProducerIdAndEpoch]:
        """`client_version`: 2 for EndTxn v5 (KIP-890 part 2: an epoch bump per transaction)."""
        return self._done(
            self._end(tid, producer_id, producer_epoch, commit, client_version, now_ms)
        )

    def _end(
        self, tid: str, producer_id: int, epoch: int, commit: bool, client_version: int, now_ms: int
    ) -> ProducerIdAndEpoch:
        if not tid:
            return ProducerIdAndEpoch(codes.INVALID_REQUEST)
        m = self.txns.get(tid)
        if m is None:
            return ProducerIdAndEpoch(codes.INVALID_PRODUCER_ID_MAPPING)
        v2 = m.client_version >= 2
        # A v2 client retrying an EndTxn whose epoch bump (or new producer id) it never heard of.
        retry_on_overflow = (
            v2
            and m.previous_producer_id == producer_id
            and epoch == MAX_EPOCH - 1
            and m.producer_epoch == 0
        )
        retry_on_bump = v2 and m.producer_epoch == epoch + 1
        if v2 and m.state in PREPARE_STATES:
            valid_epoch = retry_on_bump
        elif v2 and m.state in (COMPLETE_COMMIT, COMPLETE_ABORT):
            valid_epoch = retry_on_bump or retry_on_overflow
        else:
            valid_epoch = epoch == m.producer_epoch
        if m.producer_id != producer_id and not retry_on_overflow:
            return ProducerIdAndEpoch(codes.INVALID_PRODUCER_ID_MAPPING)
        if not valid_epoch:
            return ProducerIdAndEpoch(codes.PRODUCER_FENCED)
        state = m.state
        if state is ONGOING:
            return self._prepare_end(tid, m, commit, client_version, now_ms)
        wanted_complete, wanted_prepare = (
            (COMPLETE_COMMIT, PREPARE_COMMIT) if commit else (COMPLETE_ABORT, PREPARE_ABORT)
        )
        if state is wanted_complete:
            return ProducerIdAndEpoch(
                codes.NONE, m.producer_id, m.producer_epoch
            )  # a retry: done already
        if state is wanted_prepare:
            return ProducerIdAndEpoch(codes.CONCURRENT_TRANSACTIONS)
        if state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT, PREPARE_COMMIT, PREPARE_ABORT):
            log.debug(
                "transactional id %s is %s: EndTxn(%s) is refused",
                tid,
                state,
                "commit" if commit else "abort",
            )
            return ProducerIdAndEpoch(codes.INVALID_TXN_STATE)
        raise IllegalTransition(f"transactional id {tid!r} found in {state}")

    def _prepare_end(
        self, tid: str, m: TransactionMetadata, commit: bool, client_version: int, now_ms: int
    ) -> ProducerIdAndEpoch:
        target = PREPARE_COMMIT if commit else PREPARE_ABORT
        check_transition(m.state, target, tid)
        if client_version >= 2:
            next_pid = NO_PRODUCER_ID
            if is_epoch_exhausted(m.producer_epoch):
                next_pid, error = self._allocate_producer_id()
                if error:
                    return ProducerIdAndEpoch(error)
            new = replace(
                m,
                state=target,
                producer_epoch=m.producer_epoch + 1,
                last_producer_epoch=m.producer_epoch,
                next_producer_id=next_pid,
                client_version=client_version,
                last_update_ms=now_ms,
            )
        else:
            new = replace(m, state=target, client_version=client_version, last_update_ms=now_ms)
        self._records.append(TxnRecord(tid, new))
        if new.next_producer_id != NO_PRODUCER_ID:
            return ProducerIdAndEpoch(codes.NONE, new.next_producer_id, 0)
        return ProducerIdAndEpoch(codes.NONE, new.producer_id, new.producer_epoch)

    # -- DescribeTransactions and ListTransactions ----------------------------------------------

    def describe(self, tid: str) -> DescribedTransaction:
        m = self.txns.get(tid)
        if m is None or m.state is DEAD:
            return DescribedTransaction(codes.TRANSACTIONAL_ID_NOT_FOUND, tid)
        partitions = m.partitions
        if m.state in PREPARE_STATES:
            # "only partitions which do not have markers" yet
            owed = self.pending_markers(tid)
            if owed is not None:
                partitions = frozenset(owed)
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(partitions):
            by_topic.setdefault(topic, []).append(index)
        return DescribedTransaction(
            codes.NONE,
            tid,
            m.state.name,
            m.timeout_ms,
            m.start_ms,
            m.producer_id,
            m.producer_epoch,
            list(by_topic.items()),
        )

    def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int, now_ms: int
    ) -> ListedTransactions:
        out = ListedTransactions()
        wanted_states: set[TxnState] = set()
        state_names = list(states)
        for name in state_names:
            found = BY_NAME.get(name)
            if found is None:
                out.unknown_state_filters.append(name)
            else:
                wanted_states.add(found)
        pids = set(producer_ids)
        for tid, m in self.txns.items():
            if m.state is DEAD:
                continue
            if pids and m.producer_id not in pids:
                continue
            if state_names and m.state not in wanted_states:
                continue
            if duration_ms >= 0 and now_ms - m.start_ms <= duration_ms:
                continue
            out.transactions.append(ListedTransaction(tid, m.producer_id, m.state.name))
        return out


def _valid_expected_producer(m: TransactionMetadata, expected: tuple[int, int]) -> bool:
    """KIP-360: the named producer may go on if the id was just created, it is the current
    producer (its epoch is checked by the bump), or it is the previous producer id at its
    exhausted epoch (a retry of the bump that replaced it)."""
    pid, epoch = expected
    return (
        m.producer_epoch == NO_PRODUCER_EPOCH
        or pid == m.producer_id
        or (pid == m.previous_producer_id and is_epoch_exhausted(epoch))
    )


def _bump_epoch(m: TransactionMetadata, expected_epoch: int | None) -> tuple[int, int] | None:
    """(new epoch, last epoch) for an InitProducerId, or None if the producer is fenced."""
    bumped = m.producer_epoch + 1
    if expected_epoch is None:
        return bumped, NO_PRODUCER_EPOCH
    if m.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == m.producer_epoch:
        return bumped, m.producer_epoch
    if expected_epoch == m.last_producer_epoch:
        # A retry of a bump that succeeded: the same answer again.
        return m.producer_epoch, m.last_producer_epoch
    return None
