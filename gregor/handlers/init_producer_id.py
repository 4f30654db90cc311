"""InitProducerId v0-5: a producer id and epoch for an idempotent or a transactional producer.

v2 flexible. v3 producer_id/producer_epoch (KIP-360): a producer that hit an error asks again
naming its id and epoch (both or neither: one without the other is INVALID_REQUEST). v4
PRODUCER_FENCED (KIP-588; earlier versions get INVALID_PRODUCER_EPOCH instead). v5 as v4.

Without a transactional id the answer is a new producer id at epoch 0, every time, also when the
request names its old id and epoch, as Kafka gives. With one, the transaction coordinator
(`gregor.coordinator.txn`) answers: a new id, or the id's producer with its epoch bumped (its
open transaction, if any, aborted first: CONCURRENT_TRANSACTIONS until that is done).
"""

from __future__ import annotations

from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.groups import respond
from gregor.handlers.registry import handles
from gregor.handlers.txn import fenced_for
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import InitProducerIdResponse
from gregor.security.acls import IDEMPOTENT_WRITE, TOPIC, TRANSACTIONAL_ID, WRITE
from gregor.security.principal import principal_of


def _authorization_refusal(ctx: RequestContext, transactional_id: str | None) -> int:
    """As Kafka: a transactional producer needs WRITE on its transactional id
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent one IDEMPOTENT_WRITE on the cluster
    or WRITE on some topic (CLUSTER_AUTHORIZATION_FAILED). 0 when allowed."""
    authz = ctx.services.authorizer
    if authz is None:
        return 0
    if transactional_id is not None:
        if ctx.authorize(WRITE, TRANSACTIONAL_ID, transactional_id):
            return 0
        return errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if ctx.authorize_cluster(IDEMPOTENT_WRITE):
        return 0
    principal = str(principal_of(ctx.connection))
    if authz.current().authorize_any(principal, ctx.client_host, WRITE, TOPIC):
        return 0
    return errors.CLUSTER_AUTHORIZATION_FAILED


@handles(api_keys.INIT_PRODUCER_ID)
def handle(ctx: RequestContext, request: Any) -> Any:
    b = ctx.services
    v = ctx.version
    producer_id, producer_epoch = (
        (request.producer_id, request.producer_epoch) if v >= 3 else (-1, -1)
    )
    if (producer_id == -1) != (producer_epoch == -1):
        return InitProducerIdResponse(
            error_code=errors.INVALID_REQUEST, producer_id=-1, producer_epoch=-1
        )
    refusal = _authorization_refusal(ctx, request.transactional_id)
    if refusal:
        return InitProducerIdResponse(error_code=refusal, producer_id=-1, producer_epoch=-1)
    if request.transactional_id is None:
        try:
            producer_id = b.producer_ids.next_id()
        except KafkaError as exc:  # a cluster node without a block from the controller yet
            return InitProducerIdResponse(error_code=exc.code, producer_id=-1, producer_epoch=-1)
        return InitProducerIdResponse(
            error_code=errors.NONE, producer_id=producer_id, producer_epoch=0
        )
    result = b.transactions.init_producer_id(
        request.transactional_id,
        request.transaction_timeout_ms,
        producer_id,
        producer_epoch,
        b.now_ms(),
    )
    return respond(
        result,
        lambda res: InitProducerIdResponse(
            error_code=fenced_for(v, 4, res.error),
            producer_id=res.producer_id,
            producer_epoch=res.producer_epoch,
        ),
    )
