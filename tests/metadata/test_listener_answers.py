"""Answers that name brokers use the listener the request came in on, with Kafka's errors when
a broker lacks it: a partition it leads answers LISTENER_NOT_FOUND in Metadata (v6+; before,
LEADER_NOT_AVAILABLE), a group it coordinates COORDINATOR_NOT_AVAILABLE in FindCoordinator."""

from __future__ import annotations

import random
import uuid
from types import SimpleNamespace
from typing import Any

from gregor.coordinator.group.records import partition_for
from gregor.handlers.context import LISTENER_NAME, RequestContext
from gregor.handlers.groups import GROUP, _elsewhere
from gregor.handlers.metadata import _leader_error
from gregor.metadata import records as r
from gregor.metadata.cluster import ClusterView
from gregor.metadata.image import EMPTY_IMAGE, MetadataImage
from gregor.protocol import api_keys, errors
from gregor.protocol.headers import RequestHeader

OFFSETS_PARTITIONS = 4


def image() -> MetadataImage:
    """Broker 1 serves INTERNAL and EXTERNAL, broker 2 INTERNAL only; `__consumer_offsets`
    partition i is led by broker 1 + i % 2."""
    recs: list[Any] = [r.FeatureLevelRecord(name="metadata.version", feature_level=25)]
    for b, names in ((1, ("INTERNAL", "EXTERNAL")), (2, ("INTERNAL",))):
        recs.append(
            r.RegisterBrokerRecord(
                broker_id=b,
                incarnation_id=uuid.UUID(int=b),
                broker_epoch=b,
                end_points=[
                    r.BrokerEndpoint(
                        name=n, host=f"{n.lower()}{b}", port=9000 + b, security_protocol=0
                    )  # fmt: skip
                    for n in names
                ],
                rack=None,
                fenced=False,
                log_dirs=[uuid.UUID(int=9)],
            )
        )
    topic_id = uuid.UUID(int=100)
    recs.append(r.TopicRecord(name="__consumer_offsets", topic_id=topic_id))
    for i in range(OFFSETS_PARTITIONS):
        recs.append(
            r.PartitionRecord(
                partition_id=i, topic_id=topic_id, replicas=[1, 2], isr=[1, 2],
                leader=1 + i % 2, leader_epoch=0, partition_epoch=0,
                directories=[uuid.UUID(int=0)] * 2,
            )
        )  # fmt: skip
    return EMPTY_IMAGE.replay((rec, i, 1) for i, rec in enumerate(recs))


def context(listener: str | None, key: int = api_keys.METADATA, version: int = 12) -> Any:
    store = SimpleNamespace(image=image(), networked=True, leader_id=None)
    cluster = ClusterView(store, 3, quorum=True, rng=random.Random(1))
    services = SimpleNamespace(store=store, cluster=cluster, node_id=3)
    connection = {} if listener is None else {LISTENER_NAME: listener}
    header = RequestHeader(key, version, 1, "t")
    return RequestContext(services, header, "127.0.0.1:1", connection)  # type: ignore[arg-type]


def test_a_partition_led_by_a_broker_without_the_listener() -> None:
    assert _leader_error(context("EXTERNAL"), 1) == errors.NONE
    assert _leader_error(context("EXTERNAL"), 2) == errors.LISTENER_NOT_FOUND
    assert _leader_error(context("EXTERNAL", version=5), 2) == errors.LEADER_NOT_AVAILABLE
    assert _leader_error(context("INTERNAL"), 2) == errors.NONE
    assert _leader_error(context(None), 2) == errors.NONE  # no client listener: the first
    assert _leader_error(context("EXTERNAL"), -1) == errors.LEADER_NOT_AVAILABLE


def group_led_by(leader: int) -> str:
    return next(
        g
        for g in (f"g{i}" for i in range(100))
        if 1 + partition_for(g, OFFSETS_PARTITIONS) % 2 == leader
    )


def test_a_coordinator_is_named_at_the_listener_asked_on_or_not_at_all() -> None:
    on_one, on_two = group_led_by(1), group_led_by(2)
    find = api_keys.FIND_COORDINATOR
    assert _elsewhere(context("EXTERNAL", find, 4), GROUP, on_one) == (1, "external1", 9001)
    assert _elsewhere(context("INTERNAL", find, 4), GROUP, on_one) == (1, "internal1", 9001)
    assert _elsewhere(context("INTERNAL", find, 4), GROUP, on_two) == (2, "internal2", 9002)
    # broker 2 has no EXTERNAL listener: no coordinator to name (COORDINATOR_NOT_AVAILABLE)
    assert _elsewhere(context("EXTERNAL", find, 4), GROUP, on_two) is None
