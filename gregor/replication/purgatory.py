"""The purgatory of delayed operations (Kafka's DelayedOperationPurgatory): requests that cannot
be answered yet, woken by events on the partitions they watch, expired at their deadline.

    op = DelayedProduce(...)                          # a DelayedOperation
    purgatory.try_complete_else_watch(op, [partition])  # done now, or parked
    purgatory.expire(now_ms)                          # the driver, at next_deadline_ms()

An operation says when it can complete (`try_complete`, a check with no side effect on others),
what completing does (`on_complete`, run exactly once), and what its deadline changes first
(`on_expiration`). Its watch keys are partitions, or anything with `watch`/`unwatch` whose
callbacks fire on a change: a partition calls them on an append, a high watermark move and a
leadership change. Each key has one watcher here, whatever the number of operations on it,
subscribed while some operation watches it. When the last one leaves (an event completed it, or
anything else), the watcher stays until the key's next event (or a sweep of such idle keys, run
once they outnumber the watched ones): a session's Fetch parks on the same partitions again and
again, and an acks=all Produce on the same partition, so keeping their watchers saves making and
removing one per key per request. A key that goes away (a partition removed, or no longer led
here) has an event as it does, which lets its idle watcher go.

Invariants:
- `on_complete` runs once per operation: on an event (`try_complete` said yes), at its
  deadline (after `on_expiration`), or when forced (`force_complete`).
- A completed operation watches nothing: it leaves every key's list at once (a key's own
  watcher may stay a while, see above; it then finds no operation to try).
- On one key, operations are tried in the order they were watched, so answers that depend on
  one offset order (a coordinator's held answers) complete in that order.
- No clock and no event loop: time comes in as `now_ms`; a partition event carries none, so
  `try_complete` needs none. `wakeup` (if set) is called when a deadline earlier than the one
  `next_deadline_ms` last gave appears, so a driver sleeping until then can reschedule.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

log = logging.getLogger("gregor.purgatory")
MAX_PASSES = 100  # over one key's operations in one event (each completion may cause one more)
IDLE_SWEEP = 1024  # keys left idle before a sweep lets go of their watchers (at least)


class Watchable(Protocol):
    """A watch key: calls its watchers (once each: they subscribe again) when it changes."""

    def watch(self, watcher: Callable[[], None]) -> None: ...

    def unwatch(self, watcher: Callable[[], None]) -> None: ...


class DelayedOperation:
    """One operation waiting in a purgatory (Kafka's DelayedOperation). `deadline_ms` None:
    it waits until an event completes it or it is forced."""

    __slots__ = ("deadline_ms", "completed", "_parked", "_lists")

    def __init__(self, deadline_ms: int | None) -> None:
        self.deadline_ms = deadline_ms
        self.completed = False
        self._parked = False
        self._lists: list[_WatchList] = []

    def try_complete(self) -> bool:
        """True if the operation can complete now (the purgatory then runs `on_complete`)."""
        raise NotImplementedError

    def try_complete_after(self, key: Watchable) -> bool:
        """`try_complete` after an event on `key`: an operation watching many keys may look
        at that one only, when the others cannot have changed what it waits for."""
        return self.try_complete()

    def on_complete(self) -> None:
        """Answer: runs once, after `try_complete` said yes, at the deadline, or when forced."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """The deadline passed before completion: runs just before `on_complete`."""


class _WatchList:
    """The operations watching one key, in the order they were watched, and the one watcher
    subscribed to the key for them."""

    __slots__ = ("key", "ops", "subscribed", "checking", "again", "purgatory")

    def __init__(self, purgatory: DelayedOperationPurgatory, key: Watchable) -> None:
        self.purgatory = purgatory
        self.key = key
        self.ops: dict[DelayedOperation, None] = {}  # insertion-ordered
        self.subscribed = False
        self.checking = False
        self.again = False

    def subscribe(self) -> None:
        if not self.subscribed:
            self.subscribed = True
            self.key.watch(self.on_event)

    def on_event(self) -> None:
        """The key changed (its one-shot call of our watcher): watch again, and check; or, if
        no operation has watched the key since its last event, let it go."""
        self.subscribed = False
        if not self.ops:
            self.purgatory._maybe_drop(self)
            return
        self.subscribe()  # before the pass: an event caused by the pass is seen
        self.check()

    def check(self) -> None:
        """Try the operations in order. An event during the pass (an answer that appends to
        the same partition) makes another pass, after this one."""
        if self.checking:
            self.again = True
            return
        self.checking = True
        purgatory, key = self.purgatory, self.key
        try:
            self.again = True
            passes = 0
            while self.again and passes < MAX_PASSES:
                self.again = False
                for op in list(self.ops):
                    if not op.completed:
                        purgatory._try(op, key)
                passes += 1
            if self.again:  # checks that cause events on their own key: wait for the next
                log.error("%s: %d passes over %r in one event", purgatory.name, passes, key)
        finally:
            self.checking = False
        if not self.ops:  # (its watcher stays until the key's next event: see the docstring)
            purgatory._went_idle()

    def remove(self, op: DelayedOperation) -> None:
        ops = self.ops
        ops.pop(op, None)
        if not ops and not self.checking:
            self.purgatory._went_idle()


class DelayedOperationPurgatory:
    def __init__(self, name: str) -> None:
        self.name = name
        self._lists: dict[Watchable, _WatchList] = {}
        self._timeouts: list[tuple[int, int, DelayedOperation]] = []  # a heap; done ones stay
        self._order = itertools.count()
        self._delayed = 0
        self._planned_ms: int | None = None  # what next_deadline_ms last said
        self._emptied = 0  # keys left without operations since the last sweep
        self.wakeup: Callable[[], None] | None = None

    # -- parking ----------------------------------------------------------------------------

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Watchable]) -> bool:
        """Complete `op` now if it can (True); else watch `keys` for it (False)."""
        if self._try(op):
            return True
        self.watch(op, keys)
        return False

    def watch(self, op: DelayedOperation, keys: Iterable[Watchable]) -> None:
        """Park `op`, which its caller has just found unable to complete, on `keys`."""
        assert not op.completed and not op._parked, "an operation is parked once"
        op._parked = True
        lists, mine = self._lists, op._lists
        for key in keys:
            wl = lists.get(key)
            if wl is None:
                wl = lists[key] = _WatchList(self, key)
            ops = wl.ops
            if op not in ops:
                ops[op] = None
                mine.append(wl)
                if not wl.subscribed:
                    wl.subscribe()
        self._delayed += 1
        if op.deadline_ms is not None:
            heap = self._timeouts
            heapq.heappush(heap, (op.deadline_ms, next(self._order), op))
            if len(heap) > 1024:
                self._maybe_compact()
            if self._planned_ms is None or op.deadline_ms < self._planned_ms:
                self._planned_ms = op.deadline_ms
                if self.wakeup is not None:
                    self.wakeup()

    # -- completing -------------------------------------------------------------------------

    def check_and_complete(self, key: Watchable) -> int:
        """Try the operations watching `key` now, as an event on it would; how many completed."""
        wl = self._lists.get(key)
        if wl is None:
            return 0
        before = self._delayed
        wl.check()
        return before - self._delayed

    def force_complete(self, op: DelayedOperation) -> bool:
        """Complete `op` now, whatever `try_complete` would say; False if it already was."""
        if op.completed:
            return False
        self._complete(op)
        return True

    def expire(self, now_ms: int) -> int:
        """Complete every operation whose deadline is at or before `now_ms` (`on_expiration`,
        then `on_complete`), earliest first; how many expired."""
        expired = 0
        while self._timeouts and self._timeouts[0][0] <= now_ms:
            # (read anew each time: an answer may park an operation, and that may compact)
            _, _, op = heapq.heappop(self._timeouts)
            if op.completed:
                continue
            self._unpark(op)
            _run(op.on_expiration, op)
            _run(op.on_complete, op)
            expired += 1
        return expired

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline of a waiting operation (None: none has one)."""
        heap = self._timeouts
        while heap and heap[0][2].completed:
            heapq.heappop(heap)
        self._planned_ms = heap[0][0] if heap else None
        return self._planned_ms

    # -- what is waiting ----------------------------------------------------------------------

    def delayed(self) -> int:
        """How many operations wait (Kafka's NumDelayedOperations)."""
        return self._delayed

    def watched(self, key: Watchable) -> int:
        """How many operations watch `key`."""
        wl = self._lists.get(key)
        return len(wl.ops) if wl is not None else 0

    def keys(self) -> int:
        """How many keys operations watch."""
        return sum(1 for wl in self._lists.values() if wl.ops)

    def subscriptions(self) -> int:
        """How many keys have our watcher: those operations watch, and idle ones not yet let go."""
        return len(self._lists)

    # -- inside ---------------------------------------------------------------------------------

    def _try(self, op: DelayedOperation, key: Watchable | None = None) -> bool:
        try:
            done = op.try_complete() if key is None else op.try_complete_after(key)
        except Exception:
            log.exception("%s: checking a delayed operation failed; it waits on", self.name)
            return False
        if done:
            self._complete(op)
        return done

    def _complete(self, op: DelayedOperation) -> None:
        self._unpark(op)
        _run(op.on_complete, op)

    def _unpark(self, op: DelayedOperation) -> None:
        """Mark `op` done and take it off every key (its heap entry is dropped when reached)."""
        op.completed = True
        if op._parked:
            op._parked = False
            self._delayed -= 1
        lists, op._lists = op._lists, []
        for wl in lists:
            wl.remove(op)

    def _went_idle(self) -> None:
        """A key's last operation left it; once such keys outnumber the lists kept, let every
        idle one go (the sweep's cost is shared by as many departures as it visits keys)."""
        emptied = self._emptied = self._emptied + 1
        if emptied > IDLE_SWEEP and emptied > len(self._lists):
            self._emptied = 0
            for wl in [wl for wl in self._lists.values() if not wl.ops and not wl.checking]:
                self._maybe_drop(wl)

    def _maybe_drop(self, wl: _WatchList) -> None:
        """No operation watches the key any more: unsubscribe and forget it."""
        if wl.ops:
            return
        if wl.subscribed:
            wl.subscribed = False
            wl.key.unwatch(wl.on_event)
        if self._lists.get(wl.key) is wl:
            del self._lists[wl.key]

    def _maybe_compact(self) -> None:
        """Completed operations leave the heap when they reach its top; when they are most of
        it (answers come long before their deadlines), rebuild it from the waiting ones."""
        heap = self._timeouts
        if len(heap) > 1024 and len(heap) > 4 * self._delayed:
            self._timeouts = [e for e in heap if not e[2].completed]
            heapq.heapify(self._timeouts)


def _run(action: Callable[[], object], op: DelayedOperation) -> None:
    try:
        action()
    except Exception:
        log.exception("completing %s failed", type(op).__name__)
