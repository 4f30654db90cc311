"""ElectLeaders v0-2: elect preferred (or, unclean, any live) leaders for partitions.

v0: preferred only, no election type. v1: election_type (KIP-460), top-level error code. v2:
flexible. `topic_partitions` null: every partition, and then, as Kafka, the partitions whose
election was not needed are left out of the answer (every topic is still listed).

The rules are QuorumController.elect_leaders'; the elections are one commit and the answer waits
for it. Off the active controller (a broker forwards it: controller_apis.FORWARDED) or with an
unknown election type, every partition asked for gets the error, and so does the top level.
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.controller_writes import answer_after_commit, not_controller
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.messages import ElectLeadersResponse
from gregor.security.acls import ALTER

log = logging.getLogger("gregor.admin")

ELECTION_NOT_NEEDED = errors.BY_NAME["ELECTION_NOT_NEEDED"].code
PREFERRED, UNCLEAN = 0, 1
_MESSAGES = {
    ELECTION_NOT_NEEDED: "leader election not needed: the partition already has the leader asked for",
    errors.BY_NAME[
        "PREFERRED_LEADER_NOT_AVAILABLE"
    ].code: "the preferred replica is not alive or not in the ISR",
    errors.BY_NAME["ELIGIBLE_LEADERS_NOT_AVAILABLE"].code: "no live replica can lead the partition",
}

Result = ElectLeadersResponse.ReplicaElectionResult
PartitionResult = ElectLeadersResponse.PartitionResult


def _message(code: int, topic: str, partition: int, known_topics: set[str]) -> str | None:
    if code == errors.UNKNOWN_TOPIC_OR_PARTITION:
        return (
            f"No such topic as {topic}"
            if topic not in known_topics
            else f"No such partition as {topic}-{partition}"
        )
    return _MESSAGES.get(code)


@handles(api_keys.ELECT_LEADERS)
def elect_leaders(ctx: RequestContext, request: Any) -> Any:
    services = ctx.services
    election_type = request.election_type if ctx.header.request_api_version >= 1 else PREFERRED
    asked = None
    if request.topic_partitions is not None:
        asked = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    before = services.store.last_appended
    try:
        refused = not_controller(ctx)
        if not ctx.authorize_cluster(ALTER):
            refused = KafkaError(errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster is not authorized.")
        if refused is not None:
            raise refused
        codes = services.admin.controller.elect_leaders(election_type, asked)
    except KafkaError as exc:
        if exc.code == errors.INVALID_REQUEST:
            log.warning("ElectLeaders from %s refused: %s", ctx.peer, exc.message)
        return _refused(request, exc)
    known = {t.name for t in services.store.image.topics_by_id.values()}
    results: dict[str, list[Any]] = {}
    if asked is None:  # every topic is listed, its elections not needed left out
        for name in sorted(known):
            results[name] = []
    for (topic, partition), code in codes.items():
        if asked is None and code == ELECTION_NOT_NEEDED:
            continue
        message = _message(code, topic, partition, known)
        results.setdefault(topic, []).append(
            PartitionResult(partition_id=partition, error_code=code, error_message=message)
        )
    if any(code == errors.NONE for code in codes.values()):
        log.info(
            "elected leaders of %s",
            ", ".join(f"{t}-{p}" for (t, p), c in codes.items() if c == errors.NONE),
        )
        services.apply_metadata()
    response = ElectLeadersResponse(
        error_code=errors.NONE,
        replica_election_results=[
            Result(topic=t, partition_result=ps) for t, ps in results.items()
        ],
    )
    ok = [
        p
        for r in response.replica_election_results
        for p in r.partition_result
        if p.error_code == errors.NONE
    ]
    return answer_after_commit(ctx, before, response, ok)


def _refused(request: Any, exc: KafkaError) -> Any:
    """Kafka's ElectLeadersRequest.getErrorResponse: the error for every partition asked for."""
    results = [
        Result(
            topic=t.topic,
            partition_result=[
                PartitionResult(
                    partition_id=p, error_code=exc.code, error_message=exc.message or None
                )
                for p in t.partitions
            ],
        )
        for t in request.topic_partitions or ()
    ]
    return ElectLeadersResponse(error_code=exc.code, replica_election_results=results)
