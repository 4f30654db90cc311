"""CreateTopics v2-7, DeleteTopics v1-6, CreatePartitions v0-3: topic administration.

CreateTopics: v1 validate_only, error_message; v4 default partitions/replication factor (-1);
v5 flexible, and the created topic's configs, partition count and replication factor in the
response (KIP-525); v7 topic_id. DeleteTopics: v4 flexible; v5 error_message; v6 topics by
name or id. CreatePartitions: v1 as v0; v2 flexible; v3 as v2.

Rules live in controller.admin; after a change the broker brings its partitions in line (with
one voter the answer waits until it hosts the new ones: controller_writes.py). A
request asking for too many partitions (controller.admin.MAX_PARTITIONS_PER_BATCH,
MAX_RECORDS_PER_USER_OP) is refused, every item POLICY_VIOLATION, before anything is placed.
A topic named twice in one request gets INVALID_REQUEST for each entry.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from gregor.controller.admin import TopicSpec
from gregor.handlers.context import RequestContext, Services
from gregor.handlers.controller_writes import (
    answer_after_commit,
    answer_once_hosted,
    not_controller,
)
from gregor.handlers.registry import handles
from gregor.metadata import config_defs
from gregor.metadata.store import TopicInfo
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)
from gregor.security.acls import ALTER, CREATE, DELETE, TOPIC

log = logging.getLogger("gregor.admin")
ZERO_UUID = uuid.UUID(int=0)


@handles(api_keys.CREATE_TOPICS)
def create_topics(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    refused = not_controller(ctx)
    before = services.store.last_appended
    counts = _counts(request.topics)
    denied = _denied(ctx, CREATE, (t.name for t in request.topics), cluster_first=True)
    specs = [_topic_spec(t) for t in request.topics if counts[t.name] == 1 and t.name not in denied]
    outcomes: list[TopicInfo | KafkaError] = (
        [refused] * len(specs)
        if refused is not None
        else services.admin.create_topics(specs, validate_only=request.validate_only)
    )
    by_name = dict(zip((s.name for s in specs), outcomes, strict=True))
    described: dict[tuple[tuple[str, str], ...], list[Any]] = {}
    results = []
    for t in request.topics:
        outcome = (
            by_name[t.name]
            if t.name in by_name
            else _unauthorized(t.name)
            if t.name in denied
            else KafkaError(
                errors.INVALID_REQUEST,
                f"Create topics request from client `{ctx.header.client_id}` contains multiple "
                f"entries for the following topics: {t.name}",
            )
        )
        results.append(_topic_result(ctx, t.name, outcome, described))
        if isinstance(outcome, TopicInfo) and not request.validate_only:
            log.info(
                "created topic %s (%d partitions) for %s", t.name, outcome.partitions, ctx.peer
            )
    if not request.validate_only:
        _apply_committed(services)
    ok = [r for r in results if r.error_code == errors.NONE]
    response = answer_after_commit(ctx, before, CreateTopicsResponse(topics=results), ok)
    made = [] if request.validate_only else [r.name for r in ok]
    return answer_once_hosted(ctx, made, response)


def _counts(topics: Any) -> dict[str, int]:
    """How often each name appears in the request (a plain dict: a Counter costs several
    times as much to build, for the one topic most requests name)."""
    counts: dict[str, int] = {}
    for t in topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    return counts


def _apply_committed(services: Services) -> None:
    """Bring the partitions hosted here in line with what the request wrote, when it is
    committed already (one voter). Networked it is only appended: the store's replay does that
    once it commits (hosting.apply_soon, after the metadata log's flush), and applying now
    would find nothing new."""
    if not services.store.networked:
        services.apply_metadata()


def _denied(
    ctx: RequestContext, operation: int, names: Any, cluster_first: bool = False
) -> set[str]:
    """The topics the caller may not do `operation` to (CreateTopics: allowed for all with
    CREATE on the cluster, as Kafka)."""
    if ctx.services.authorizer is None or (cluster_first and ctx.authorize_cluster(operation)):
        return set()
    return {n for n in names if n is not None and not ctx.authorize(operation, TOPIC, n)}


def _unauthorized(name: str) -> KafkaError:
    return KafkaError(errors.TOPIC_AUTHORIZATION_FAILED, f"Authorization failed for topic {name}.")


def _topic_spec(t: Any) -> TopicSpec:
    return TopicSpec(
        name=t.name,
        num_partitions=t.num_partitions,
        replication_factor=t.replication_factor,
        assignments={a.partition_index: list(a.broker_ids) for a in t.assignments} or None,
        configs={c.name: c.value for c in t.configs},
    )


def _topic_result(
    ctx: RequestContext,
    name: str,
    outcome: TopicInfo | KafkaError,
    described: dict[tuple[tuple[str, str], ...], list[Any]],
) -> Any:
    if isinstance(outcome, KafkaError):
        return CreateTopicsResponse.CreatableTopicResult(
            name=name,
            topic_id=ZERO_UUID,
            error_code=outcome.code,
            error_message=outcome.message or None,
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
        )
    return CreateTopicsResponse.CreatableTopicResult(
        name=name,
        topic_id=outcome.topic_id,
        error_code=errors.NONE,
        error_message=None,
        num_partitions=outcome.partitions,
        replication_factor=len(outcome.replicas[0]) if outcome.replicas else -1,
        configs=_described_configs(ctx, outcome.configs, described) if ctx.version >= 5 else None,
    )


def _described_configs(
    ctx: RequestContext,
    topic_configs: dict[str, str],
    described: dict[tuple[tuple[str, str], ...], list[Any]],
) -> list[Any]:
    """A created topic's configs as the answer lists them (v5+, KIP-525: every topic config,
    resolved). Resolved once per request for each set of topic overrides (`described`): the
    topics of one request see the same broker configs, and most share theirs (none)."""
    key = tuple(sorted(topic_configs.items()))
    configs = described.get(key)
    if configs is None:
        services = ctx.services
        static, dynamic = services.static_config, services.store.dynamic(services.node_id)
        configs = described[key] = [
            CreateTopicsResponse.CreatableTopicConfigs(
                name=r.name,
                value=r.value,
                read_only=r.read_only,
                config_source=r.source,
                is_sensitive=r.sensitive,
            )
            for r in (
                config_defs.resolve_topic_config(n, topic_configs, static, dynamic)
                for n in config_defs.TOPIC_CONFIGS
            )
        ]
    return configs


@handles(api_keys.DELETE_TOPICS)
def delete_topics(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    wanted: list[tuple[str | None, uuid.UUID]] = []
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    responses = []
    refused = not_controller(ctx)
    before = services.store.last_appended
    for name, topic_id in wanted:
        resp = DeleteTopicsResponse.DeletableTopicResult(
            name=name, topic_id=topic_id, error_code=errors.NONE
        )
        try:
            if refused is not None:
                raise refused
            if name is None:
                info = services.store.topic_by_id(topic_id)
                if info is None:
                    raise KafkaError(errors.UNKNOWN_TOPIC_ID, f"Topic id {topic_id} does not exist")
                name = resp.name = info.name
            if _denied(ctx, DELETE, (name,)):
                raise _unauthorized(name)
            info = services.admin.delete_topic(name)
            resp.topic_id = info.topic_id
            log.info("deleted topic %s for %s", name, ctx.peer)
        except KafkaError as exc:
            resp.error_code, resp.error_message = exc.code, exc.message or None
        responses.append(resp)
    _apply_committed(services)
    ok = [r for r in responses if r.error_code == errors.NONE]
    return answer_after_commit(ctx, before, DeleteTopicsResponse(responses=responses), ok)


@handles(api_keys.CREATE_PARTITIONS)
def create_partitions(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    refused = not_controller(ctx)
    before = services.store.last_appended
    counts = _counts(request.topics)
    denied = _denied(ctx, ALTER, (t.name for t in request.topics))
    wanted = [
        (t.name, t.count, [list(a.broker_ids) for a in t.assignments] if t.assignments else None)
        for t in request.topics
        if counts[t.name] == 1 and t.name not in denied
    ]
    outcomes: list[KafkaError | None] = (
        [refused] * len(wanted)
        if refused is not None
        else services.admin.create_partitions(wanted, request.validate_only)
    )
    by_name = dict(zip((w[0] for w in wanted), outcomes, strict=True))
    results = []
    for t in request.topics:
        error = (
            by_name[t.name]
            if t.name in by_name
            else _unauthorized(t.name)
            if t.name in denied
            else KafkaError(errors.INVALID_REQUEST, "Duplicate topic name.")
        )
        results.append(
            CreatePartitionsResponse.CreatePartitionsTopicResult(
                name=t.name,
                error_code=errors.NONE if error is None else error.code,
                error_message=None if error is None else error.message or None,
            )
        )
    if not request.validate_only:
        _apply_committed(services)
    ok = [r for r in results if r.error_code == errors.NONE]
    response = answer_after_commit(ctx, before, CreatePartitionsResponse(results=results), ok)
    made = [] if request.validate_only else [r.name for r in ok]
    return answer_once_hosted(ctx, made, response)
