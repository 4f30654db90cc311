"""ACLs in a three-node cluster: created through a node that is not the active controller (the
CreateAcls is forwarded with the client's principal), enforced by every broker from its own
metadata image, and kept through the loss of the active controller and a node's restart."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from gregor.testing.cluster import LocalCluster
from tests.kraft_cluster.helpers import (
    FAST,
    active_controller,
    admin,
    all_brokers_seen,
    create,
    wait_for,
)

pytestmark = pytest.mark.cluster

CONFIG = {
    **FAST,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    # every client is User:ANONYMOUS for now: it may do what no ACL names
    "allow.everyone.if.no.acl.found": "true",
}
EVERY = AclBindingFilter(
    ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
    AclOperation.ANY, AclPermissionType.ANY,
)  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    c = LocalCluster(3, base_dir=str(tmp_path), config=CONFIG)
    try:
        c.start()
        yield c
    finally:
        c.close()


def acls_on(cluster: LocalCluster, node: int) -> set[str]:
    client = admin(cluster.bootstrap_of(node))
    return {str(b) for b in client.describe_acls(EVERY, request_timeout=5).result(timeout=10)}


def hidden_from(cluster: LocalCluster, node: int, topic: str) -> bool:
    topics = admin(cluster.bootstrap_of(node)).list_topics(timeout=5).topics
    return topic not in topics


def test_acls_are_enforced_everywhere_and_survive_failover_and_restart(
    cluster: LocalCluster,
) -> None:
    all_brokers_seen(cluster)
    ctrl = active_controller(cluster)
    other = next(i for i in cluster.ids if i != ctrl)
    hidden, shown = f"hidden-{uuid.uuid4().hex[:6]}", f"shown-{uuid.uuid4().hex[:6]}"
    client = admin(cluster.bootstrap_of(other))
    for t in (hidden, shown):
        wait_for(f"topic {t}", lambda t=t: create(client, t) or True)
    deny = AclBinding(
        ResourceType.TOPIC, hidden, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
        AclOperation.DESCRIBE, AclPermissionType.DENY,
    )  # fmt: skip
    for f in client.create_acls([deny], request_timeout=10).values():
        assert f.result() is None  # forwarded to the active controller, committed
    for node in cluster.ids:
        wait_for(f"the ACL on node {node}", lambda n=node: str(deny) in acls_on(cluster, n))
        wait_for(f"{hidden} hidden on {node}", lambda n=node: hidden_from(cluster, n, hidden))
        assert not hidden_from(cluster, node, shown)

    cluster.kill(ctrl)  # the active controller dies: the ACLs are in the quorum's log
    survivors = [i for i in cluster.ids if i != ctrl]
    wait_for("a new controller", lambda: active_controller(cluster) != ctrl, timeout_s=40)
    group = f"g-{uuid.uuid4().hex[:6]}"
    more = AclBinding(
        ResourceType.GROUP, group, ResourcePatternType.PREFIXED, "User:alice", "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip

    def created() -> bool:
        client = admin(cluster.bootstrap_of(survivors[0]))  # alive until the answer
        futures = client.create_acls([more], request_timeout=5)
        return all(f.result(timeout=10) is None for f in futures.values())

    wait_for("an ACL created after the failover", created, timeout_s=40)
    for node in survivors:
        wait_for(
            f"both ACLs on {node}", lambda n=node: {str(deny), str(more)} <= acls_on(cluster, n)
        )

    cluster.start_node(ctrl)  # the old controller comes back and replays the log
    wait_for(
        f"both ACLs on restarted node {ctrl}",
        lambda: {str(deny), str(more)} <= acls_on(cluster, ctrl),
        timeout_s=40,
    )
    assert hidden_from(cluster, ctrl, hidden)

    # a new client: the first one's controller (the node killed and restarted) left it with a
    # broker handle librdkafka dropped while the node was away (_DESTROY_BROKER)
    client = admin(cluster.bootstrap_of(survivors[0]))
    deleted = client.delete_acls([EVERY], request_timeout=10)[EVERY].result()
    assert {str(b) for b in deleted} == {str(deny), str(more)}
    for node in cluster.ids:
        wait_for(f"no ACL on {node}", lambda n=node: not acls_on(cluster, n))
        wait_for(f"{hidden} shown on {node}", lambda n=node: not hidden_from(cluster, n, hidden))
