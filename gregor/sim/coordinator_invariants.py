"""What the data-plane simulation checks of the coordinators, through what their clients saw
(data_invariants.py holds the checker these belong to).

Committed offsets (`CommittedOffsets`): an offset a group's OffsetCommit was acknowledged for
is never later read back lower by OffsetFetch, across any coordinator failover. A group's
commits come from one consumer, one at a time and never lower, so the offset read back may be
that of a later commit whose answer was lost, never an older one.

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
        self.commits = 0
        self.fetches = 0

    def on_committed(self, group: str, tp: TopicPartition, offset: int) -> None:
        self.commits += 1
        key = (group, tp)
        self.acked[key] = max(self.acked.get(key, -1), offset)

    def on_fetched(self, group: str, tp: TopicPartition, offset: int, who: Any) -> None:
        """`offset` read back by a fetch sent after every acknowledged commit counted here."""
        self.fetches += 1
        acked = self.acked.get((group, tp), -1)
        if offset < acked:
            raise InvariantViolation(
                "committed offsets never go back",
                f"group {group} {tp}: committed {acked} (acknowledged), consumer "
                f"{who.node_id} read back {offset}",
            )


@dataclass
class Transaction:
    producer_id: int
    batches: list[BatchKey]
    state: str = OPEN
    seen: bool | None = None  # the outcome a read_committed consumer saw (True: committed)
    kept: set[BatchKey] = field(default_factory=set)


class TxnLedger:
    def __init__(self) -> None:
        self.by_batch: dict[BatchKey, Transaction] = {}
        self.txns: list[Transaction] = []

    def begin(self, producer_id: int, batches: list[BatchKey]) -> Transaction:
        txn = Transaction(producer_id, list(batches))
        self.txns.append(txn)
        for key in batches:
            self.by_batch[key] = txn
        return txn

    def ending(self, txn: Transaction, committed: bool) -> None:
        if txn.state == OPEN:
            txn.state = COMMITTING if committed else ABORTING

    def decided(self, txn: Transaction, committed: bool) -> None:
        txn.state = COMMITTED if committed else ABORTED
        if txn.seen is not None and txn.seen != committed:
            raise InvariantViolation(
                "transactions are atomic",
                f"producer {txn.producer_id}: acknowledged "
                f"{'committed' if committed else 'aborted'}, consumers saw the other outcome "
                f"({txn.batches})",
            )

    def abandoned(self, txn: Transaction) -> None:
        """The producer starts over without an answer to EndTxn (or before sending it)."""
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
