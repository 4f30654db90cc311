"""`Pending`: the answer to a request that must wait: a produce until its records are
replicated, a fetch until data arrives, a JoinGroup until the rebalance completes, a SyncGroup
until the leader's assignment is written, a metadata write until it is committed.

A handler returns one instead of a response, and the dispatcher encodes the response once it
completes. A coordinator core returns one instead of a result; later, effects carry `(pending, result)`
and the runtime calls `complete`, after the records that justify the result are in the log.
Whoever waits (a handler) registers a callback. No event loop here: the caller decides how to
wait. The runtimes also answer with one while a write is being replicated (`deferred.py`), and
`all_of` waits for several at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


class Pending:
    __slots__ = ("done", "value", "_callbacks", "what")

    def __init__(self, what: str = "") -> None:
        self.what = what
        self.done = False
        self.value: Any = None
        self._callbacks: list[Callable[[Any], object]] = []

    def complete(self, value: Any) -> bool:
        """Set the result and run the callbacks; False (and nothing changes) if already done."""
        if self.done:
            return False
        self.done = True
        self.value = value
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(value)
        return True

    def add_done_callback(self, cb: Callable[[Any], object]) -> None:
        if self.done:
            cb(self.value)
        else:
            self._callbacks.append(cb)

    def __repr__(self) -> str:
        return f"Pending({self.what}, done={self.done})"


def all_of(results: Mapping[str, Any]) -> dict[str, Any] | Pending:
    """`results` with every Pending among them replaced by its value: a dict now if none is
    left waiting, else a Pending of that dict, done when the last of them is."""
    waiting = [p for p in results.values() if isinstance(p, Pending) and not p.done]
    if not waiting:
        return {k: v.value if isinstance(v, Pending) else v for k, v in results.items()}
    combined = Pending("all of " + ", ".join(p.what for p in waiting))
    left = len(waiting)

    def one_done(_value: Any) -> None:
        nonlocal left
        left -= 1
        if left == 0:
            combined.complete(
                {k: v.value if isinstance(v, Pending) else v for k, v in results.items()}
            )

    for p in waiting:
        p.add_done_callback(one_done)
    return combined
