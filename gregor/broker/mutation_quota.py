"""`controller_mutation_rate` (KIP-599): partitions created or deleted per second, per (user,
client id), over CreateTopics, CreatePartitions and DeleteTopics.

Strict, as Kafka from CreateTopics v6, DeleteTopics v5 and CreatePartitions v3: a request that
arrives while the rate is above the quota changes nothing and every topic in it gets
THROTTLING_QUOTA_EXCEEDED, with the throttle time; the client retries after it. A request
admitted counts the partitions it asks to create or delete (it may take the rate over the
quota: the next request is the one refused). Older versions (librdkafka's CreateTopics v4, for
one) are counted and never refused: over the quota, the connection is muted for the throttle
time instead (their responses carry no throttle time here).
`validate_only` requests are neither checked nor counted.
"""

from __future__ import annotations

from typing import Any

from gregor.metadata.image import MetadataImage
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import (
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
)

THROTTLING_QUOTA_EXCEEDED = errors.BY_NAME["THROTTLING_QUOTA_EXCEEDED"].code
STRICT_FROM = {api_keys.CREATE_TOPICS: 6, api_keys.DELETE_TOPICS: 5, api_keys.CREATE_PARTITIONS: 3}
MESSAGE = "The throttling quota has been exceeded."


def strict(key: int, version: int) -> bool:
    return version >= STRICT_FROM[key]


def validate_only(request: Any) -> bool:
    return bool(getattr(request, "validate_only", False))


def mutations(key: int, version: int, request: Any, image: MetadataImage, default: int) -> int:
    """How many partitions the request asks to create or delete (`default`: num.partitions)."""
    if key == api_keys.CREATE_TOPICS:
        return sum(
            t.num_partitions if t.num_partitions > 0 else (len(t.assignments) or default)
            for t in request.topics
        )
    if key == api_keys.CREATE_PARTITIONS:
        total = 0
        for t in request.topics:
            topic = image.topic(t.name)
            if topic is not None:
                total += max(t.count - len(topic.partitions), 0)
        return total
    names = (
        [t.name for t in request.topics if t.name is not None]
        if version >= 6
        else list(request.topic_names)
    )
    return sum(len(t.partitions) for n in names if (t := image.topic(n)) is not None)


def refused(key: int, version: int, request: Any, throttle_ms: int) -> Any:
    """The response that refuses every topic of `request` with THROTTLING_QUOTA_EXCEEDED."""
    code = THROTTLING_QUOTA_EXCEEDED
    if key == api_keys.CREATE_TOPICS:
        R = CreateTopicsResponse
        topics = [
            R.CreatableTopicResult(name=t.name, error_code=code, error_message=MESSAGE)
            for t in request.topics
        ]
        return R(throttle_time_ms=throttle_ms, topics=topics)
    if key == api_keys.CREATE_PARTITIONS:
        P = CreatePartitionsResponse
        results = [
            P.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=MESSAGE)
            for t in request.topics
        ]
        return P(throttle_time_ms=throttle_ms, results=results)
    D = DeleteTopicsResponse
    if version >= 6:
        out = [
            D.DeletableTopicResult(
                name=t.name, topic_id=t.topic_id, error_code=code, error_message=MESSAGE
            )
            for t in request.topics
        ]
    else:
        out = [
            D.DeletableTopicResult(name=n, error_code=code, error_message=MESSAGE)
            for n in request.topic_names
        ]
    return D(throttle_time_ms=throttle_ms, responses=out)
