"""What the log cleaner knows of transactions while it walks a log in offset order (Kafka's
CleanedTransactionMetadata).

Given the .txnindex entries of the log (every aborted transaction, by first offset), it tells
for each transactional batch whether it belongs to an aborted transaction, and for each marker
whether the transaction it ends still has data in this cleaning:

    batch                                   state change                        answer
    any, as offsets pass an aborted txn's   the producer's txn is "aborted      -
      first offset                            and open"
    transactional data, producer's txn      that txn has data here              discard (aborted)
      aborted and open
    transactional data, otherwise           the producer's txn is "committed    keep
                                              and open"
    ABORT marker                            the producer's aborted txn ends     keep the marker if the txn
                                                                                  had data here (and index it
                                                                                  in the cleaned segment);
                                                                                  else it may go
    COMMIT marker                           the producer's committed txn ends   keep if the txn had data
                                                                                  here; else it may go
    empty control batch (already cleaned)   -                                   may go
    other control types                     -                                   keep

"May go" means: once its transaction has no data left, a marker is kept only until its delete
horizon (set the first time, as for a tombstone; see cleaner.py). An ABORT marker whose data
is gone gets no entry in the cleaned segment's .txnindex: a read_committed consumer has nothing
of it to drop. The walk is one per cleaning, across all its groups of segments; the map
building makes its own (it only needs "aborted?").
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from gregor.storage.cleaner_records import RECORDS_COUNT, BadRecords, record_spans, records_data
from gregor.storage.txn_index import TransactionIndex, TxnIndexEntry

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_TYPE = struct.Struct(">h")


def control_type(batch: bytes, fields: tuple[int, ...]) -> int | None:
    """The control type of a control batch's first record (None if the batch is empty)."""
    if fields[RECORDS_COUNT] <= 0:
        return None
    spans = record_spans(records_data(batch, fields), 1)
    key = spans[0][4]
    if key is None or len(key) < 4:
        raise BadRecords("a control record without a 4-byte key")
    return _TYPE.unpack_from(key, 2)[0]


class CleanedTransactions:
    def __init__(self, aborted: Sequence[TxnIndexEntry]) -> None:
        # Aborted transactions by first offset, and how far the walk has taken them.
        self._aborted = sorted(aborted, key=lambda e: e.first_offset)
        self._next = 0
        # producer id -> [its aborted, open txn's entry, whether data of it was seen]
        self._ongoing_aborted: dict[int, list] = {}
        self._ongoing_committed: set[int] = set()
        # Where the entries of the aborted transactions kept go (the cleaned segment's).
        self.cleaned_index: TransactionIndex | None = None

    def _consume_up_to(self, offset: int) -> None:
        aborted = self._aborted
        i = self._next
        while i < len(aborted) and aborted[i].first_offset <= offset:
            entry = aborted[i]
            self._ongoing_aborted.setdefault(entry.producer_id, [entry, False])
            i += 1
        self._next = i

    def on_batch(self, producer_id: int, last_offset: int) -> bool:
        """A transactional data batch: True if its transaction was aborted (discard it)."""
        self._consume_up_to(last_offset)
        found = self._ongoing_aborted.get(producer_id)
        if found is not None:
            found[1] = True
            return True
        self._ongoing_committed.add(producer_id)
        return False

    def on_control_batch(self, producer_id: int, last_offset: int, kind: int | None) -> bool:
        """A control batch: True if its transaction has no data left in this cleaning (the
        marker may go once its delete horizon passes)."""
        self._consume_up_to(last_offset)
        if kind is None:
            return True
        if kind == CONTROL_ABORT:
            found = self._ongoing_aborted.pop(producer_id, None)
            if found is not None and found[1]:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(found[0])
                return False
            return True
        if kind == CONTROL_COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False
