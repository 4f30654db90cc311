"""InitProducerId v0-5: a producer id and epoch for an idempotent producer.

v2 flexible. v3 producer_id/producer_epoch: an idempotent producer that hit a sequence error
asks for its epoch to be bumped (KIP-360); at the epoch's limit it gets a new id. v4, v5: as v3
(v5: KIP-890 epoch bumps). Transactional ids need the transaction coordinator, which this
broker does not run yet: those requests get COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import InitProducerIdResponse

log = logging.getLogger("gregor.producer")
MAX_EPOCH = 32767


@handles(api_keys.INIT_PRODUCER_ID)
def handle(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        log.warning(
            "%s asked for transactional id %r: transactions are not served yet",
            ctx.peer,
            request.transactional_id,
        )
        return InitProducerIdResponse(error_code=errors.BY_NAME["COORDINATOR_NOT_AVAILABLE"].code, producer_id=-1, producer_epoch=-1)
    ids = ctx.broker.producer_ids
    if ctx.version >= 3 and request.producer_id >= 0 and request.producer_epoch >= 0:
        if request.producer_epoch + 1 < MAX_EPOCH:
            return InitProducerIdResponse(error_code=errors.NONE, producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1)
    return InitProducerIdResponse(error_code=errors.NONE, producer_id=ids.next_id(), producer_epoch=0)
