"""`Pending`: the answer to a request that must wait (a JoinGroup until the rebalance completes,
a SyncGroup until the leader's assignment is written).

The coordinator core returns one instead of a result; later, effects carry `(pending, result)`
and the runtime calls `complete`, after the records that justify the result are in the log.
Whoever waits (a handler) registers a callback. No event loop here: the caller decides how to
wait.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Pending:
    __slots__ = ("done", "value", "_callbacks", "what")

    def __init__(self, what: str = "") -> None:
        self.what = what
        self.done = False
        self.value: Any = None
        self._callbacks: list[Callable[[Any], None]] = []

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

    def add_done_callback(self, cb: Callable[[Any], None]) -> None:
        if self.done:
            cb(self.value)
        else:
            self._callbacks.append(cb)

    def __repr__(self) -> str:
        return f"Pending({self.what}, done={self.done})"
