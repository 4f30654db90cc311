"""Transaction states: Kafka's names and ids (the `TransactionStatus` int8 written in
`__transaction_state`), and the one table of legal transitions.

    state              id  entered from                                   by
    Empty               0  Empty, CompleteCommit, CompleteAbort           InitProducerId: a new id, an
                                                                          epoch bump, a new producer id
    Ongoing             1  Ongoing, Empty, CompleteCommit, CompleteAbort  AddPartitionsToTxn,
                                                                          AddOffsetsToTxn
    PrepareCommit       2  Ongoing                                        EndTxn(commit)
    PrepareAbort        3  Ongoing, PrepareEpochFence                     EndTxn(abort); a fence
    CompleteCommit      4  PrepareCommit                                  every commit marker written
    CompleteAbort       5  PrepareAbort                                   every abort marker written
    Dead                6  Empty, CompleteCommit, CompleteAbort           expiry: the tombstone
    PrepareEpochFence   7  Ongoing                                        InitProducerId over an
                                                                          Ongoing transaction, or
                                                                          its timeout

PrepareEpochFence is a step, never a record: fencing a producer whose transaction is Ongoing
bumps the epoch and, in the same operation, leaves PrepareEpochFence for PrepareAbort, and that
PrepareAbort (with the bumped epoch) is what is written -- as Kafka does. Dead is what a
tombstone means; the id is then forgotten. Empty, CompleteCommit and CompleteAbort are the states
an idle id may expire in (`transactional.id.expiration.ms`).

`check_transition` is consulted by every operation before it emits a record and by replay before
it applies one; only replay changes state (`shard.py`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TxnState:
    id: int
    name: str
    expiration_allowed: bool = False

    def __str__(self) -> str:
        return self.name


EMPTY = TxnState(0, "Empty", expiration_allowed=True)
ONGOING = TxnState(1, "Ongoing")
PREPARE_COMMIT = TxnState(2, "PrepareCommit")
PREPARE_ABORT = TxnState(3, "PrepareAbort")
COMPLETE_COMMIT = TxnState(4, "CompleteCommit", expiration_allowed=True)
COMPLETE_ABORT = TxnState(5, "CompleteAbort", expiration_allowed=True)
DEAD = TxnState(6, "Dead")
PREPARE_EPOCH_FENCE = TxnState(7, "PrepareEpochFence")

ALL_STATES = (
    EMPTY,
    ONGOING,
    PREPARE_COMMIT,
    PREPARE_ABORT,
    COMPLETE_COMMIT,
    COMPLETE_ABORT,
    DEAD,
    PREPARE_EPOCH_FENCE,
)
BY_ID: dict[int, TxnState] = {s.id: s for s in ALL_STATES}
BY_NAME: dict[str, TxnState] = {s.name: s for s in ALL_STATES}

# target -> the states it may be entered from (the table above)
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    PREPARE_ABORT: frozenset({ONGOING, PREPARE_EPOCH_FENCE}),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
    DEAD: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_EPOCH_FENCE: frozenset({ONGOING}),
}

# A transaction is open (markers may still be owed) in these.
PENDING = frozenset({ONGOING, PREPARE_COMMIT, PREPARE_ABORT})


class IllegalTransition(Exception):
    """A transition the table does not allow: a bug in the coordinator, never a client error."""


def check_transition(current: TxnState, target: TxnState, transactional_id: str = "") -> None:
    if current not in VALID_PREVIOUS[target]:
        raise IllegalTransition(
            f"transactional id {transactional_id!r}: {current} -> {target} is not a legal transition"
        )
