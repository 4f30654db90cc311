"""Coordinator answers held until their records are replicated (Kafka's DeferredEventQueue, as
its CoordinatorRuntime uses it).

A coordinator appends its records to the partition it leads and replays them into its shard at
once, but may answer only once the partition's high watermark has passed them: an answer given
earlier could be lost with the leader. So every answer (and anything else that must not happen
before the write is durable, such as sending transaction markers) goes through `answer`:

    held.answer(index, partition, release, fail, deadline_ms)

    HW >= log end      `release()` runs now (one broker: the HW is the log end after every
                       append, so nothing is ever held and nothing changes there)
    HW <  log end      held at the log end offset of that moment: the end of the write just
                       made, or of the last write an answer without records depends on (Kafka's
                       "a read waits for the last written offset"). Released when the HW reaches
                       it, in the order held, so a later answer never overtakes an earlier one.

`fail(code)` runs instead when the partition is no longer led here in the epoch the answer was
held in, or when the coordinator unloads it (`unload`: NOT_COORDINATOR, and the client looks for
the new coordinator), or at `deadline_ms` (`expire`: the caller's timeout code). A deadline of
None waits as long as the leadership lasts.

The partition's `watch` callbacks (appends, HW moves, leadership changes) drive the releases;
`expire` is the coordinator's `poll`, whose next deadline includes `next_deadline_ms()`. No event
loop and no clock here.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from gregor.protocol.errors import BY_NAME
from gregor.replication.partition import Partition

log = logging.getLogger("gregor.coordinator")

NOT_COORDINATOR = BY_NAME["NOT_COORDINATOR"].code


@dataclass(slots=True)
class _Held:
    offset: int  # released once the high watermark is at least this
    deadline_ms: int | None
    release: Callable[[], object]
    fail: Callable[[int], object]


class _Queue:
    """The held answers of one partition, in one leader epoch."""

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.leader_epoch = partition.leader_epoch
        self.held: deque[_Held] = deque()
        self.watching = False

    def current(self, p: Partition) -> bool:
        return self.partition is p and self.leader_epoch == p.leader_epoch and p.is_leader

    def watch(self) -> None:
        if self.held and not self.watching:
            self.watching = True
            self.partition.watch(self.on_change)

    def on_change(self) -> None:
        self.watching = False
        if not self.current(self.partition):
            self.fail_all(NOT_COORDINATOR)
            return
        self.release_up_to(self.partition.high_watermark)
        self.watch()

    def release_up_to(self, high_watermark: int) -> None:
        while self.held and self.held[0].offset <= high_watermark:
            _call(self.held.popleft().release)

    def fail_all(self, code: int) -> None:
        held, self.held = self.held, deque()
        for h in held:
            _call(h.fail, code)
        if self.watching:
            self.partition.unwatch(self.on_change)
            self.watching = False


def _call(action: Callable[..., object], *args: int) -> None:
    try:
        action(*args)
    except Exception:
        log.exception("releasing a coordinator answer failed")


class HeldAnswers:
    """The held answers of one coordinator, per partition index (module docstring)."""

    def __init__(self) -> None:
        self._queues: dict[int, _Queue] = {}

    def answer(
        self,
        index: int,
        partition: Partition,
        release: Callable[[], object],
        fail: Callable[[int], object],
        deadline_ms: int | None,
    ) -> bool:
        """Run `release` now if the partition's HW has reached its log end (True); else hold
        it until then (False)."""
        q = self._queues.get(index)
        if q is not None and not q.current(partition):
            self.unload(index)  # a leadership of ours that ended: its answers are void
            q = None
        end, hw = partition.log.log_end_offset, partition.high_watermark
        if hw >= end:
            if q is not None:
                q.release_up_to(hw)  # a HW move not seen yet: the earlier answers go first
            release()
            return True
        if q is None:
            q = self._queues[index] = _Queue(partition)
        q.held.append(_Held(end, deadline_ms, release, fail))
        q.watch()
        return False

    def waiting(self, index: int) -> int:
        """How many answers of the partition are held."""
        q = self._queues.get(index)
        return len(q.held) if q is not None else 0

    def unload(self, index: int, code: int = NOT_COORDINATOR) -> None:
        """The partition is no longer coordinated here: fail every held answer with `code`."""
        q = self._queues.pop(index, None)
        if q is not None:
            q.fail_all(code)

    def expire(self, now_ms: int, code: int) -> None:
        """Fail, with `code`, the held answers whose deadline has passed."""
        for q in self._queues.values():
            if not any(h.deadline_ms is not None and h.deadline_ms <= now_ms for h in q.held):
                continue
            keep: deque[_Held] = deque()
            for h in q.held:
                if h.deadline_ms is not None and h.deadline_ms <= now_ms:
                    log.info(
                        "%s: an answer waited for the high watermark to reach %d until its deadline "
                        "(high watermark %d, ISR %s)",
                        q.partition.name, h.offset, q.partition.high_watermark, q.partition.isr,
                    )  # fmt: skip
                    _call(h.fail, code)
                else:
                    keep.append(h)
            q.held = keep

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            h.deadline_ms
            for q in self._queues.values()
            for h in q.held
            if h.deadline_ms is not None
        ]
        return min(deadlines) if deadlines else None
