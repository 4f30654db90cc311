"""Topic, group and config filters with MirrorMaker 2's defaults."""

from __future__ import annotations

import pytest

from gregor.mirror.filters import (
    ConfigPropertyFilter,
    NameFilter,
    group_filter,
    should_checkpoint_group,
    should_replicate_topic,
    topic_filter,
)
from gregor.mirror.policy import DefaultReplicationPolicy, IdentityReplicationPolicy

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "topic,accepted",
    [
        ("orders", True),
        ("A.orders", True),
        ("__consumer_offsets", False),
        ("mm2-offset-syncs.B.internal", False),
        ("connect-configs-internal", False),
        ("orders.replica", False),
        ("internal", True),
    ],
)
def test_default_topic_filter(topic: str, accepted: bool) -> None:
    assert topic_filter().accepts(topic) is accepted


@pytest.mark.parametrize(
    "group,accepted",
    [
        ("app", True),
        ("console-consumer-123", False),
        ("connect-sink", False),
        ("__internal", False),
    ],
)
def test_default_group_filter(group: str, accepted: bool) -> None:
    assert group_filter().accepts(group) is accepted


def test_patterns_match_whole_names() -> None:
    f = NameFilter(("orders", "pay.*"), ())
    assert f.accepts("orders") and f.accepts("payments")
    assert not f.accepts("orders2") and not f.accepts("xpay")


def test_empty_include_list_matches_nothing() -> None:
    assert not NameFilter((), ()).accepts("orders")
    assert NameFilter((".*",), ()).accepts("orders")


def test_exclude_wins() -> None:
    assert not NameFilter((".*",), ("secret.*",)).accepts("secret-orders")


def test_config_property_filter_defaults() -> None:
    f = ConfigPropertyFilter()
    assert not f.should_replicate_config_property("min.insync.replicas")
    assert not f.should_replicate_config_property("message.timestamp.type")
    assert f.should_replicate_config_property("retention.ms")
    assert f.should_replicate_config_property("min.insync.replicasX")
    assert ConfigPropertyFilter(()).should_replicate_config_property("min.insync.replicas")


def test_should_replicate_topic() -> None:
    policy = DefaultReplicationPolicy()
    only_orders = NameFilter(("orders",), ())
    assert should_replicate_topic("orders", only_orders, policy, "B")
    assert not should_replicate_topic("payments", only_orders, policy, "B")
    # heartbeats pass whatever the filter, unless heartbeats replication is off
    assert should_replicate_topic("heartbeats", only_orders, policy, "B")
    assert should_replicate_topic("C.heartbeats", only_orders, policy, "B")
    assert not should_replicate_topic("heartbeats", only_orders, policy, "B", False)
    # never back to where it came from, never internal topics
    everything = NameFilter((".*",), ())
    assert not should_replicate_topic("B.orders", everything, policy, "B")
    assert not should_replicate_topic("B.heartbeats", everything, policy, "B")
    assert not should_replicate_topic("A.checkpoints.internal", everything, policy, "B")
    assert not should_replicate_topic("__consumer_offsets", everything, policy, "B")


def test_identity_policy_loops_show_only_in_heartbeats() -> None:
    policy = IdentityReplicationPolicy(source_cluster_alias="A")
    assert should_replicate_topic("orders", topic_filter(), policy, "B")
    assert not should_replicate_topic("B.heartbeats", topic_filter(), policy, "B")


def test_should_checkpoint_group() -> None:
    topics = NameFilter(("orders",), ())
    assert should_checkpoint_group("app", ["payments", "orders"], group_filter(), topics)
    assert not should_checkpoint_group("app", ["payments"], group_filter(), topics)
    assert not should_checkpoint_group("console-consumer-1", ["orders"], group_filter(), topics)


def test_why_not_replicated_agrees_with_should_replicate_topic() -> None:
    from gregor.mirror.filters import why_not_replicated

    policy = DefaultReplicationPolicy()
    f = NameFilter(("orders.*", "heartbeats"), ("orders-secret",))
    cases = {
        "orders": None,
        "orders-secret": "matched by topics.exclude",
        "payments": "not matched by topics",
        "B.orders": "it came from B (a cycle)",
        "__consumer_offsets": "an internal topic",
        "C.heartbeats": None,
    }
    for topic, reason in cases.items():
        assert why_not_replicated(topic, f, policy, "B") == reason
        assert should_replicate_topic(topic, f, policy, "B") == (reason is None)
