"""Coordinator answers held until their records are replicated (Kafka's DeferredEventQueue, as
its CoordinatorRuntime uses it): delayed operations of the purgatory (replication/purgatory.py).

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
held in (NOT_COORDINATOR), when the coordinator unloads it (`unload`: NOT_COORDINATOR, and the
client looks for the new coordinator), or at `deadline_ms` (`expire`: the caller's timeout
code). A deadline of None waits as long as the leadership lasts.

The partition's events (appends, HW moves, leadership changes) drive the releases through the
purgatory; `expire` is the coordinator's `poll`, whose next deadline includes
`next_deadline_ms()`. No event loop and no clock here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gregor.protocol.errors import BY_NAME
from gregor.replication.partition import Partition
from gregor.replication.purgatory import DelayedOperation, DelayedOperationPurgatory

log = logging.getLogger("gregor.coordinator")

NOT_COORDINATOR = BY_NAME["NOT_COORDINATOR"].code


class HeldAnswer(DelayedOperation):
    """One answer, released once the HW of `partition` reaches `offset` in `leader_epoch`."""

    __slots__ = (
        "partition",
        "leader_epoch",
        "offset",
        "release",
        "fail",
        "code",
        "holder",
        "group",
    )

    def __init__(
        self,
        holder: HeldAnswers,
        index: int,
        partition: Partition,
        offset: int,
        release: Callable[[], object],
        fail: Callable[[int], object],
        deadline_ms: int | None,
    ) -> None:
        super().__init__(deadline_ms)
        self.partition = partition
        self.leader_epoch = partition.leader_epoch
        self.offset = offset
        self.release = release
        self.fail = fail
        self.code: int | None = None  # set: fail with it
        self.holder = holder
        self.group = holder._held.setdefault(index, {})  # its partition's held answers
        self.group[self] = None

    def try_complete(self) -> bool:
        p = self.partition
        if not p.is_leader or p.leader_epoch != self.leader_epoch:
            self.code = NOT_COORDINATOR
            return True
        return p.high_watermark >= self.offset

    def on_expiration(self) -> None:
        p = self.partition
        log.info(
            "%s: an answer waited for the high watermark to reach %d until its deadline "
            "(high watermark %d, ISR %s)",
            p.name, self.offset, p.high_watermark, p.isr,
        )  # fmt: skip
        self.code = self.holder.timeout_code

    def on_complete(self) -> None:
        self.group.pop(self, None)
        if self.code is None:
            self.release()
        else:
            self.fail(self.code)


class HeldAnswers:
    """The held answers of one coordinator, per partition index (module docstring)."""

    def __init__(self) -> None:
        self.purgatory = DelayedOperationPurgatory("coordinator answers")
        self.timeout_code = NOT_COORDINATOR  # `expire` says which
        self._held: dict[int, dict[HeldAnswer, None]] = {}

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
        first = next(iter(self._held.get(index, ())), None)  # all of them share its partition
        if first is not None and first.partition is not partition:
            self.unload(index)  # another replica object: the partition was made again here
        # A HW move or leadership change not seen yet: the earlier answers go first.
        self.purgatory.check_and_complete(partition)
        end, hw = partition.log.log_end_offset, partition.high_watermark
        if hw >= end:
            release()
            return True
        held = HeldAnswer(self, index, partition, end, release, fail, deadline_ms)
        self.purgatory.watch(held, [partition])
        return False

    def waiting(self, index: int) -> int:
        """How many answers of the partition are held."""
        return len(self._held.get(index, ()))

    def unload(self, index: int, code: int = NOT_COORDINATOR) -> None:
        """The partition is no longer coordinated here: fail every held answer with `code`."""
        for held in list(self._held.pop(index, ())):
            held.code = code
            self.purgatory.force_complete(held)

    def expire(self, now_ms: int, code: int) -> None:
        """Fail, with `code`, the held answers whose deadline has passed."""
        self.timeout_code = code
        self.purgatory.expire(now_ms)

    def next_deadline_ms(self) -> int | None:
        return self.purgatory.next_deadline_ms()
