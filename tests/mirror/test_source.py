"""The source connector's and task's decisions: record copies, topic plans, configs, ACLs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.mirror.filters import ConfigPropertyFilter
from gregor.mirror.policy import (
    PROVENANCE_HEADER,
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
)
from gregor.mirror.source import (
    ConfigEntry,
    SourceRecord,
    TopicAcl,
    assign_round_robin,
    convert_record,
    plan_topics,
    target_acl,
    target_configs,
)

pytestmark = pytest.mark.unit

default = DefaultReplicationPolicy()
RECORD = SourceRecord("orders", 3, 41, 1_700_000_000_000, b"k", b"v", (("h", b"1"), ("n", None)))


def test_a_copy_keeps_everything_but_the_topic_name() -> None:
    out = convert_record(RECORD, default, "A", "B")
    assert out is not None
    assert (out.topic, out.partition, out.timestamp) == ("A.orders", 3, RECORD.timestamp)
    assert (out.key, out.value, out.headers) == (b"k", b"v", RECORD.headers)
    assert (out.upstream_topic, out.upstream_offset) == ("orders", 41)
    tombstone = convert_record(SourceRecord("t", 0, 0, 1, None, None), default, "A", "B")
    assert tombstone is not None and tombstone.key is None and tombstone.value is None


def test_identity_copies_carry_provenance_and_never_go_home() -> None:
    a_to_b = IdentityReplicationPolicy(source_cluster_alias="A")
    b_to_a = IdentityReplicationPolicy(source_cluster_alias="B")
    at_b = convert_record(RECORD, a_to_b, "A", "B")
    assert at_b is not None and at_b.topic == "orders"
    assert at_b.headers[-1] == (PROVENANCE_HEADER, b"A")
    back = SourceRecord(
        at_b.topic, at_b.partition, 7, at_b.timestamp, at_b.key, at_b.value, at_b.headers
    )
    assert convert_record(back, b_to_a, "B", "A") is None
    # a record written in B goes to A, and not back to B
    local = convert_record(SourceRecord("orders", 0, 0, 1, b"k", b"w"), b_to_a, "B", "A")
    assert local is not None and local.headers == ((PROVENANCE_HEADER, b"B"),)
    again = SourceRecord("orders", 0, 0, 1, b"k", b"w", local.headers)
    assert convert_record(again, a_to_b, "A", "B") is None


@given(st.lists(st.sampled_from("ABC"), min_size=2, max_size=8))
def test_identity_records_never_revisit_a_cluster(route: list[str]) -> None:
    """Follow a record along any route of flows: each cluster receives it at most once."""
    record = SourceRecord("orders", 0, 0, 1, b"k", b"v")
    visited = [route[0]]
    for source, target in zip(route, route[1:], strict=False):
        if source == target:
            continue
        policy = IdentityReplicationPolicy(source_cluster_alias=source)
        out = convert_record(record, policy, source, target)
        if out is None:
            assert target in visited
            return
        assert target not in visited
        visited.append(target)
        record = SourceRecord(out.topic, 0, 0, 1, out.key, out.value, out.headers)


def test_plan_topics() -> None:
    plan = plan_topics(
        {"orders": 8, "pay": 3, "users": 2}, {"A.pay": 1, "A.users": 4}, default, "A"
    )
    assert plan.create == {"A.orders": 8}
    assert plan.grow == {"A.pay": 3}  # A.users has more partitions: never shrunk


def test_configs_of_a_new_topic_and_of_a_sync() -> None:
    entries = [
        ConfigEntry("retention.ms", "1000"),
        ConfigEntry("cleanup.policy", "delete", is_default=True, source="DEFAULT_CONFIG"),
        ConfigEntry("min.insync.replicas", "2"),
        ConfigEntry("segment.bytes", "1", source="STATIC_BROKER_CONFIG"),
        ConfigEntry("secret", "x", sensitive=True),
        ConfigEntry("ro", "x", read_only=True),
    ]
    props = ConfigPropertyFilter()
    assert target_configs(entries, props, incremental=False) == [("retention.ms", "1000", "SET")]
    assert target_configs(entries, props, incremental=True) == [
        ("retention.ms", "1000", "SET"),
        ("cleanup.policy", "delete", "DELETE"),
    ]
    assert target_configs(entries, props, incremental=True, use_source_defaults=True) == [
        ("retention.ms", "1000", "SET"),
        ("cleanup.policy", "delete", "SET"),
    ]


def test_acls() -> None:
    read = TopicAcl("orders", "User:alice", "*", "READ", "ALLOW")
    assert target_acl(read, default, "A") == TopicAcl(
        "A.orders", "User:alice", "*", "READ", "ALLOW"
    )
    assert target_acl(TopicAcl("orders", "User:bob", "*", "WRITE", "ALLOW"), default, "A") is None
    everything = target_acl(TopicAcl("orders", "User:bob", "*", "ALL", "ALLOW"), default, "A")
    assert everything is not None and everything.operation == "READ"
    deny = target_acl(TopicAcl("orders", "User:eve", "*", "WRITE", "DENY"), default, "A")
    assert deny is not None and deny.operation == "WRITE"


def test_assign_round_robin() -> None:
    tps = [("t", p) for p in range(5)]
    assert assign_round_robin(tps, 2) == [[("t", 0), ("t", 2), ("t", 4)], [("t", 1), ("t", 3)]]
    assert assign_round_robin(tps[:1], 4) == [[("t", 0)]]
    assert assign_round_robin([], 3) == []
