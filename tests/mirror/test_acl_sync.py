"""`sync.topic.acls.enabled` between two gregor brokers with ACLs on: the literal ACLs of A's
mirrored topics appear on B's remote topics as MirrorMaker 2 copies them (ALLOW ALL becomes
ALLOW READ, ALLOW WRITE stays behind, DENY is copied); prefixed ACLs and ACLs of topics the
flow does not mirror stay behind. The mirror runs as User:ANONYMOUS, a super user on both."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from gregor import Broker
from tests.mirror.test_engine import FAST, Mirror

pytestmark = pytest.mark.cluster

ACLS_ON = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",  # the mirror and this test's admin clients
    "group.initial.rebalance.delay.ms": "0",
}
ANY_TOPIC = AclBindingFilter(
    ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,  # type: ignore[arg-type]
    AclOperation.ANY, AclPermissionType.ANY,
)  # fmt: skip


def acl(topic: str, principal: str, op: AclOperation, perm: AclPermissionType,
        pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:  # fmt: skip
    return AclBinding(ResourceType.TOPIC, topic, pattern, principal, "*", op, perm)


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[Broker, Broker]]:
    with Broker(config=ACLS_ON) as a, Broker(config=ACLS_ON) as b:
        yield a, b


def seen(admin: AdminClient) -> set[tuple[str, str, str, str, str]]:
    return {
        (b.name, b.resource_pattern_type.name, b.principal, b.operation.name,  # type: ignore[union-attr]
         b.permission_type.name)  # type: ignore[union-attr]
        for b in admin.describe_acls(ANY_TOPIC).result(30)
    }  # fmt: skip


def test_topic_acls_follow_to_the_remote_topics(
    clusters: tuple[Broker, Broker], tmp_path: Path
) -> None:
    a, b = clusters
    source, target = (
        AdminClient({"bootstrap.servers": a.bootstrap}),
        AdminClient({"bootstrap.servers": b.bootstrap}),
    )
    for f in source.create_topics([NewTopic(t, 1, 1) for t in ("orders", "private")]).values():
        f.result(30)
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    bindings = [
        acl("orders", "User:alice", AclOperation.ALL, allow),  # -> READ
        acl("orders", "User:bob", AclOperation.WRITE, allow),  # stays behind
        acl("orders", "User:carol", AclOperation.READ, deny),  # copied as it is
        acl("orders", "User:dave", AclOperation.DESCRIBE, allow),  # copied as it is
        acl("ord", "User:erin", AclOperation.READ, allow, ResourcePatternType.PREFIXED),
        acl("private", "User:alice", AclOperation.READ, allow),  # a topic not mirrored
    ]
    for f in source.create_acls(bindings).values():
        f.result(30)
    config = tmp_path / "mm2.properties"
    config.write_text(
        FAST.format(a=a.bootstrap, b=b.bootstrap, A="A", B="B")
        + "A->B.enabled = true\nA->B.topics = orders\nsync.topic.acls.interval.seconds = 1\n"
    )
    mirror = Mirror(config, tmp_path / "mirror.log").start()
    expected = {
        ("A.orders", "LITERAL", "User:alice", "READ", "ALLOW"),
        ("A.orders", "LITERAL", "User:carol", "READ", "DENY"),
        ("A.orders", "LITERAL", "User:dave", "DESCRIBE", "ALLOW"),
    }
    try:
        deadline = time.monotonic() + 40
        while seen(target) != expected and time.monotonic() < deadline:
            time.sleep(0.3)
        assert seen(target) == expected, mirror.output()[-3000:]
        assert "topic ACLs synced to B" in mirror.output()
    finally:
        mirror.kill()
