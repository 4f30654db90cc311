"""What the data-plane simulation checks of the coordinators, through what their clients saw
(data_invariants.py holds the checker these belong to).

Committed offsets (`CommittedOffsets`): an offset a group's OffsetCommit was acknowledged for
is never later read back lower by OffsetFetch, across any coordinator failover. A group's
commits come from one consumer, one at a time and never lower, so the offset read back may be
that of a later commit whose answer was lost, never an older one; and what was read back once
(it is replicated: OffsetFetch answers once it is) is never read back lower later. Both hold
for answers of the partition's current leader: one cut off from the controller still believes
it leads and answers from what it has, stale, as Kafka's does (found at seed 377).
Transactional offsets (TxnOffsetCommit, one distinct offset per transaction): an aborted
transaction's offset is never read back, and by the end a committed transaction's offset (or a
later one) is (its marker reached `__consumer_offsets`; EndTxn is answered before markers are
written, so not at once).

Transactions (`TxnLedger`): each transaction of a transactional producer, by the batches it
wrote ((producer id, epoch, partition, base sequence) each), moves

    open --EndTxn sent--> committing | aborting --acknowledged--> committed | aborted
    open --the producer starts over (InitProducerId)--> doomed (it can only be aborted)
    committing --the producer starts over--> unknown (the coordinator may have committed it)

and a read_committed consumer:
  * keeps no batch of a transaction open, doomed, aborting or aborted (never sees aborted or
    undecided data), and drops no batch of a committed one;
  * sees each transaction whole: one outcome for all of its batches, and an acknowledged
    decision agrees with what consumers saw;
  * at the end, has kept every batch of every committed transaction (they all become
    visible: the coordinator's markers reached every partition).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gregor.protocol.records.batch import BatchHeader
from gregor.sim.invariants import InvariantViolation

TopicPartition = tuple[str, int]
BatchKey = tuple[int, int, TopicPartition, int]  # producer id, epoch, partition, base sequence

OPEN, COMMITTING, ABORTING = "open", "committing", "aborting"
COMMITTED, ABORTED, DOOMED, UNKNOWN = "committed", "aborted", "doomed", "unknown"
MAY_BE_KEPT = frozenset({COMMITTING, COMMITTED, UNKNOWN})
MAY_BE_DROPPED = frozenset({OPEN, COMMITTING, ABORTING, ABORTED, DOOMED, UNKNOWN})


class CommittedOffsets:
    def __init__(self) -> None:
        self.acked: dict[tuple[str, TopicPartition], int] = {}
        self.read: dict[tuple[str, TopicPartition], int] = {}
        self.txn_committed: dict[tuple[str, TopicPartition], int] = {}
        self.txn_aborted: set[tuple[str, TopicPartition, int]] = set()
        self.stale_reads = 0  # answers of a leader the metadata has moved on from

    def on_committed(self, group: str, tp: TopicPartition, offset: int) -> None:
        key = (group, tp)
        self.acked[key] = max(self.acked.get(key, -1), offset)

    def on_txn_decided(self, group: str, tp: TopicPartition, offset: int, committed: bool) -> None:
        if committed:
            key = (group, tp)
            self.txn_committed[key] = max(self.txn_committed.get(key, -1), offset)
        else:
            self.txn_aborted.add((group, tp, offset))

    def on_fetched(
        self, group: str, tp: TopicPartition, offset: int, who: Any, current: bool = True
    ) -> None:
        """`offset` read back by a fetch sent after every acknowledged commit counted here;
        `current`: answered by the partition's leader in the committed metadata's epoch (a
        leader cut off from the controller answers from what it has, as in Kafka: stale, so
        only checked for aborted offsets)."""
        key = (group, tp)
        acked, read = self.acked.get(key, -1), self.read.get(key, -1)
        if (group, tp, offset) in self.txn_aborted:
            raise InvariantViolation(
                "aborted transactional offsets are never committed",
                f"group {group} {tp}: client {who.node_id} read back {offset}, the offset of an "
                "aborted transaction",
            )
        if not current:
            self.stale_reads += 1
            return
        if offset < acked or offset < read:
            what = "acknowledged" if offset < acked else "read back before"
            raise InvariantViolation(
                "committed offsets never go back",
                f"group {group} {tp}: {max(acked, read)} {what}, consumer {who.node_id} read "
                f"back {offset}",
            )
        self.read[key] = offset

    def check_visible(self) -> None:
        for key, offset in self.txn_committed.items():
            if self.read.get(key, -1) < offset:
                raise InvariantViolation(
                    "a committed transaction's offsets become visible",
                    f"group {key[0]} {key[1]}: committed {offset} in a transaction, read back "
                    f"{self.read.get(key, -1)} at most",
                )


@dataclass
class Transaction:
    producer_id: int
    batches: list[BatchKey]
    offset: tuple[str, TopicPartition, int] | None = None  # a TxnOffsetCommit of it
    state: str = OPEN
    seen: bool | None = None  # the outcome a read_committed consumer saw (True: committed)
    kept: set[BatchKey] = field(default_factory=set)


class TxnLedger:
    def __init__(self, offsets: CommittedOffsets) -> None:
        self.offsets = offsets
        self.by_batch: dict[BatchKey, Transaction] = {}
        self.txns: list[Transaction] = []

    def begin(
        self,
        producer_id: int,
        batches: list[BatchKey],
        offset: tuple[str, TopicPartition, int] | None = None,
    ) -> Transaction:
        txn = Transaction(producer_id, list(batches), offset)
        self.txns.append(txn)
        for key in batches:
            self.by_batch[key] = txn
        return txn

    def ending(self, txn: Transaction, committed: bool) -> None:
        if txn.state == OPEN:
            txn.state = COMMITTING if committed else ABORTING

    def decided(self, txn: Transaction, committed: bool) -> None:
        txn.state = COMMITTED if committed else ABORTED
        if txn.offset is not None:
            self.offsets.on_txn_decided(*txn.offset, committed)
        if txn.seen is not None and txn.seen != committed:
            raise InvariantViolation(
                "transactions are atomic",
                f"producer {txn.producer_id}: acknowledged "
                f"{'committed' if committed else 'aborted'}, consumers saw the other outcome "
                f"({txn.batches})",
            )

    def abandoned(self, txn: Transaction) -> None:
        """The producer starts over without an answer to EndTxn (or before sending it)."""
        if txn.state in (OPEN, ABORTING) and txn.offset is not None:
            self.offsets.on_txn_decided(*txn.offset, False)
        if txn.state == OPEN:
            txn.state = DOOMED
        elif txn.state == COMMITTING:
            txn.state = UNKNOWN

    def on_read(self, tp: TopicPartition, h: BatchHeader, kept: bool, who: Any) -> None:
        key = (h.producer_id, h.producer_epoch, tp, h.base_sequence)
        txn = self.by_batch.get(key)
        if txn is None:
            raise InvariantViolation(
                "read_committed reads only decided transactions",
                f"consumer {who.node_id} {'kept' if kept else 'dropped'} {tp} at "
                f"{h.base_offset}: producer {h.producer_id} epoch {h.producer_epoch} sequence "
                f"{h.base_sequence} is in no transaction of its producer",
            )
        if kept and txn.state not in MAY_BE_KEPT:
            aborted = txn.state in (ABORTING, ABORTED, DOOMED)
            raise InvariantViolation(
                "read_committed never sees aborted data"
                if aborted
                else "read_committed reads only decided transactions",
                f"consumer {who.node_id} kept {tp} at {h.base_offset} of producer "
                f"{h.producer_id} epoch {h.producer_epoch}, a transaction {txn.state}",
            )
        if not kept and txn.state not in MAY_BE_DROPPED:
            raise InvariantViolation(
                "read_committed drops only aborted data",
                f"consumer {who.node_id} dropped {tp} at {h.base_offset} of producer "
                f"{h.producer_id}, a transaction {txn.state}",
            )
        if txn.seen is not None and txn.seen != kept:
            raise InvariantViolation(
                "transactions are atomic",
                f"consumer {who.node_id} {'kept' if kept else 'dropped'} {tp} at "
                f"{h.base_offset} of producer {h.producer_id}, another batch of that "
                f"transaction was {'dropped' if kept else 'kept'} ({txn.batches})",
            )
        txn.seen = kept
        if kept:
            txn.kept.add(key)

    def check_visible(self) -> None:
        """Every batch of every acknowledged commit was kept by a read_committed consumer."""
        for txn in self.txns:
            if txn.state == COMMITTED and len(txn.kept) < len(txn.batches):
                missing = [b for b in txn.batches if b not in txn.kept]
                raise InvariantViolation(
                    "a committed transaction's records all become visible",
                    f"producer {txn.producer_id}: {missing} never read by read_committed",
                )
