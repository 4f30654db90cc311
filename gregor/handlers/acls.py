"""DescribeAcls v1-3, CreateAcls v1-3, DeleteAcls v1-3 (Kafka's AclApis).

v1: pattern types (KIP-290). v2: flexible. v3: USER resources. v0 is not served (KIP-896).

Each first checks the caller on the CLUSTER resource (DESCRIBE for DescribeAcls, ALTER for the
writes: CLUSTER_AUTHORIZATION_FAILED), then answers SECURITY_DISABLED when the node has no
authorizer (`authorizer.class.name` empty), as Kafka does. DescribeAcls reads this node's
metadata image; a filter with an UNKNOWN element is INVALID_REQUEST. CreateAcls and DeleteAcls
are metadata writes (controller/acls.py): forwarded to the active controller off it
(controller_apis.FORWARDED), answered once committed (controller_writes.py).
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.controller_writes import answer_after_commit, not_controller
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse
from gregor.security.acls import ALTER, DESCRIBE, AclBinding, AclFilter, check_filter

log = logging.getLogger("gregor.admin")


def _cluster_refused(ctx: RequestContext, operation: int) -> KafkaError | None:
    if not ctx.authorize_cluster(operation):
        name = api_keys.name_of(ctx.header.request_api_key)
        return KafkaError(errors.CLUSTER_AUTHORIZATION_FAILED, f"Request {name} is not authorized.")
    if ctx.services.authorizer is None:
        return KafkaError(errors.SECURITY_DISABLED, "No Authorizer is configured.")
    return None


def _filter(f: Any) -> AclFilter:
    return AclFilter(
        f.resource_type_filter,
        f.resource_name_filter,
        f.pattern_type_filter,
        f.principal_filter,
        f.host_filter,
        f.operation,
        f.permission_type,
    )


@handles(api_keys.DESCRIBE_ACLS)
def describe_acls(ctx: RequestContext, request: Any) -> Any:
    refused = _cluster_refused(ctx, DESCRIBE)
    if refused is not None and refused.code == errors.SECURITY_DISABLED:
        refused = KafkaError(refused.code, "No Authorizer is configured on the broker")
    try:
        if refused is not None:
            raise refused
        f = _filter(request)
        check_filter(f)
    except KafkaError as exc:
        return DescribeAclsResponse(error_code=exc.code, error_message=exc.message, resources=[])
    by_resource: dict[tuple[int, str, int], list[Any]] = {}
    for acl in ctx.services.store.image.acls.values():
        if f.matches(acl):
            by_resource.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(
                DescribeAclsResponse.AclDescription(
                    principal=acl.principal,
                    host=acl.host,
                    operation=acl.operation,
                    permission_type=acl.permission,
                )
            )
    resources = [
        DescribeAclsResponse.DescribeAclsResource(
            resource_type=rtype, resource_name=name, pattern_type=pattern, acls=acls
        )
        for (rtype, name, pattern), acls in sorted(by_resource.items())
    ]
    return DescribeAclsResponse(error_code=errors.NONE, error_message="", resources=resources)


@handles(api_keys.CREATE_ACLS)
def create_acls(ctx: RequestContext, request: Any) -> Any:
    Result = CreateAclsResponse.AclCreationResult
    services = ctx.services
    before = services.store.last_appended
    try:
        refused = _cluster_refused(ctx, ALTER) or not_controller(ctx)
        if refused is not None:
            raise refused
        bindings = [
            AclBinding(
                c.resource_type,
                c.resource_name,
                c.resource_pattern_type,
                c.principal,
                c.host,
                c.operation,
                c.permission_type,
            )
            for c in request.creations
        ]
        outcomes = services.admin.controller.create_acls(bindings)
    except KafkaError as exc:
        results = [
            Result(error_code=exc.code, error_message=exc.message) for _ in request.creations
        ]
        return CreateAclsResponse(results=results)
    results = [
        Result(error_code=errors.NONE, error_message="")  # as Kafka: left at its default
        if e is None
        else Result(error_code=e.code, error_message=e.message)
        for e in outcomes
    ]
    made = [b for b, e in zip(bindings, outcomes, strict=True) if e is None]
    if made:
        log.info("ACLs created (from %s): %s", ctx.peer, "; ".join(str(b) for b in made))
    ok = [r for r in results if r.error_code == errors.NONE]
    return answer_after_commit(ctx, before, CreateAclsResponse(results=results), ok)


@handles(api_keys.DELETE_ACLS)
def delete_acls(ctx: RequestContext, request: Any) -> Any:
    FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
    Matching = DeleteAclsResponse.DeleteAclsMatchingAcl
    services = ctx.services
    before = services.store.last_appended
    try:
        refused = _cluster_refused(ctx, ALTER) or not_controller(ctx)
        if refused is not None:
            raise refused
        outcomes = services.admin.controller.delete_acls([_filter(f) for f in request.filters])
    except KafkaError as exc:
        results = [
            FilterResult(error_code=exc.code, error_message=exc.message, matching_acls=[])
            for _ in request.filters
        ]
        return DeleteAclsResponse(filter_results=results)
    results = []
    for outcome in outcomes:
        if isinstance(outcome, KafkaError):
            results.append(
                FilterResult(
                    error_code=outcome.code, error_message=outcome.message, matching_acls=[]
                )
            )
            continue
        matching = [
            Matching(
                error_code=errors.NONE,
                error_message=None,
                resource_type=a.resource_type,
                resource_name=a.name,
                pattern_type=a.pattern_type,
                principal=a.principal,
                host=a.host,
                operation=a.operation,
                permission_type=a.permission,
            )
            for a in outcome
        ]
        if matching:
            log.info("ACLs deleted (from %s): %s", ctx.peer, "; ".join(str(a) for a in outcome))
        results.append(
            FilterResult(error_code=errors.NONE, error_message=None, matching_acls=matching)
        )
    ok = [m for r in results for m in r.matching_acls]
    return answer_after_commit(ctx, before, DeleteAclsResponse(filter_results=results), ok)
