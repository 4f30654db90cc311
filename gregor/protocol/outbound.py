"""What a sans-I/O core hands its driver: the requests to send now and when to poll it again.

    result = core.poll(now_ms)                 # Poll(outbound=[...], next_deadline_ms=...)
    for out in result.outbound:                # the driver sends each, then calls
        core.on_response(out, answer, now_ms)  # or core.on_error(out, exc, now_ms)

An `Outbound` names its destination (a node id, or None for the active controller, which the
driver's channel finds), the API and version, the request body, and what the core wants back
with the answer (`context`: the partitions a request carries, a session, ...). Cores never
read a clock or open a socket; a `Poll` with `next_deadline_ms` None waits for new input
(the core calls its `wakeup` then).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True, eq=False)
class Outbound:
    """One request a core wants sent. Compared by identity: each is one send."""

    api_key: int
    version: int
    body: Any
    destination: int | None = None  # a node id; None: the active controller
    timeout_ms: int | None = None  # None: the channel's request timeout
    address: tuple[str, int] | None = None  # where the destination listens, when the core knows
    context: Any = None  # the core's own note, handed back with the answer


@dataclass(frozen=True, slots=True)
class Poll:
    """The requests to send now, and when to poll again (None: when woken)."""

    outbound: list[Outbound] = field(default_factory=list)
    next_deadline_ms: int | None = None


def earliest(*deadlines: int | None) -> int | None:
    """The earliest of the given deadlines (None: none)."""
    known = [d for d in deadlines if d is not None]
    return min(known) if known else None


def unique_batches(items: Iterable[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """Split `items` (in order) into as few lists as possible with no key twice in one: a
    response names its entries by that key (WriteTxnMarkers by producer id, AddPartitionsToTxn
    by transactional id), so one request must not hold two entries of one key."""
    batches: list[list[T]] = []
    seen: list[set[Hashable]] = []
    for item in items:
        k = key(item)
        for batch, keys in zip(batches, seen, strict=True):
            if k not in keys:
                batch.append(item)
                keys.add(k)
                break
        else:
            batches.append([item])
            seen.append({k})
    return batches
