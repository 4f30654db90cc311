"""Producer state of one partition: what idempotence and transactions check on append, and
which transactions are open (what the last stable offset is made of).

For every producer id that wrote to the partition (Kafka's ProducerStateEntry): its epoch, its
last 5 batches (first and last sequence, last offset, offset delta, timestamp), its last
timestamp, the coordinator epoch of its last transaction marker and the first offset of its
open transaction (-1 for none).

A leader's append (origin CLIENT) checks every batch that carries a producer id before anything
is written (Kafka's ProducerAppendInfo), against the state as it was before the request plus
the request's earlier batches:

    the batch                                         answer
    same epoch, same (first, last) sequence as one    a duplicate: acknowledged with the offsets
      of the producer's last 5 batches                  it was written at; nothing is written
    epoch below the producer's                        INVALID_PRODUCER_EPOCH
                                                        (PRODUCER_FENCED for a client's
                                                        transactional batch)
    epoch above the producer's, sequence != 0         OUT_OF_ORDER_SEQUENCE_NUMBER
    same epoch, sequence != last sequence + 1         OUT_OF_ORDER_SEQUENCE_NUMBER
      (INT32_MAX is followed by 0)
    a producer id with no state (new, or expired)     accepted at any sequence (Kafka 4.x: no
                                                        UNKNOWN_PRODUCER_ID)
    no sequence (-1) with a producer id, or a          INVALID_RECORD
      control batch from a client

One failing batch refuses the whole request; a request whose batches are all duplicates is
answered with their offsets, and one mixing duplicates and new batches is refused
(OUT_OF_ORDER_SEQUENCE_NUMBER) rather than half written (Kafka answers the first duplicate's
offsets and drops the rest). `validate` only reads the state and returns what changes (the next
batch of a known producer, the common case, without copying its entry; otherwise updated copies
of the entries); `apply` installs it once the bytes are in the segment. The log validates
before it rolls, so a refused request does not roll a segment either (Kafka rolls first). A
follower (origin REPLICATION) and recovery take every batch as it is; a coordinator (origin
COORDINATOR, transaction markers) has its epochs checked, not its sequence: a marker of an older
producer epoch is INVALID_PRODUCER_EPOCH, of an older coordinator epoch
TRANSACTION_COORDINATOR_FENCED, and a newer producer epoch becomes the producer's. A marker for a
producer with no open transaction here is written and ends nothing. An old epoch of a client's
transactional batch is PRODUCER_FENCED: a newer producer holds its transactional id (Kafka has
answered INVALID_PRODUCER_EPOCH to both since 2.7).

Transactions. A producer's first transactional batch opens its transaction at that batch's
offset; a COMMIT or ABORT marker ends it. The open ones are kept by first offset (`ongoing`,
Kafka's ongoingTxns: a transaction begins at the log end, so insertion keeps them sorted); an
ended one stays unstable (`unreplicated`) until the high watermark passes its marker.
`first_unstable` is the lowest first offset of the two, O(1) to read: the log's last stable
offset is min(it, high watermark). When an ABORT ends a transaction, before it leaves the open
set, its entry goes into the .txnindex of the segment the marker went to (txn_index.py), with
the last stable offset it leaves: the first offset of the oldest open transaction of another
producer, else the marker's offset + 1 (Kafka's lastStableOffset(completedTxn)). `validate`
lists the transactions begun and ended, in batch order; `apply` does the above after the write.
Loading a snapshot rebuilds the open set from its entries' currentTxnFirstOffset; replaying
batches opens and ends transactions as appends do, and, after an unclean shutdown, rewrites the
.txnindex of the recovered segments (`txn_index_from`), as Kafka's segment recovery does. A
truncation reloads, so the open set is what the remaining log says (the transactions the replay
saw end stay unstable until the log tells `on_high_watermark`; Kafka drops them, assuming a
truncation never goes above the high watermark).

Snapshots (producer_snapshot.py) are taken at every roll (at the new segment's base; fsynced
with the rolled segment, off the request path, before the recovery point passes it) and at a
clean close (at the log end). Loading takes the newest snapshot at or below the log end and
replays the batch headers after it; records are never decoded, except the one record of a
transaction marker. A truncation reloads the same way. Snapshots above the log end describe data
that is gone and are deleted; so are those below the first segment. At a roll the older ones are
pruned: we keep the newest snapshot at or below min(recovery point, previous segment's base) and
every one after it, so recovery from the recovery point and a truncation into the previous
segment both start from a snapshot (Kafka 2.x's rule; Kafka 3+ keeps one per segment for tiered
storage, which we do not have).

Expiry: a producer with no open transaction idle for `producer.id.expiration.ms` or more is
forgotten (the broker calls `remove_expired(now_ms)` every
`producer.id.expiration.check.interval.ms`). Kafka measures idleness from the producer's last
batch timestamp alone, so a producer that writes old CreateTime timestamps (a replay, a mirror)
is forgotten at every check, and with it the protection against duplicates. We measure from the
later of that timestamp and when this broker last saw the producer (`last_seen_ms`: its last
append, or the load of the log, which is not persisted); Kafka's `last_timestamp` is kept as
Kafka keeps it, for snapshots and DescribeProducers.

Single-threaded: the log that owns it calls it from its own thread.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from enum import IntEnum
from typing import NamedTuple

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.storage import producer_snapshot as snap
from gregor.storage.segment import LogSegment
from gregor.storage.txn_index import TransactionIndex, TxnIndexEntry

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = (1 << 31) - 1
NO_SEQUENCE = -1

# The error codes of these checks (errors.py names only the codes core code shares).
OUT_OF_ORDER_SEQUENCE_NUMBER = errors.BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"].code
INVALID_PRODUCER_EPOCH = errors.BY_NAME["INVALID_PRODUCER_EPOCH"].code
PRODUCER_FENCED = errors.BY_NAME["PRODUCER_FENCED"].code
INVALID_TXN_STATE = errors.BY_NAME["INVALID_TXN_STATE"].code
TRANSACTION_COORDINATOR_FENCED = errors.BY_NAME["TRANSACTION_COORDINATOR_FENCED"].code

_SCAN_CHUNK = 65536


class AppendOrigin(IntEnum):
    CLIENT = 0  # a producer: every check
    COORDINATOR = 1  # a coordinator's own writes (transaction markers): epochs only
    REPLICATION = 2  # a follower copying its leader, or recovery: no checks


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class Duplicate(NamedTuple):
    """What `validate` returns for a retried request: the offsets it was written at."""

    first_offset: int
    last_offset: int
    timestamp: int


class NextBatch(NamedTuple):
    """`validate`'s answer in the common case: the next batch of a known producer, to be added
    to its entry in place (no copy) by `apply`."""

    entry: ProducerStateEntry
    batch: BatchMetadata
    now_ms: int


class CompletedTxn(NamedTuple):
    """A transaction a marker ended (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


# What a transaction did in an append, in batch order: (first offset, producer id) when a
# transactional batch began one, a CompletedTxn when a marker ended one.
TxnEvent = tuple[int, int] | CompletedTxn


class StateUpdate(NamedTuple):
    """`validate`'s answer in the general case: updated copies of the entries it touched, and
    the transactions begun and ended, for `apply` to install once the bytes are written."""

    entries: dict[int, ProducerStateEntry]
    txn_events: list[TxnEvent]


class ProducerBatch(NamedTuple):
    """A batch of an append that carries a producer id, as `Log.append` hands it over."""

    header: rb.BatchHeader
    base_offset: int  # as assigned (the header still holds what the producer sent)
    timestamp: int  # max timestamp, or the append time on LogAppendTime topics
    position: int  # in the append's buffer (a control batch's marker is read from there)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def decrement_sequence(seq: int, delta: int) -> int:
    """The sequence `delta` before `seq`, wrapping below 0 to INT32_MAX."""
    return seq - delta if seq >= delta else INT32_MAX - (delta - seq) + 1


class ProducerStateEntry:
    __slots__ = (
        "producer_id",
        "producer_epoch",
        "batches",
        "coordinator_epoch",
        "last_timestamp",
        "current_txn_first_offset",
        "last_seen_ms",  # our wall clock at its last append (or load); for expiry only
    )
    _STATE = __slots__[:-1]  # what Kafka keeps: compared by ==, stored in snapshots

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = -1,
        batches: list[BatchMetadata] | None = None,
        coordinator_epoch: int = -1,
        last_timestamp: int = -1,
        current_txn_first_offset: int = -1,
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: list[BatchMetadata] = batches if batches is not None else []
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.last_seen_ms = -1

    def copy(self) -> ProducerStateEntry:
        entry = ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            list(self.batches),
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )
        entry.last_seen_ms = self.last_seen_ms
        return entry

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def maybe_update_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        self.maybe_update_epoch(epoch)
        if len(self.batches) >= NUM_BATCHES_TO_RETAIN:
            del self.batches[0]
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self._STATE)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(id={self.producer_id}, epoch={self.producer_epoch}, "
            f"batches={self.batches}, coordinator_epoch={self.coordinator_epoch}, "
            f"last_timestamp={self.last_timestamp}, txn_first_offset={self.current_txn_first_offset})"
        )


_NOT_PLAIN = rb.CONTROL_FLAG | rb.TRANSACTIONAL_FLAG


class ProducerStateManager:
    def __init__(self, directory: str, name: str = "") -> None:
        self.directory = directory
        self.name = name or os.path.basename(directory.rstrip("/"))
        self.producers: dict[int, ProducerStateEntry] = {}
        # Offsets of the snapshot files on disk, ascending; those written but not yet fsynced.
        self.snapshots: list[int] = []
        self.unsynced: list[int] = []
        # Open transactions, first offset -> producer id, in ascending first offset (Kafka's
        # ongoingTxns): a transaction begins at the log end, so appending keeps the order.
        self.ongoing: OrderedDict[int, int] = OrderedDict()
        # Transactions whose marker is written but not yet below the high watermark (Kafka's
        # unreplicatedTxns), first offset -> the txn, in marker order; and their first offsets
        # as a heap (entries no longer in the dict are skipped when they reach the top).
        self.unreplicated: OrderedDict[int, CompletedTxn] = OrderedDict()
        self._unreplicated_firsts: list[int] = []
        # The lowest first offset of either: None when no transaction is unstable.
        self.first_unstable: int | None = None

    # -- append -------------------------------------------------------------------------------

    def validate(
        self,
        view: memoryview | bytes,
        batches: Sequence[ProducerBatch],
        origin: AppendOrigin,
        now_ms: int = -1,
    ) -> StateUpdate | NextBatch | Duplicate:
        """Check `batches` (see the module docstring); what to `apply` after the write, or the
        `Duplicate` to answer with. Raises KafkaError and changes nothing."""
        if len(batches) == 1 and origin == AppendOrigin.CLIENT:
            # The common case first, here rather than in a call of its own (a produce's hot
            # path): one plain batch that continues its producer's sequence in the same epoch
            # (it can be no duplicate: those are at or below the last sequence).
            batch = batches[0]
            header = batch.header
            current = self.producers.get(header.producer_id)
            if (
                current is not None
                and current.batches
                and not header.attributes & _NOT_PLAIN
                and header.producer_epoch == current.producer_epoch
                and current.current_txn_first_offset < 0
            ):
                first_seq = header.base_sequence
                last_seq = current.batches[-1].last_seq
                if first_seq == last_seq + 1 or (first_seq == 0 and last_seq == INT32_MAX):
                    delta = header.last_offset_delta
                    return NextBatch(
                        current,
                        BatchMetadata(
                            first_seq,
                            header.last_sequence,
                            batch.base_offset + delta,
                            delta,
                            batch.timestamp,
                        ),
                        now_ms,
                    )
        return self._validate_batches(view, batches, origin, now_ms)

    def _validate_batches(
        self,
        view: memoryview | bytes,
        batches: Sequence[ProducerBatch],
        origin: AppendOrigin,
        now_ms: int,
    ) -> StateUpdate | Duplicate:
        """`validate` of anything but the common case: each batch against the state plus the
        request's earlier batches, on copies of the entries it changes."""
        updates: dict[int, ProducerStateEntry] = {}
        events: list[TxnEvent] = []
        duplicate: Duplicate | None = None
        fresh = 0
        client = origin == AppendOrigin.CLIENT
        for batch in batches:
            header = batch.header
            pid = header.producer_id
            current = self.producers.get(pid)
            if client:
                found = self._check_client_batch(header, current)
                if found is not None:
                    if duplicate is None:
                        duplicate = Duplicate(
                            found.first_offset, found.last_offset, found.timestamp
                        )
                    else:
                        duplicate = duplicate._replace(last_offset=found.last_offset)
                    continue
            fresh += 1
            entry = updates.get(pid)
            if entry is None:
                entry = updates[pid] = (
                    current.copy() if current is not None else ProducerStateEntry(pid)
                )
                if now_ms > entry.last_seen_ms:
                    entry.last_seen_ms = now_ms
            if header.attributes & rb.CONTROL_FLAG:
                self._append_marker(entry, view, batch, origin, events)
            else:
                self._append_data(entry, batch, origin, events)
        if duplicate is not None:
            if fresh:
                raise KafkaError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"a request to {self.name} mixes batches already written with new ones",
                )
            return duplicate
        return StateUpdate(updates, events)

    def _check_client_batch(
        self, header: rb.BatchHeader, current: ProducerStateEntry | None
    ) -> BatchMetadata | None:
        """What a client's batch must be before its epoch and sequence are looked at: not a
        control batch, with a sequence. The batch it repeats, if it is a duplicate of one of
        its producer's last batches; else None."""
        if header.attributes & rb.CONTROL_FLAG:
            raise KafkaError(
                errors.INVALID_RECORD,
                f"clients may not write control batches ({self.name})",
            )
        if header.base_sequence < 0:
            raise KafkaError(
                errors.INVALID_RECORD,
                f"invalid sequence number {header.base_sequence} in a batch of producer "
                f"{header.producer_id} ({self.name})",
            )
        if current is None:
            return None
        return current.find_duplicate(
            header.producer_epoch, header.base_sequence, header.last_sequence
        )

    def apply(
        self, updates: StateUpdate | NextBatch, txn_index: TransactionIndex | None = None
    ) -> None:
        """Install what `validate` returned, once the batches are in the segment whose
        `txn_index` takes the aborted transactions their markers end."""
        if isinstance(updates, NextBatch):
            entry, batch, now_ms = updates
            batches = entry.batches
            if len(batches) >= NUM_BATCHES_TO_RETAIN:
                del batches[0]
            batches.append(batch)
            entry.last_timestamp = batch.timestamp
            if now_ms > entry.last_seen_ms:
                entry.last_seen_ms = now_ms
        else:
            self.producers.update(updates.entries)
            if updates.txn_events:
                self._apply_txn_events(updates.txn_events, txn_index)

    # -- transactions -------------------------------------------------------------------------

    def _apply_txn_events(
        self, events: Sequence[TxnEvent], txn_index: TransactionIndex | None
    ) -> None:
        """Begin and end transactions, in batch order; an aborted one goes into `txn_index`
        (unless None: a replay that only rebuilds the state) before it leaves the open set,
        with the last stable offset it leaves behind (Kafka's lastStableOffset(completedTxn))."""
        for event in events:
            if not isinstance(event, CompletedTxn):
                first, pid = event
                ongoing = self.ongoing
                if ongoing and first < next(reversed(ongoing)):
                    ongoing[first] = pid  # cannot happen in a log; keep the order anyway
                    self.ongoing = OrderedDict(sorted(ongoing.items()))
                else:
                    ongoing[first] = pid
                continue
            if event.aborted and txn_index is not None:
                lso = event.last_offset + 1
                for first, pid in self.ongoing.items():
                    if pid != event.producer_id:
                        lso = first
                        break
                txn_index.append(
                    TxnIndexEntry(event.producer_id, event.first_offset, event.last_offset, lso)
                )
            if self.ongoing.pop(event.first_offset, None) is None:
                log.warning(
                    "%s: a marker at %d ends transaction %s, not an open one",
                    self.name,
                    event.last_offset,
                    event,
                )
            self.unreplicated[event.first_offset] = event
            heapq.heappush(self._unreplicated_firsts, event.first_offset)
        self._update_first_unstable()

    def _update_first_unstable(self) -> None:
        first = next(iter(self.ongoing), None)
        heap = self._unreplicated_firsts
        while heap and heap[0] not in self.unreplicated:
            heapq.heappop(heap)
        if heap and (first is None or heap[0] < first):
            first = heap[0]
        self.first_unstable = first

    def on_high_watermark(self, high_watermark: int) -> None:
        """Transactions whose marker is now below the high watermark are stable."""
        self._remove_unreplicated_below(high_watermark)

    def on_log_start_offset(self, log_start_offset: int) -> None:
        self._remove_unreplicated_below(log_start_offset)

    def _remove_unreplicated_below(self, offset: int) -> None:
        unreplicated = self.unreplicated
        if not unreplicated:
            return
        while unreplicated:
            first, txn = next(iter(unreplicated.items()))
            if txn.last_offset >= offset:
                break
            del unreplicated[first]
        self._update_first_unstable()

    def _rebuild_ongoing(self) -> None:
        """The open transactions of the entries just loaded (a snapshot carries each producer's
        currentTxnFirstOffset); nothing is unreplicated."""
        self.ongoing = OrderedDict(
            sorted(
                (e.current_txn_first_offset, pid)
                for pid, e in self.producers.items()
                if e.current_txn_first_offset >= 0
            )
        )
        self.unreplicated = OrderedDict()
        self._unreplicated_firsts = []
        self._update_first_unstable()

    def _append_data(
        self,
        entry: ProducerStateEntry,
        batch: ProducerBatch,
        origin: AppendOrigin,
        events: list[TxnEvent] | None = None,
    ) -> None:
        header = batch.header
        epoch = header.producer_epoch
        first_seq = header.base_sequence
        self._check_epoch(entry, header, origin)
        if origin == AppendOrigin.CLIENT:
            if epoch != entry.producer_epoch:
                # A new epoch starts over at 0; a producer we know nothing of may start anywhere.
                if first_seq != 0 and entry.producer_epoch != -1:
                    raise KafkaError(
                        OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"producer {entry.producer_id} starts epoch {epoch} at sequence "
                        f"{first_seq}, not 0 ({self.name}, epoch was {entry.producer_epoch})",
                    )
            elif entry.batches and not in_sequence(entry.batches[-1].last_seq, first_seq):
                raise KafkaError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"out of order sequence number for producer {entry.producer_id} in "
                    f"{self.name}: {first_seq} (incoming), {entry.batches[-1].last_seq} (last written)",
                )
            elif not entry.batches and entry.producer_epoch != -1 and first_seq != 0:
                # Known epoch, no batch remembered (its last one was a transaction marker).
                raise KafkaError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {entry.producer_id} has written nothing in epoch {epoch} and "
                    f"sends sequence {first_seq}, not 0 ({self.name})",
                )
        delta = header.last_offset_delta
        last_offset = batch.base_offset + delta
        entry.add_batch(
            epoch,
            BatchMetadata(first_seq, header.last_sequence, last_offset, delta, batch.timestamp),
        )
        transactional = header.attributes & rb.TRANSACTIONAL_FLAG
        if entry.current_txn_first_offset >= 0 and not transactional:
            if origin != AppendOrigin.REPLICATION:
                raise KafkaError(
                    INVALID_TXN_STATE,
                    f"producer {entry.producer_id} sent a non-transactional batch while its "
                    f"transaction from offset {entry.current_txn_first_offset} is open ({self.name})",
                )
        elif entry.current_txn_first_offset < 0 and transactional:
            entry.current_txn_first_offset = batch.base_offset
            if events is not None:
                events.append((batch.base_offset, entry.producer_id))

    def _append_marker(
        self,
        entry: ProducerStateEntry,
        view: memoryview | bytes,
        batch: ProducerBatch,
        origin: AppendOrigin,
        events: list[TxnEvent] | None = None,
    ) -> None:
        """A transaction marker (COMMIT/ABORT control batch) ends the producer's transaction, if
        it has one open here (a marker for a partition the transaction never wrote to is legal:
        it ends nothing, but it still carries the epochs)."""
        header = batch.header
        marker = read_marker(view, batch.position)
        if marker is None:
            return  # an empty control batch: the cleaner removed its transaction
        commit, coordinator_epoch = marker
        self._check_epoch(entry, header, origin)
        if coordinator_epoch < entry.coordinator_epoch and origin != AppendOrigin.REPLICATION:
            raise KafkaError(
                TRANSACTION_COORDINATOR_FENCED,
                f"marker of coordinator epoch {coordinator_epoch} for producer "
                f"{entry.producer_id}, which saw {entry.coordinator_epoch} ({self.name})",
            )
        if entry.current_txn_first_offset >= 0 and events is not None:
            events.append(
                CompletedTxn(
                    entry.producer_id, entry.current_txn_first_offset, batch.base_offset, not commit
                )
            )
        entry.maybe_update_epoch(header.producer_epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = -1
        entry.last_timestamp = batch.timestamp

    def _check_epoch(
        self, entry: ProducerStateEntry, header: rb.BatchHeader, origin: AppendOrigin
    ) -> None:
        if header.producer_epoch >= entry.producer_epoch:
            return
        message = (
            f"epoch {header.producer_epoch} of producer {entry.producer_id} is below its "
            f"current epoch {entry.producer_epoch} ({self.name})"
        )
        if origin == AppendOrigin.REPLICATION:
            log.warning("%s", message)
            return
        if origin == AppendOrigin.CLIENT and header.attributes & rb.TRANSACTIONAL_FLAG:
            raise KafkaError(PRODUCER_FENCED, message)
        # A coordinator's write (a marker, a transactional offset commit) with an old epoch:
        # INVALID_PRODUCER_EPOCH, as Kafka answers (the coordinator then gives up on it).
        raise KafkaError(INVALID_PRODUCER_EPOCH, message)

    # -- queries ------------------------------------------------------------------------------

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return self.producers

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    # -- expiry -------------------------------------------------------------------------------

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for `expiration_ms` or more (never one in a transaction)."""
        doomed = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset < 0
            and now_ms - max(e.last_timestamp, e.last_seen_ms) >= expiration_ms
        ]
        for pid in doomed:
            del self.producers[pid]
        return len(doomed)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot_entries(self) -> Iterator[snap.SnapshotEntry]:
        """Our entries as snapshot entries: one per remembered batch (see producer_snapshot)."""
        for pid, e in self.producers.items():
            if not e.batches:
                yield snap.SnapshotEntry(
                    pid, e.producer_epoch, NO_SEQUENCE, -1, 0, e.last_timestamp,
                    e.coordinator_epoch, e.current_txn_first_offset,
                )  # fmt: skip
                continue
            last = len(e.batches) - 1
            for i, b in enumerate(e.batches):
                yield snap.SnapshotEntry(
                    pid, e.producer_epoch, b.last_seq, b.last_offset, b.offset_delta,
                    e.last_timestamp if i == last else b.timestamp,
                    e.coordinator_epoch, e.current_txn_first_offset,
                )  # fmt: skip

    def take_snapshot(
        self, offset: int, *, keep_from: int | None = None, sync: bool = True
    ) -> bool:
        """Write the state as of `offset` (every batch below it applied) unless a snapshot is
        there already; then prune snapshots no recovery needs (see the module docstring).

        `sync=False` (at a roll, on the request path) leaves the fsync to whoever flushes the
        rolled segment: `sync_pending`, or `pending_sync_fds` for a flush on another thread,
        before the recovery point passes `offset`."""
        wrote = False
        if offset not in self.snapshots:
            snap.write(self.directory, offset, self.snapshot_entries(), sync=sync)
            bisect.insort(self.snapshots, offset)
            if not sync:
                self.unsynced.append(offset)
            wrote = True
        if keep_from is not None:
            self.prune_snapshots(keep_from)
        return wrote

    def prune_snapshots(self, keep_from: int) -> None:
        """Delete every snapshot older than the newest one at or below `keep_from`."""
        floor = [o for o in self.snapshots if o <= keep_from]
        if len(floor) > 1:
            self._delete_snapshots(floor[:-1])

    def delete_snapshots_below(self, offset: int) -> None:
        self._delete_snapshots([o for o in self.snapshots if o < offset])

    def delete_snapshots_above(self, offset: int) -> None:
        self._delete_snapshots([o for o in self.snapshots if o > offset])

    def _delete_snapshots(self, offsets: list[int]) -> None:
        for o in offsets:
            snap.delete(self.directory, o)
            self.snapshots.remove(o)
            if o in self.unsynced:
                self.unsynced.remove(o)

    def pending_sync_fds(self) -> list[int]:
        """Open descriptors of the snapshots written without fsync, and of the directory (their
        names), for the caller to fsync and close; they count as synced from here on."""
        fds = []
        for o in self.unsynced:
            try:
                fds.append(os.open(os.path.join(self.directory, snap.file_name(o)), os.O_RDONLY))
            except FileNotFoundError:
                pass
        if self.unsynced:
            fds.append(os.open(self.directory, os.O_RDONLY))
        self.unsynced = []
        return fds

    def sync_pending(self) -> None:
        """fsync the snapshots written without it (see `take_snapshot`)."""
        for fd in self.pending_sync_fds():
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _load_snapshot(self, upper: int) -> int | None:
        """Load the newest readable snapshot at or below `upper`; its offset, or None."""
        for offset in reversed([o for o in self.snapshots if o <= upper]):
            path = os.path.join(self.directory, snap.file_name(offset))
            try:
                entries = snap.read(path)
            except (snap.CorruptSnapshotError, OSError) as exc:
                log.warning("%s: ignoring producer snapshot %s: %s", self.name, path, exc)
                self._delete_snapshots([offset])
                continue
            self.producers = entries_to_state(entries)
            self._rebuild_ongoing()
            return offset
        return None

    # -- loading and truncation ---------------------------------------------------------------

    def load(
        self,
        segments: Sequence[LogSegment],
        log_start_offset: int,
        log_end_offset: int,
        clean_shutdown: bool,
        now_ms: int = -1,
        *,
        txn_index_from: int | None = None,
        snapshots: list[int] | None = None,
        no_producers_from: int | None = None,
    ) -> None:
        """Build the state of a log just opened (see the module docstring); every producer
        found counts as seen at `now_ms`. `snapshots`: the offsets of the snapshot files, if
        the caller listed the directory already. `no_producers_from`: an offset from which the
        recovery found no batch with a producer id (no replay from there on).

        `txn_index_from` (a segment base, after a recovery): the .txnindex of every segment from
        there on is rebuilt while the batches are replayed, as Kafka's segment recovery does; the
        replay then starts from a snapshot at or below it."""
        self._load(
            segments,
            log_start_offset,
            log_end_offset,
            clean_shutdown,
            txn_index_from,
            snapshots,
            no_producers_from,
        )
        for entry in self.producers.values():
            entry.last_seen_ms = now_ms

    def _load(
        self,
        segments: Sequence[LogSegment],
        log_start_offset: int,
        log_end_offset: int,
        clean_shutdown: bool,
        txn_index_from: int | None,
        snapshots: list[int] | None = None,
        no_producers_from: int | None = None,
    ) -> None:
        self._clear()
        self.snapshots = (
            list(snapshots) if snapshots is not None else snap.list_offsets(self.directory)
        )
        first_base = segments[0].base_offset if segments else log_start_offset
        stale = [o for o in self.snapshots if o > log_end_offset or o < first_base]
        if stale:
            log.info(
                "%s: deleting producer snapshots %s outside [%d, %d]",
                self.name,
                stale,
                first_base,
                log_end_offset,
            )
            self._delete_snapshots(stale)
        if not self.snapshots and clean_shutdown and txn_index_from is None:
            # A log written before producer snapshots existed (Kafka's upgrade case): no scan;
            # its producers are unknown, and so accepted at any sequence.
            if log_end_offset > log_start_offset:
                self.take_snapshot(log_end_offset)
            return
        self._reload(segments, log_start_offset, log_end_offset, txn_index_from, no_producers_from)
        if log_end_offset > log_start_offset and (self.producers or txn_index_from is None):
            # Unless one is there: a reload (a truncation) starts here next time. Synced with
            # the log's next flush (`sync_pending`); torn by a machine crash before, its CRC
            # refuses it. After a recovery that found no producer at all there is nothing to
            # save a later load: the older snapshot (or none) and the batches after it give the
            # same empty state, and a roll or a clean close writes the next one. (Creating a
            # file costs ext4 ~0.2 ms: 10,000 partitions of plain producers recover without.)
            self.take_snapshot(log_end_offset, sync=False)

    def truncate_and_reload(
        self, segments: Sequence[LogSegment], log_start_offset: int, log_end_offset: int
    ) -> None:
        """After a truncation to `log_end_offset`: drop what is above it, rebuild the rest."""
        self.delete_snapshots_above(log_end_offset)
        seen = {pid: e.last_seen_ms for pid, e in self.producers.items()}
        self._reload(segments, log_start_offset, log_end_offset)
        for pid, entry in self.producers.items():
            entry.last_seen_ms = seen.get(pid, -1)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._clear()
        self._delete_snapshots(list(self.snapshots))

    def _clear(self) -> None:
        self.producers = {}
        self.ongoing = OrderedDict()
        self.unreplicated = OrderedDict()
        self._unreplicated_firsts = []
        self.first_unstable = None

    def _reload(
        self,
        segments: Sequence[LogSegment],
        log_start_offset: int,
        log_end_offset: int,
        txn_index_from: int | None = None,
        no_producers_from: int | None = None,
    ) -> None:
        self._clear()
        upper = log_end_offset
        if txn_index_from is not None:
            for seg in segments:
                if seg.base_offset >= txn_index_from:
                    seg.txn_index.reset()
            upper = min(upper, txn_index_from)
        start = self._load_snapshot(upper)
        if start is None:
            start = log_start_offset
        if no_producers_from is not None and start >= no_producers_from:
            # The batches from here on were just read by recovery: none has a producer id, so
            # a replay would change nothing (and write no .txnindex entry).
            self._update_first_unstable()
        elif start < log_end_offset:
            self.rebuild_from_log(segments, start, log_end_offset, txn_index_from)

    def rebuild_from_log(
        self,
        segments: Sequence[LogSegment],
        start: int,
        end: int,
        txn_index_from: int | None = None,
    ) -> int:
        """Replay the headers of the batches holding offsets in [start, end); batches read.

        With `txn_index_from`, a transaction aborted by a marker at or above it is appended to
        the .txnindex of the marker's segment (which the caller emptied)."""
        count = 0
        bases = [s.base_offset for s in segments]
        events: list[TxnEvent] = []
        producers = self.producers
        for header, data in scan_headers(segments, start, end):
            count += 1
            pid = header.producer_id
            entry = producers.get(pid)
            if entry is None:
                entry = producers[pid] = ProducerStateEntry(pid)
            batch = ProducerBatch(header, header.base_offset, header.max_timestamp, 0)
            if header.attributes & rb.CONTROL_FLAG:
                self._append_marker(entry, data, batch, AppendOrigin.REPLICATION, events)
            elif header.attributes & rb.TRANSACTIONAL_FLAG:
                self._append_data(entry, batch, AppendOrigin.REPLICATION, events)
            else:
                self._append_data(entry, batch, AppendOrigin.REPLICATION)
            if events:
                index = None
                if txn_index_from is not None and header.base_offset >= txn_index_from:
                    index = segments[bisect.bisect_right(bases, header.base_offset) - 1].txn_index
                self._apply_txn_events(events, index)
                events.clear()
        self._update_first_unstable()
        log.debug(
            "%s: rebuilt producer state from %d batches in [%d, %d)", self.name, count, start, end
        )
        return count


def entries_to_state(entries: Sequence[snap.SnapshotEntry]) -> dict[int, ProducerStateEntry]:
    """Snapshot entries back into producer state, merging the entries of one producer id in
    order (a Kafka snapshot has one per producer; ours one per remembered batch)."""
    producers: dict[int, ProducerStateEntry] = {}
    for e in entries:
        entry = producers.get(e.producer_id)
        if entry is None:
            entry = producers[e.producer_id] = ProducerStateEntry(e.producer_id, e.epoch)
        if e.last_offset >= 0:
            first_seq = (
                decrement_sequence(e.last_sequence, e.offset_delta)
                if e.last_sequence >= 0
                else NO_SEQUENCE
            )
            entry.add_batch(
                e.epoch,
                BatchMetadata(
                    first_seq, e.last_sequence, e.last_offset, e.offset_delta, e.timestamp
                ),
            )
        else:
            entry.maybe_update_epoch(e.epoch)
        entry.last_timestamp = e.timestamp
        entry.coordinator_epoch = e.coordinator_epoch
        entry.current_txn_first_offset = e.current_txn_first_offset
    return producers


def read_marker(buf: memoryview | bytes, pos: int) -> tuple[bool, int] | None:
    """(is_commit, coordinator_epoch) of the transaction marker batch at `pos`; None if the
    cleaner emptied it. CORRUPT_MESSAGE / INVALID_RECORD if it is no well formed marker."""
    from gregor.protocol.records.records import read_end_txn_marker

    return read_end_txn_marker(buf, pos)


def scan_headers(
    segments: Sequence[LogSegment], start: int, end: int
) -> Iterator[tuple[rb.BatchHeader, bytes]]:
    """(header, data) of every batch with a producer id that holds an offset in [start, end),
    read from the segment files header by header (`data` is the whole batch for a control
    batch, whose marker is read, else b""). Leaves no file open that was closed before."""
    last = len(segments) - 1
    for i, seg in enumerate(segments):
        if i < last and segments[i + 1].base_offset <= start:
            continue
        if seg.base_offset >= end:
            break
        was_open = seg._fd is not None
        try:
            position = 0
            if start > seg.base_offset:
                found = seg.translate_offset(start)
                if found is None:
                    continue
                position = found.position
            yield from _scan_segment(seg, position, end)
        finally:
            if not was_open:
                seg.close_handles()


def _scan_segment(
    seg: LogSegment, position: int, end: int
) -> Iterator[tuple[rb.BatchHeader, bytes]]:
    fd = seg.fd
    size = seg.size
    pos = position
    want = _SCAN_CHUNK
    header_size = rb.HEADER_SIZE
    while size - pos >= header_size:
        chunk = os.pread(fd, min(want, size - pos), pos)
        n = len(chunk)
        if n < header_size:
            return
        off = 0
        batch_size = 0
        while n - off >= header_size:
            header = rb.read_header(chunk, off)
            batch_size = header.batch_length + rb.LOG_OVERHEAD
            if batch_size < header_size or pos + batch_size > size or header.base_offset >= end:
                return
            if header.producer_id >= 0:
                data = b""
                if header.attributes & rb.CONTROL_FLAG:
                    data = os.pread(fd, batch_size, pos)
                yield header, data
            off += batch_size
            pos += batch_size
        # After a large batch read just the next header, not a chunk we would mostly skip.
        want = header_size if batch_size > _SCAN_CHUNK // 2 else _SCAN_CHUNK
