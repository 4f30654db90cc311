"""InitProducerId v0-5: a producer id and epoch for an idempotent producer.

v2 flexible. v3 producer_id/producer_epoch (KIP-360): a producer that hit a sequence error asks
again naming its id and epoch; without a transactional id the answer is a new producer id, as
Kafka gives (epoch bumps are the transaction coordinator's). v4, v5: as v3. Transactional ids need the transaction coordinator, which this
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


@handles(api_keys.INIT_PRODUCER_ID)
def handle(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        log.warning(
            "%s asked for transactional id %r: transactions are not served yet",
            ctx.peer,
            request.transactional_id,
        )
        return InitProducerIdResponse(error_code=errors.BY_NAME["COORDINATOR_NOT_AVAILABLE"].code, producer_id=-1, producer_epoch=-1)
    # An idempotent producer (no transactional id) gets a fresh producer id every time, also when
    # it names its old id and epoch (v3+, after a sequence error), as Kafka answers.
    return InitProducerIdResponse(error_code=errors.NONE, producer_id=ctx.broker.producer_ids.next_id(), producer_epoch=0)
