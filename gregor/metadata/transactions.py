"""Metadata transactions (KIP-868): records that take effect together or not at all, even when
they span several Raft batches.

A Raft batch is atomic on disk and in replication, but a controller commit larger than one
batch is not: a crash, or a change of leader, between its batches leaves a prefix of it in the
log. So a commit of several batches is framed (raft_store.py writes the frame):

    BeginTransactionRecord(name)     first record of the first batch
    ... the commit's records ...
    EndTransactionRecord             last record of the last batch

and replay holds the records from the Begin back until its End, then applies them all at once.
A new active controller that finds a transaction still open at the end of the log (its writer
died) appends AbortTransactionRecord(reason="Controller failover"), and replay drops what it
held. At the end of the log a transaction still open is simply not applied yet (nothing of it
is visible), which is the same as aborted until an End or Abort comes.

    buffer = TransactionBuffer()
    ready = buffer.feed([(rec, offset, epoch), ...])   # what may be applied to the image now
    buffer.open                                        # inside a transaction?
    buffer.stable_offset(last)                         # the last offset whose effect is visible

The markers themselves are replayed onto the image with the records they frame (they only move
its offset, image.py), so the image's offset is that of the End or the Abort. As in Kafka
(MetadataBatchLoader, OffsetControlManager), a Begin inside an open transaction, or an End or
Abort outside one, is a broken log: MetadataReplayError. A snapshot is only ever taken outside a
transaction, so loading one starts with none open (`reset`), and a snapshot holding a marker is
refused (snapshot.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from gregor.metadata import records as r
from gregor.metadata.image import MetadataReplayError

log = logging.getLogger("gregor.metadata")

Entry = tuple[Any, int, int]  # (record, offset, epoch)
MARKERS = (r.BeginTransactionRecord, r.EndTransactionRecord, r.AbortTransactionRecord)
_ENDS = (r.EndTransactionRecord, r.AbortTransactionRecord)  # a tuple: `A | B` is built per call
FAILOVER_REASON = "Controller failover"  # Kafka's reason when a new controller aborts


class TransactionBuffer:
    def __init__(self) -> None:
        self._held: list[Entry] | None = None  # the open transaction's records, Begin first
        self.start_offset = -1  # of the open transaction's Begin; -1 when none is open

    @property
    def open(self) -> bool:
        return self._held is not None

    @property
    def held(self) -> int:
        """How many records (the Begin included) wait for their End."""
        return 0 if self._held is None else len(self._held)

    def reset(self) -> None:
        """Forget an open transaction (a snapshot replaces everything replayed so far)."""
        self._held = None
        self.start_offset = -1

    def feed(self, entries: Iterable[Entry]) -> list[Entry]:
        """The entries that take effect now, in log order: those outside a transaction, and
        every record of a transaction whose End came; an Abort alone for an aborted one."""
        ready: list[Entry] = []
        for entry in entries:
            rec, offset, _epoch = entry
            held = self._held
            if isinstance(rec, r.BeginTransactionRecord):
                if held is not None:
                    raise MetadataReplayError(
                        f"BeginTransactionRecord at offset {offset}: the transaction begun at "
                        f"{self.start_offset} was never closed"
                    )
                self._held = [entry]
                self.start_offset = offset
            elif isinstance(rec, _ENDS):
                if held is None:
                    raise MetadataReplayError(
                        f"{type(rec).__name__} at offset {offset} without an open transaction"
                    )
                if isinstance(rec, r.EndTransactionRecord):
                    ready += held
                else:
                    log.info(
                        "metadata transaction begun at offset %d aborted at %d (%s): %d record(s) dropped",
                        self.start_offset,
                        offset,
                        rec.reason,
                        len(held) - 1,
                    )
                ready.append(entry)
                self.reset()
            elif held is not None:
                held.append(entry)
            else:
                ready.append(entry)
        return ready

    def stable_offset(self, last_offset: int) -> int:
        """The last offset whose effect is visible once everything up to `last_offset` is fed:
        `last_offset`, or the one before the open transaction's Begin."""
        return last_offset if self._held is None else self.start_offset - 1
