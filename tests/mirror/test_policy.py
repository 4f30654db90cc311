"""Replication policies: remote names, reading names back, internal topics, cycles, provenance."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.mirror.policy import (
    PROVENANCE_HEADER,
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    policy_class,
)

pytestmark = pytest.mark.unit

default = DefaultReplicationPolicy()


def test_default_names_remote_topics_after_the_source() -> None:
    assert default.format_remote_topic("A", "orders") == "A.orders"
    assert default.topic_source("A.orders") == "A"
    assert default.upstream_topic("A.orders") == "orders"
    assert default.topic_source("orders") is None
    assert default.upstream_topic("orders") is None


def test_multi_hop_names() -> None:
    assert default.topic_source("B.A.orders") == "B"
    assert default.upstream_topic("B.A.orders") == "A.orders"
    assert default.original_topic("B.A.orders") == "orders"
    assert default.original_topic("orders") == "orders"


def test_names_split_as_java_does() -> None:
    # trailing empty parts are dropped: "A." is a single part, so not a remote topic
    assert default.topic_source("A.") is None
    assert default.topic_source("..") is None
    assert default.topic_source(".x") == ""


def test_custom_separator() -> None:
    policy = DefaultReplicationPolicy(separator="__")
    assert policy.format_remote_topic("A", "my.orders") == "A__my.orders"
    assert policy.topic_source("A__my.orders") == "A"
    assert policy.upstream_topic("A__my.orders") == "my.orders"
    assert policy.offset_syncs_topic("B") == "mm2-offset-syncs__B__internal"
    assert policy.checkpoints_topic("A") == "A__checkpoints__internal"
    legacy = DefaultReplicationPolicy(separator="__", internal_topic_separator_enabled=False)
    assert legacy.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    with pytest.raises(ValueError):
        DefaultReplicationPolicy(separator="")


def test_internal_topic_names() -> None:
    assert default.heartbeats_topic() == "heartbeats"
    assert default.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    assert default.checkpoints_topic("A") == "A.checkpoints.internal"
    assert default.is_checkpoints_topic("A.checkpoints.internal")
    assert default.is_heartbeats_topic("heartbeats") and default.is_heartbeats_topic(
        "B.A.heartbeats"
    )
    assert not default.is_heartbeats_topic("A.orders")


@pytest.mark.parametrize(
    "topic",
    [
        "__consumer_offsets",
        ".hidden",
        "mm2-offset-syncs.B.internal",
        "A.checkpoints.internal",
        "connect-offsets-internal",
    ],
)
def test_internal_topics(topic: str) -> None:
    assert default.is_internal_topic(topic)


@pytest.mark.parametrize("topic", ["orders", "A.orders", "heartbeats", "internal"])
def test_not_internal(topic: str) -> None:
    assert not default.is_internal_topic(topic)


def test_cycles_are_detected_at_any_hop() -> None:
    assert default.is_cycle("B.orders", "B")
    assert default.is_cycle("C.B.orders", "B")
    assert not default.is_cycle("C.orders", "B")
    assert not default.is_cycle("orders", "B")


@given(st.lists(st.sampled_from("ABCD"), min_size=1, max_size=5), st.sampled_from("ABCD"))
def test_a_topic_is_a_cycle_exactly_when_its_path_visits_the_target(
    hops: list[str], target: str
) -> None:
    topic = "orders"
    for alias in hops:
        topic = default.format_remote_topic(alias, topic)
    assert default.is_cycle(topic, target) == (target in hops)
    assert default.original_topic(topic) == "orders"


def test_identity_keeps_names_but_not_for_heartbeats() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="A")
    assert policy.format_remote_topic("A", "orders") == "orders"
    assert policy.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert policy.topic_source("orders") == "A"
    assert policy.upstream_topic("orders") == "orders"
    assert policy.original_topic("orders") == "orders"
    assert policy.topic_source("B.heartbeats") == "B"
    assert IdentityReplicationPolicy().topic_source("orders") is None
    # names cannot show a loop, except for heartbeats
    assert not policy.is_cycle("orders", "B")
    assert policy.is_cycle("B.heartbeats", "B")


def test_identity_provenance_headers_stop_records_going_back() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="A")
    key, value = policy.provenance_header("A")  # type: ignore[misc]
    assert key == PROVENANCE_HEADER and value == b"A"
    headers = [("app", b"x"), (key, value)]
    assert policy.has_visited(headers, "A")
    assert not policy.has_visited(headers, "B")
    assert not policy.has_visited([("app", b"A")], "A")
    assert policy.prevents_record_loops()


def test_identity_without_provenance_cannot_prevent_loops() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="A", provenance_header_enabled=False)
    assert policy.provenance_header("A") is None
    assert not policy.has_visited([(PROVENANCE_HEADER, b"A")], "A")
    assert not policy.prevents_record_loops()
    assert default.prevents_record_loops()


@pytest.mark.parametrize(
    "name,cls",
    [
        ("DefaultReplicationPolicy", DefaultReplicationPolicy),
        ("org.apache.kafka.connect.mirror.DefaultReplicationPolicy", DefaultReplicationPolicy),
        (" IdentityReplicationPolicy ", IdentityReplicationPolicy),
        ("org.apache.kafka.connect.mirror.IdentityReplicationPolicy", IdentityReplicationPolicy),
    ],
)
def test_policy_by_java_class_name(name: str, cls: type) -> None:
    assert policy_class(name) is cls


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="known: DefaultReplicationPolicy"):
        policy_class("com.example.MyPolicy")


def test_what_topic_names_say_about_replication() -> None:
    from gregor.mirror.policy import count_hops, remote_topics, replication_hops, upstream_clusters

    topics = [
        "orders",
        "heartbeats",
        "A.heartbeats",
        "C.A.heartbeats",
        "A.orders",
        "C.pay",
        "A.checkpoints.internal",
    ]
    assert count_hops("C.A.heartbeats", "A", default) == 2
    assert count_hops("C.A.heartbeats", "C", default) == 1
    assert count_hops("C.A.heartbeats", "B", default) == -1
    assert replication_hops(topics, "A", default) == 1
    assert replication_hops(topics, "C", default) == 1
    assert replication_hops(topics, "Z", default) == -1
    assert upstream_clusters(topics, default) == {"A", "C"}
    assert remote_topics(topics, default) == {"A.heartbeats", "C.A.heartbeats", "A.orders", "C.pay"}
    assert remote_topics(topics, default, "A") == {"A.heartbeats", "A.orders"}
    # a name-keeping policy cannot loop forever on its own answers
    identity = IdentityReplicationPolicy(source_cluster_alias="A")
    assert count_hops("orders", "B", identity) == -1
    assert count_hops("orders", "A", identity) == 1
    assert upstream_clusters(["B.heartbeats"], identity) == {"B"}
