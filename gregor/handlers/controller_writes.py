"""Metadata writes in a networked quorum: who may make them, and answering once they commit.

With one voter a write is committed before the admin call returns, and a handler answers at
once. With several (`store.networked`) only the active controller writes: elsewhere every
item of CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs and IncrementalAlterConfigs
gets NOT_CONTROLLER, and the client, told the controller by Metadata's `controller_id`,
refreshes its metadata and retries there (forwarding, KIP-590, is not done yet). On the active
controller the admin calls only append; `answer_after_commit` answers once the quorum has
committed what was appended (an `AwaitingCommit` in the purgatory), and turns the items that
had succeeded into NOT_CONTROLLER if leadership was lost first (the change may still be
committed by the next controller: a retry then finds it made) or REQUEST_TIMED_OUT if the
commit does not come in time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gregor.handlers.context import RequestContext
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperation

NOT_CONTROLLER = errors.BY_NAME["NOT_CONTROLLER"].code
REQUEST_TIMED_OUT = errors.BY_NAME["REQUEST_TIMED_OUT"].code
UNKNOWN_SERVER_ERROR = errors.BY_NAME["UNKNOWN_SERVER_ERROR"].code
COMMIT_TIMEOUT_MS = 30_000


class Completion(Protocol):
    """What the metadata store's `wait_committed` returns: done once the offset is committed
    (or failed with a KafkaError); its callbacks run later, never inside `add_done_callback`."""

    def done(self) -> bool: ...

    def cancel(self) -> bool: ...

    def exception(self) -> BaseException | None: ...

    def add_done_callback(self, fn: Callable[[Any], object]) -> None: ...


def not_controller(ctx: RequestContext) -> KafkaError | None:
    """NOT_CONTROLLER when writes must go to another node; None when this node takes them."""
    store = ctx.services.store
    if not store.networked or store.is_active():
        return None
    return KafkaError(
        NOT_CONTROLLER,
        f"node {ctx.services.node_id} is not the active controller; node {store.leader_id} is",
    )


class AwaitingCommit(DelayedOperation):
    """A response waiting for the quorum to commit metadata `offset`; `answer` gets it."""

    __slots__ = ("committed", "offset", "response", "succeeded", "answer", "error")

    def __init__(
        self,
        committed: Completion,
        offset: int,
        response: Any,
        succeeded: Sequence[Any],
        deadline_ms: int,
    ) -> None:
        super().__init__(deadline_ms)
        self.committed, self.offset = committed, offset
        self.response, self.succeeded = response, succeeded
        self.answer = Pending("metadata write")
        self.error: tuple[int, str] | None = None

    def try_complete(self) -> bool:
        return self.committed.done()

    def on_expiration(self) -> None:
        self.committed.cancel()
        self.error = REQUEST_TIMED_OUT, f"metadata offset {self.offset} was not committed in time"

    def on_complete(self) -> None:
        if self.error is None:
            exc = self.committed.exception()
            if isinstance(exc, KafkaError):
                self.error = exc.code, exc.message
            elif exc is not None:
                self.error = UNKNOWN_SERVER_ERROR, f"waiting for the commit failed: {exc!r}"
        if self.error is not None:
            for item in self.succeeded:
                item.error_code, item.error_message = self.error
        self.answer.complete(self.response)


def answer_after_commit(
    ctx: RequestContext, appended_before: int, response: Any, succeeded: Sequence[Any]
) -> Any:
    """`response` now with one voter, or when nothing was appended since `appended_before` and
    nothing appended before is still uncommitted; else a Pending of it, completed once the last
    offset appended is committed (as Kafka's controller answers a request that wrote nothing
    once what it read is committed: "topic exists" may rest on a creation not yet committed,
    which a lost leadership would undo). `succeeded`: the response items (with error_code and
    error_message) that become errors if the commit fails."""
    store = ctx.services.store
    offset = store.last_appended
    if not store.networked or (offset == appended_before and offset <= store.applied):
        return response
    committed: Completion = store.wait_committed(offset)
    op = AwaitingCommit(
        committed, offset, response, succeeded, ctx.services.now_ms() + COMMIT_TIMEOUT_MS
    )
    purgatory = ctx.services.purgatory
    if not purgatory.try_complete_else_watch(op, ()):
        committed.add_done_callback(lambda _done: purgatory.force_complete(op))
    return op.answer
