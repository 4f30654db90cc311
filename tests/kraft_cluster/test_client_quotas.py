"""Client quotas in a three-node cluster: AlterClientQuotas sent to a node that is not the active
controller is forwarded to it (KIP-590), and every node then describes the quota from its own
metadata image."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gregor.protocol import api_keys, errors
from gregor.protocol.messages import AlterClientQuotasRequest as A
from gregor.protocol.messages import DescribeClientQuotasRequest as D
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


def described_by(cluster: LocalCluster, node: int) -> list[tuple[Any, ...]]:
    """The node's own answer (DescribeClientQuotas is never forwarded)."""
    with Raw(cluster.bootstrap_of(node)) as raw:
        answer = raw.call(api_keys.DESCRIBE_CLIENT_QUOTAS, 1, D(components=[], strict=False))
    return [
        (
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            tuple((v.key, v.value) for v in entry.values),
        )
        for entry in answer.entries
    ]


def test_quotas_are_forwarded_and_known_everywhere(cluster: LocalCluster) -> None:
    ctrl = active_controller(cluster)
    other = next(i for i in cluster.ids if i != ctrl)
    all_brokers_seen(cluster)
    request = A(
        entries=[
            A.EntryData(
                entity=[A.EntityData(entity_type="user", entity_name=None)],
                ops=[A.OpData(key="producer_byte_rate", value=4096.0, remove=False)],
            )
        ],
        validate_only=False,
    )
    with Raw(cluster.bootstrap_of(other)) as raw:
        answer = raw.call(api_keys.ALTER_CLIENT_QUOTAS, 1, request)
    assert [e.error_code for e in answer.entries] == [errors.NONE]
    expected = [((("user", None),), (("producer_byte_rate", 4096.0),))]
    for node in cluster.ids:
        wait_for(
            f"the quota described by node {node}",
            lambda n=node: described_by(cluster, n) == expected,
        )
