"""Last-write-wins resolution of writes to the same key from several regions: pure functions
over immutable state, and `Resolver`, a small mutable view built on them.

Rules: of all writes to a key, the one with the greatest HLC wins (the node id in the HLC
breaks ties between equal clock readings); a tombstone (value None) is a write like any other,
so a delete wins or loses by its HLC too. Two distinct writes with one HLC can only come from a
broken writer; they still order deterministically, by value then version vector.

Conflicts (only between writes carrying a version vector): a key's `siblings` are its writes
that no other write descends from (the maximal ones by version vector). Two or more siblings are
concurrent writes; every sibling but the winner is a losing write, which the resolver reports
(a conflict) instead of dropping silently. A later write that descends from all of them (its
writer had read them) closes the conflict.

`merge` over key states is commutative, associative and idempotent, so any interleaving and
duplication of the same writes (a record read from `orders` and again from `B.orders`) gives
the same state in every region. The stream of losers a Resolver reports on the way may differ
with the order (a conflict closed before both sides arrived is never reported); the final
state, and its losers, do not.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from gregor.hlc import version_vector
from gregor.hlc.timestamp import Timestamp
from gregor.hlc.version_vector import VersionVector


class Origin(NamedTuple):
    """Where a write was read: not part of its identity (a mirrored copy is the same write)."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class Write:
    key: bytes
    value: bytes | None  # None: a tombstone
    hlc: Timestamp
    vv: VersionVector | None = None
    origin: Origin | None = field(default=None, compare=False)

    @property
    def tombstone(self) -> bool:
        return self.value is None

    def rank(self) -> tuple[object, ...]:
        """The total order last-write-wins picks the greatest of."""
        return (
            self.hlc,
            self.value is not None,
            self.value or b"",
            self.vv is not None,
            self.vv or (),
        )


@dataclass(frozen=True)
class KeyState:
    """A key's resolved state: the winning write, and the writes no other descends from."""

    winner: Write
    siblings: frozenset[Write] = frozenset()

    @property
    def losers(self) -> frozenset[Write]:
        """The concurrent writes that did not win (none unless two or more are concurrent)."""
        if len(self.siblings) < 2:
            return frozenset()
        return self.siblings - {self.winner}


def state_of(write: Write) -> KeyState:
    return KeyState(write, frozenset({write}) if write.vv is not None else frozenset())


def maximal(writes: Iterable[Write]) -> frozenset[Write]:
    """The writes whose version vector no other write's strictly exceeds."""
    ws = list(set(writes))
    return frozenset(w for w in ws if not any(_strictly_after(o, w) for o in ws))


def _strictly_after(a: Write, b: Write) -> bool:
    assert a.vv is not None and b.vv is not None
    return a.vv != b.vv and version_vector.descends(a.vv, b.vv)


def merge(a: KeyState, b: KeyState) -> KeyState:
    """Two states of one key as one: commutative, associative, idempotent."""
    assert a.winner.key == b.winner.key, "merge is per key"
    winner = a.winner if _at_least(a.winner, b.winner) else b.winner
    siblings = a.siblings | b.siblings
    if a.siblings and b.siblings:
        siblings = maximal(siblings)
    return KeyState(winner, siblings)


def _at_least(a: Write, b: Write) -> bool:
    """a.rank() >= b.rank(), comparing the HLCs alone when they differ (nearly always)."""
    if a.hlc != b.hlc:
        return a.hlc > b.hlc
    return a.rank() >= b.rank()


def merge_views(a: dict[bytes, KeyState], b: dict[bytes, KeyState]) -> dict[bytes, KeyState]:
    """Two resolved views (key -> state) as one."""
    out = dict(a)
    for key, state in b.items():
        out[key] = merge(out[key], state) if key in out else state
    return out


class Applied(NamedTuple):
    changed: bool  # the winner changed: the resolved value is to be written
    state: KeyState
    new_losers: tuple[Write, ...]  # concurrent writes that lost, not reported before


class Resolver:
    """The resolved view of writes applied so far, and the query API over it."""

    def __init__(self) -> None:
        self._states: dict[bytes, KeyState] = {}
        self.writes = 0
        self.conflicts = 0  # losing concurrent writes reported

    def apply(self, write: Write) -> Applied:
        """Merge one write in; what changed, and which writes now lose a conflict."""
        self.writes += 1
        old = self._states.get(write.key)
        new = state_of(write) if old is None else merge(old, state_of(write))
        self._states[write.key] = new
        before = old.losers if old is not None else frozenset()
        fresh = tuple(sorted(new.losers - before, key=Write.rank))
        self.conflicts += len(fresh)
        changed = old is None or old.winner != new.winner
        return Applied(changed, new, fresh)

    def get(self, key: bytes) -> Write | None:
        """The winning write of `key` (a tombstone too), None if no write was seen."""
        state = self._states.get(key)
        return None if state is None else state.winner

    def value(self, key: bytes) -> bytes | None:
        """The resolved value of `key`; None if it was deleted or never written."""
        winner = self.get(key)
        return None if winner is None else winner.value

    def values(self) -> dict[bytes, bytes]:
        """Every key's resolved value, deleted keys left out."""
        states = self._states.copy()
        return {k: s.winner.value for k, s in states.items() if s.winner.value is not None}

    def states(self) -> dict[bytes, KeyState]:
        """Every key's state. Like `values`, safe while another thread applies writes (one
        `dict.copy`, which holds the GIL throughout: the keys are bytes)."""
        return self._states.copy()

    def __len__(self) -> int:
        return len(self._states)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._states)
