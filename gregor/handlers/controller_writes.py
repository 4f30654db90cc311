"""Metadata writes in a networked quorum: who may make them, and answering once they commit.

With one voter a write is committed before the admin call returns, and a handler answers at
once. With several (`store.networked`) only the active controller writes: elsewhere every
item of CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs and IncrementalAlterConfigs
gets NOT_CONTROLLER, and the client, told the controller by Metadata's `controller_id`,
refreshes its metadata and retries there (forwarding, KIP-590, is not done yet). On the active
controller the admin calls only append; `answer_after_commit` answers once the quorum has
committed what was appended, and turns the items that had succeeded into NOT_CONTROLLER if
leadership was lost first (the change may still be committed by the next controller: a retry
then finds it made) or REQUEST_TIMED_OUT if the commit does not come in time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError

NOT_CONTROLLER = errors.BY_NAME["NOT_CONTROLLER"].code
REQUEST_TIMED_OUT = errors.BY_NAME["REQUEST_TIMED_OUT"].code
COMMIT_TIMEOUT_S = 30.0


def not_controller(ctx: RequestContext) -> KafkaError | None:
    """NOT_CONTROLLER when writes must go to another node; None when this node takes them."""
    store = ctx.broker.store
    if not store.networked or store.is_active():
        return None
    return KafkaError(
        NOT_CONTROLLER,
        f"node {ctx.broker.node_id} is not the active controller; node {store.leader_id} is",
    )


def answer_after_commit(
    ctx: RequestContext, appended_before: int, response: Any, succeeded: Sequence[Any]
) -> Any | Awaitable[Any]:
    """`response` now if nothing was appended since `appended_before` (or with one voter);
    else a coroutine answering it once committed. `succeeded`: the response items (with
    error_code and error_message) that become errors if the commit fails."""
    store = ctx.broker.store
    if not store.networked or store.last_appended == appended_before:
        return response
    offset = store.last_appended

    async def wait() -> Any:
        try:
            await asyncio.wait_for(store.wait_committed(offset), COMMIT_TIMEOUT_S)
            return response
        except KafkaError as exc:
            code, message = exc.code, exc.message
        except TimeoutError:
            code, message = REQUEST_TIMED_OUT, f"metadata offset {offset} was not committed in time"
        for item in succeeded:
            item.error_code, item.error_message = code, message
        return response

    return wait()
