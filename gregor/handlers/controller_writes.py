"""Metadata writes in a networked quorum: who may make them, and answering once they commit.

With one voter a write is committed before the admin call returns, and a handler answers at
once. With several (`store.networked`) only the active controller writes: elsewhere every
item of CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs and IncrementalAlterConfigs
gets NOT_CONTROLLER (a broker forwards them to the active controller first, KIP-590:
broker/dispatch.py; this is its answer when none came). On the active controller the admin
calls only append; `answer_after_commit` answers once the quorum has
committed what was appended (an `AwaitingCommit` in the purgatory), and turns the items that
had succeeded into NOT_CONTROLLER if leadership was lost first (the change may still be
committed by the next controller: a retry then finds it made) or REQUEST_TIMED_OUT if the
commit does not come in time.

With one voter, `answer_once_hosted` holds the answer of a request that made partitions
(CreateTopics, CreatePartitions, a Metadata or FindCoordinator that created a topic) until this
node hosts them: their files are made on a worker thread (replication/hosting.py), and the
client that made a topic may produce to it, or join a group, as soon as it is told.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.replication.pending import Pending
from gregor.replication.purgatory import DelayedOperation

NOT_CONTROLLER = errors.BY_NAME["NOT_CONTROLLER"].code
REQUEST_TIMED_OUT = errors.BY_NAME["REQUEST_TIMED_OUT"].code
COMMIT_TIMEOUT_MS = 30_000


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
    """A response waiting for the quorum to commit metadata `offset`; `answer` gets it. The
    store's `wait_committed` callback is `settle`; the purgatory expires it at its deadline."""

    __slots__ = ("offset", "response", "succeeded", "answer", "settled", "error")

    def __init__(
        self, offset: int, response: Any, succeeded: Sequence[Any], deadline_ms: int
    ) -> None:
        super().__init__(deadline_ms)
        self.offset, self.response, self.succeeded = offset, response, succeeded
        self.answer = Pending("metadata write")
        self.settled = False
        self.error: tuple[int, str] | None = None

    def settle(self, error: KafkaError | None) -> None:
        """The commit came (None), or will not here (NOT_CONTROLLER, the store closing)."""
        self.settled = True
        if error is not None and self.error is None:
            self.error = error.code, error.message

    def try_complete(self) -> bool:
        return self.settled

    def on_expiration(self) -> None:
        self.error = REQUEST_TIMED_OUT, f"metadata offset {self.offset} was not committed in time"

    def on_complete(self) -> None:
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
    op = AwaitingCommit(offset, response, succeeded, ctx.services.now_ms() + COMMIT_TIMEOUT_MS)
    purgatory = ctx.services.purgatory

    def committed(error: KafkaError | None) -> None:
        op.settle(error)
        purgatory.force_complete(op)

    store.wait_committed(offset, committed)  # may call back at once
    if op.completed:
        return response
    purgatory.watch(op, ())
    return op.answer


HOSTING_TIMEOUT_MS = 30_000


class AwaitingHosting(DelayedOperation):
    """A response waiting for this node to host the partitions a request made; `answer` gets
    it. At the deadline it is answered as it is (the topics exist; a partition not hosted yet
    answers a retriable error until it is)."""

    __slots__ = ("build", "answer", "hosted")

    def __init__(self, build: Callable[[], Any], deadline_ms: int) -> None:
        super().__init__(deadline_ms)
        self.build = build
        self.answer = Pending("new partitions hosted")
        self.hosted = False

    def try_complete(self) -> bool:
        return self.hosted

    def on_complete(self) -> None:
        self.answer.complete(self.build())


def answer_once_hosted(
    ctx: RequestContext,
    topics: Collection[str],
    response: Any,
    again: Callable[[], Any] | None = None,
) -> Any:
    """`response` now in a networked quorum (its commit is what a client waits for there, as
    Kafka's) or when this node hosts every partition of `topics` it is a replica of; else a
    Pending of it (of `again()`, the request handled anew, if given), completed once it does."""
    services = ctx.services
    if not topics or services.store.networked or services.when_hosted is None:
        return response
    op = AwaitingHosting(again or (lambda: response), services.now_ms() + HOSTING_TIMEOUT_MS)
    purgatory = services.purgatory

    def hosted() -> None:
        op.hosted = True
        purgatory.force_complete(op)

    if services.when_hosted(topics, hosted):
        return response
    purgatory.watch(op, ())
    return op.answer
