"""acks=all writes waiting for the high watermark (Kafka's DelayedProduce): a Produce's writes
appended here but not yet on every ISR member wait in the purgatory (replication/purgatory.py),
woken by the partitions' high-watermark moves and leadership changes (`Partition.commits`: not
by the appends that leave the high watermark where it was), up to the request's
timeout_ms. Each write's answer is filled into its partition's response in place: NONE once the
high watermark passes it, NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum,
NOT_LEADER_OR_FOLLOWER once the partition is no longer led here in the epoch it was appended in
(`Partition.acks_all_status`), REQUEST_TIMED_OUT at the timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.protocol import errors
from gregor.replication.partition import Partition
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperation


@dataclass(slots=True)
class AwaitingWrite:
    """An acks=all write appended here, waiting for the high watermark to pass it."""

    response: Any  # its PartitionProduceResponse, completed in place
    partition: Partition
    required_offset: int  # its last offset + 1
    leader_epoch: int  # the epoch it was appended in


def settle(waiting: AwaitingWrite) -> bool:
    """True once the write's answer is known (filled into its response)."""
    code = waiting.partition.acks_all_status(waiting.required_offset, waiting.leader_epoch)
    if code is None:
        return False
    if code != errors.NONE:
        _fail(
            waiting,
            code,
            f"{waiting.partition.name}: {errors.name_of(code)} while waiting for the ISR",
        )
    return True


def _fail(waiting: AwaitingWrite, code: int, message: str) -> None:
    r = waiting.response
    r.error_code, r.error_message = code, message
    r.base_offset = r.log_append_time_ms = r.log_start_offset = -1


class DelayedProduce(DelayedOperation):
    """The acks=all writes of one request waiting for the high watermark (Kafka's
    DelayedProduce): complete once every write is settled; at the request's timeout the
    others get REQUEST_TIMED_OUT. `answer` gets the response."""

    __slots__ = ("response", "awaiting", "timeout_ms", "answer")

    def __init__(
        self, response: Any, awaiting: list[AwaitingWrite], timeout_ms: int, now_ms: int
    ) -> None:
        DelayedOperation.__init__(self, now_ms + timeout_ms if timeout_ms > 0 else now_ms)
        self.response = response
        self.awaiting = awaiting
        self.timeout_ms = timeout_ms
        self.answer = Pending("produce")

    def try_complete(self) -> bool:
        left = []  # (a loop: cheaper than a comprehension at each high watermark move)
        for w in self.awaiting:
            if not settle(w):
                left.append(w)
        self.awaiting = left
        return not left

    def on_expiration(self) -> None:
        for waiting in self.awaiting:
            _fail(
                waiting,
                errors.REQUEST_TIMED_OUT,
                f"{waiting.partition.name}: the ISR did not reach offset "
                f"{waiting.required_offset - 1} within {self.timeout_ms} ms",
            )

    def on_complete(self) -> None:
        # A completed operation stays in the purgatory's timer heap until its deadline comes up
        # or the heap is compacted: let go of the response and its writes now (the caller has
        # `answer`), so they are freed once sent rather than walked by the garbage collector.
        response, answer = self.response, self.answer
        del self.response, self.awaiting, self.answer
        answer.complete(response)


def delay(
    ctx: RequestContext,
    response: Any,
    awaiting: list[AwaitingWrite],
    timeout_ms: int,
    *,
    just_checked: bool = False,
    now_ms: int | None = None,
) -> Any:
    """`response` once every acks=all write of the request is settled, or at its timeout: now
    if it can be (the response), else a Pending of it, parked in the purgatory.
    `just_checked`: the caller found each write unsettled right after its append, and nothing
    run since can settle one (the request's later appends move only their own partitions'
    high watermarks; a follower's Fetch, an ISR change or a leadership change come as events),
    so it is parked without being tried again. `now_ms`: the request's time, if read already."""
    if now_ms is None:
        now_ms = ctx.services.now_ms()
    op = DelayedProduce(response, awaiting, timeout_ms, now_ms)
    purgatory = ctx.services.purgatory
    if timeout_ms <= 0:  # no time to wait: what is not settled now has timed out
        if not op.try_complete():
            op.on_expiration()
        return response
    keys: dict[Any, None] = {}  # (in order, once each)
    for w in awaiting:
        keys[w.partition.commits] = None
    if just_checked:
        purgatory.watch(op, keys)
    elif purgatory.try_complete_else_watch(op, keys):
        return response
    return op.answer
