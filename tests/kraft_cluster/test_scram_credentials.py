"""SCRAM credentials in a three-node cluster: AlterUserScramCredentials sent to a node that is not
the active controller is forwarded to it (KIP-590), every node then describes the credential from
its own metadata image, and the credentials outlive the loss of the active controller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from gregor.protocol import api_keys
from gregor.protocol.messages import DescribeUserScramCredentialsRequest
from gregor.testing.cluster import LocalCluster
from tests.kraft_broker.helpers import Raw
from tests.kraft_cluster.helpers import (
    FAST,
    active_controller,
    all_brokers_seen,
    make_cluster,
    wait_for,
)

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    with make_cluster(tmp_path, FAST) as c:
        yield c


def described_by(cluster: LocalCluster, node: int) -> dict[str, list[tuple[int, int]]]:
    """The node's own answer (DescribeUserScramCredentials is never forwarded)."""
    with Raw(cluster.bootstrap_of(node)) as raw:
        answer = raw.call(
            api_keys.DESCRIBE_USER_SCRAM_CREDENTIALS,
            0,
            DescribeUserScramCredentialsRequest(users=None),
        )
    return {
        r.user: [(c.mechanism, c.iterations) for c in r.credential_infos] for r in answer.results
    }


def test_credentials_are_forwarded_known_everywhere_and_outlive_the_controller(
    cluster: LocalCluster,
) -> None:
    ctrl = active_controller(cluster)
    other = next(i for i in cluster.ids if i != ctrl)
    all_brokers_seen(cluster)
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_of(other)})
    assert len(client.list_topics(timeout=10).brokers) == 3
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = client.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("alice", info, b"pw")]
    )
    futures["alice"].result(15)
    expected = {"alice": [(2, 8192)]}
    for node in cluster.ids:
        wait_for(
            f"alice described by node {node}", lambda n=node: described_by(cluster, n) == expected
        )
    cluster.kill(ctrl)
    survivors = [i for i in cluster.ids if i != ctrl]
    wait_for(
        "a new active controller", lambda: cluster.leader_known_to(survivors[0]) in survivors, 30
    )
    for node in survivors:
        assert described_by(cluster, node) == expected
    # the new controller takes writes, which start from the credentials the old one committed
    client = AdminClient({"bootstrap.servers": cluster.bootstrap_of(survivors[0])})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    futures = client.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("alice", info, b"pw")]
    )
    futures["alice"].result(30)
    expected = {"alice": [(1, 4096), (2, 8192)]}
    for node in survivors:
        wait_for(
            f"both of alice's on node {node}", lambda n=node: described_by(cluster, n) == expected
        )
