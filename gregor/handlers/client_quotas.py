"""DescribeClientQuotas v0-1 and AlterClientQuotas v0-1: client quotas (KIP-546).

Describe is answered from this node's metadata image. Alter is a metadata write: a broker in a
quorum forwards it to the active controller (Envelope, KIP-590), which turns it into
ClientQuotaRecords (controller/client_quotas.py has the rules) and answers once they are
committed. Every broker's quota gate (broker/quota_gate.py) follows the image.
"""

from __future__ import annotations

from typing import Any

from gregor.controller.client_quotas import Alteration, Component, Op, describe
from gregor.handlers.context import RequestContext
from gregor.handlers.controller_writes import answer_after_commit, not_controller
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import AlterClientQuotasResponse, DescribeClientQuotasResponse
from gregor.security.acls import ALTER_CONFIGS, DESCRIBE_CONFIGS


@handles(api_keys.DESCRIBE_CLIENT_QUOTAS)
def describe_client_quotas(ctx: RequestContext, request: Any) -> Any:
    components = [Component(c.entity_type, c.match_type, c.match) for c in request.components]
    code, message, found = describe(ctx.services.store.image, components, request.strict)
    if not ctx.authorize_cluster(DESCRIBE_CONFIGS):  # as Kafka: DESCRIBE_CONFIGS on the cluster
        code, message, found = (
            errors.CLUSTER_AUTHORIZATION_FAILED,
            "Request DescribeClientQuotas is not authorized.",
            None,
        )
    R = DescribeClientQuotasResponse
    entries = None
    if found is not None:
        entries = [
            R.EntryData(
                entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in ent],
                values=[R.ValueData(key=k, value=v) for k, v in sorted(values.items())],
            )
            for ent, values in found
        ]
    # As Kafka: a success leaves the message at its default, "".
    message = message if code else ""
    return R(throttle_time_ms=0, error_code=code, error_message=message, entries=entries)


@handles(api_keys.ALTER_CLIENT_QUOTAS)
def alter_client_quotas(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    alterations = [
        Alteration(
            entity=[(e.entity_type, e.entity_name) for e in entry.entity],
            ops=[Op(o.key, o.value, o.remove) for o in entry.ops],
        )
        for entry in request.entries
    ]
    refused = not_controller(ctx)
    before = services.store.last_appended
    outcome: list[tuple[Any, int, str | None]]
    if not ctx.authorize_cluster(ALTER_CONFIGS):  # as Kafka: ALTER_CONFIGS on the cluster
        message = "Request AlterClientQuotas is not authorized."
        outcome = [(a.entity, errors.CLUSTER_AUTHORIZATION_FAILED, message) for a in alterations]
    elif refused is not None:
        outcome = [(a.entity, refused.code, refused.message) for a in alterations]
    else:
        outcome = services.admin.alter_client_quotas(alterations, request.validate_only)
    R = AlterClientQuotasResponse
    entries = [
        R.EntryData(
            error_code=code,
            error_message=message,
            entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in ent],
        )
        for ent, code, message in outcome
    ]
    ok = [e for e in entries if e.error_code == errors.NONE]
    return answer_after_commit(ctx, before, R(throttle_time_ms=0, entries=entries), ok)
