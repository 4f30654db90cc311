"""CreateTopics answers a created topic's configs (KIP-525) in v5+, every topic config resolved
as DescribeConfigs would (the request's overrides as DYNAMIC_TOPIC_CONFIG, the rest from the
broker's settings or Kafka's defaults), and none before v5, whose answer has no such field:
topics of one request with the same overrides get the same list, others their own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gregor import Broker
from gregor.metadata import config_defs
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import CreateTopicsRequest
from gregor.testing.raw_client import RawClient


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(start_timeout_s=60) as b:
        yield b


def request(*topics: tuple[str, dict[str, str]]) -> Any:
    return CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=name,
                num_partitions=1,
                replication_factor=1,
                configs=[
                    CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                    for k, v in configs.items()
                ],
            )
            for name, configs in topics
        ],
        timeout_ms=30_000,
        validate_only=False,
    )


def test_v5_answers_every_config_resolved_and_v4_none(broker: Broker) -> None:
    compact = {"cleanup.policy": "compact"}
    with RawClient(broker.bootstrap) as raw:
        answer = raw.call(
            api_keys.CREATE_TOPICS,
            7,
            request(("ans-a", {}), ("ans-b", compact), ("ans-c", {}), ("ans-d", compact)),
        )
        old = raw.call(api_keys.CREATE_TOPICS, 4, request(("ans-e", compact)))
    by_name = {t.name: t for t in answer.topics}
    assert all(t.error_code == errors.NONE for t in answer.topics)
    described = {
        name: {c.name: (c.value, c.config_source) for c in t.configs} for name, t in by_name.items()
    }
    assert set(described["ans-a"]) == set(config_defs.TOPIC_CONFIGS)
    assert described["ans-a"] == described["ans-c"]
    assert described["ans-b"] == described["ans-d"]
    assert described["ans-b"]["cleanup.policy"] == ("compact", config_defs.DYNAMIC_TOPIC_CONFIG)
    assert described["ans-a"]["cleanup.policy"] == ("delete", config_defs.DEFAULT_CONFIG)
    assert {k: v for k, v in described["ans-a"].items() if k != "cleanup.policy"} == {
        k: v for k, v in described["ans-b"].items() if k != "cleanup.policy"
    }
    [e] = old.topics
    assert e.error_code == errors.NONE and not e.configs


def test_a_name_given_twice_is_refused_for_each_entry_and_the_rest_made(broker: Broker) -> None:
    with RawClient(broker.bootstrap) as raw:
        answer = raw.call(
            api_keys.CREATE_TOPICS, 4, request(("twice", {}), ("once", {}), ("twice", {}))
        )
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("twice", errors.INVALID_REQUEST),
        ("once", errors.NONE),
        ("twice", errors.INVALID_REQUEST),
    ]
    assert all("multiple entries" in (t.error_message or "") for t in answer.topics[::2])
