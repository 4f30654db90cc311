"""DescribeConfigs v1-4, AlterConfigs v0-2, IncrementalAlterConfigs v0-1: topic and broker
configs.

DescribeConfigs: v1 include_synonyms and config_source; v3 config_type and documentation;
v4 flexible. AlterConfigs replaces a resource's whole dynamic config set; IncrementalAlter-
Configs applies SET / DELETE / APPEND / SUBTRACT (v1 flexible). Resources: TOPIC (2) by name,
BROKER (4) by node id ("" for the cluster-wide default). Changes are persisted and applied to
live partitions at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.controller_writes import answer_after_commit, not_controller
from gregor.handlers.registry import handles
from gregor.metadata import config_defs, listener_configs
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import (
    AlterConfigsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)
from gregor.security import acls
from gregor.security.acls import ALTER_CONFIGS, DESCRIBE_CONFIGS

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8  # config resource types


def _check_broker(ctx: RequestContext, name: str) -> None:
    if name not in ("", str(ctx.services.node_id)):
        raise KafkaError(
            errors.INVALID_REQUEST,
            f"Unexpected broker id, expected {ctx.services.node_id} or empty string, but received {name}",
        )


def _check_authorized(ctx: RequestContext, operation: int, resource_type: int, name: str) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or, for a
    broker, on the cluster (CLUSTER_AUTHORIZATION_FAILED), as Kafka's ConfigHelper."""
    if resource_type == TOPIC:
        if not ctx.authorize(operation, acls.TOPIC, name):
            raise KafkaError(errors.TOPIC_AUTHORIZATION_FAILED, f"Topic {name} is not authorized.")
    elif resource_type in (BROKER, BROKER_LOGGER) and not ctx.authorize_cluster(operation):
        raise KafkaError(errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster is not authorized.")


def _check_broker_name(name: str) -> None:
    """An alter names any broker ("" for the cluster-wide default): it is forwarded to the active
    controller, which keeps every broker's configs (Kafka's ControllerConfigurationValidator)."""
    if name and not (name.isdigit() and name.isascii()):
        raise KafkaError(
            errors.INVALID_REQUEST, f"broker name {name!r} is not a broker id (0 or more)"
        )


@handles(api_keys.DESCRIBE_CONFIGS)
def describe_configs(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    results = []
    R = DescribeConfigsResponse
    for res in request.resources:
        out = R.DescribeConfigsResult(
            error_code=errors.NONE,
            resource_type=res.resource_type,
            resource_name=res.resource_name,
            configs=[],
        )
        try:
            _check_authorized(ctx, DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
            if res.resource_type == TOPIC:
                info = services.store.topics.get(res.resource_name)
                if info is None:
                    raise KafkaError(
                        errors.UNKNOWN_TOPIC_OR_PARTITION,
                        f"Topic '{res.resource_name}' does not exist",
                    )
                names = list(config_defs.TOPIC_CONFIGS)
                resolve: Callable[[str], config_defs.Resolved] = functools.partial(
                    config_defs.resolve_topic_config,
                    topic=info.configs,
                    static=services.static_config,
                    dynamic=services.store.dynamic(services.node_id),
                )
            elif res.resource_type == BROKER:
                _check_broker(ctx, res.resource_name)
                names, resolve = _broker_configs(ctx, res.resource_name)
            else:
                raise KafkaError(
                    errors.INVALID_REQUEST, f"Unsupported resource type {res.resource_type}"
                )
            if res.configuration_keys is not None:
                names = [n for n in names if n in set(res.configuration_keys)]
            for n in names:
                r = resolve(n)
                out.configs.append(
                    R.DescribeConfigsResourceResult(
                        name=n,
                        value=None if r.sensitive else r.value,
                        read_only=r.read_only,
                        config_source=r.source,
                        is_sensitive=r.sensitive,
                        synonyms=[
                            R.DescribeConfigsSynonym(
                                name=sn, value=None if r.sensitive else sv, source=ss
                            )
                            for sn, sv, ss in r.synonyms
                        ]
                        if request.include_synonyms
                        else [],
                        config_type=r.type,
                        documentation=None,
                    )
                )
        except KafkaError as exc:
            out.error_code, out.error_message, out.configs = exc.code, exc.message, []
        results.append(out)
    return DescribeConfigsResponse(results=results)


def _broker_configs(
    ctx: RequestContext, resource_name: str
) -> tuple[list[str], Callable[[str], config_defs.Resolved]]:
    """The config names a broker's description lists (the catalogue, then the per-listener
    configs that are set: connection limits, ssl.*, sasl.*) and how each resolves."""
    services = ctx.services
    static = services.static_config
    # the cluster-wide default ("") is described without this node's own layer
    dynamic = (
        services.store.broker_configs_of("")
        if resource_name == ""
        else services.store.dynamic(services.node_id)
    )
    listener_keys = listener_configs.set_listener_configs(static, dynamic)

    def resolve(name: str) -> config_defs.Resolved:
        if name in config_defs.BROKER_CONFIGS:
            return config_defs.resolve_broker_config(name, static, dynamic)
        return listener_configs.resolve_listener_config(name, static, dynamic)

    return sorted(config_defs.BROKER_CONFIGS) + listener_keys, resolve


def _alter(ctx: RequestContext, request: Any, incremental: bool, response_cls: Any) -> Any:
    services = ctx.services
    responses = []
    changed = False
    refused = not_controller(ctx)
    before = services.store.last_appended
    for res in request.resources:
        r = response_cls.AlterConfigsResourceResponse(
            error_code=errors.NONE,
            error_message=None,  # Kafka's null on success (the schema's default is "")
            resource_type=res.resource_type,
            resource_name=res.resource_name,
        )
        try:
            _check_authorized(ctx, ALTER_CONFIGS, res.resource_type, res.resource_name)
            if refused is not None:
                raise refused
            if res.resource_type == TOPIC:
                if incremental:
                    ops = [(c.name, c.config_operation, c.value) for c in res.configs]
                    services.admin.incremental_alter_topic_configs(
                        res.resource_name, ops, request.validate_only
                    )
                else:
                    services.admin.alter_topic_configs(
                        res.resource_name,
                        {c.name: c.value for c in res.configs},
                        request.validate_only,
                    )
            elif res.resource_type == BROKER:
                _check_broker_name(res.resource_name)
                if incremental:
                    ops = [(c.name, c.config_operation, c.value) for c in res.configs]
                    services.admin.alter_broker_configs(
                        res.resource_name, {}, request.validate_only, incremental_ops=ops
                    )
                else:
                    services.admin.alter_broker_configs(
                        res.resource_name,
                        {c.name: c.value for c in res.configs},
                        request.validate_only,
                    )
            elif res.resource_type == BROKER_LOGGER:
                raise KafkaError(errors.INVALID_REQUEST, "Broker logger configs are not supported")
            else:
                raise KafkaError(
                    errors.INVALID_REQUEST, f"Unsupported resource type {res.resource_type}"
                )
            changed = changed or not request.validate_only
        except KafkaError as exc:
            r.error_code, r.error_message = exc.code, exc.message
        responses.append(r)
    if changed:
        services.apply_metadata()
    ok = [r for r in responses if r.error_code == errors.NONE]
    return answer_after_commit(ctx, before, response_cls(responses=responses), ok)


@handles(api_keys.ALTER_CONFIGS)
def alter_configs(ctx: RequestContext, request: Any) -> Any:
    return _alter(ctx, request, False, AlterConfigsResponse)


@handles(api_keys.INCREMENTAL_ALTER_CONFIGS)
def incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return _alter(ctx, request, True, IncrementalAlterConfigsResponse)
