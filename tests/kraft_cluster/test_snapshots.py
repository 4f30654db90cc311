"""Metadata snapshots in a three-node quorum: every node takes its own as it replays commits, a
node that was down while the others dropped their log below a snapshot catches up from the
leader's snapshot (FetchSnapshot), and a restart of every node loads its latest snapshot."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from typing import Any

import pytest

from gregor.testing.cluster import LocalCluster
from tests.kraft_cluster.helpers import (
    active_controller,
    make_cluster,
    raw_create,
    topics_on,
    wait_for,
)

pytest.importorskip("confluent_kafka")

# Small thresholds: a snapshot after a few records; segments small enough to be deleted below it.
SMALL = {
    "broker.session.timeout.ms": "6000",
    "metadata.log.max.record.bytes.between.snapshots": "500",
    "metadata.log.segment.bytes": "2048",
}


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    with make_cluster(tmp_path, SMALL) as c:
        yield c


def checkpoints(cluster: LocalCluster, node_id: int) -> list[str]:
    return glob.glob(
        os.path.join(cluster.data_dir(node_id), "logs", "__cluster_metadata-0", "*.checkpoint")
    )


def create_all(cluster: LocalCluster, names: list[str]) -> None:
    for name in names:
        wait_for(
            f"{name} created",
            lambda n=name: raw_create(cluster, active_controller(cluster), n) == 0,
        )


def test_nodes_snapshot_a_returning_node_catches_up_and_a_full_restart_loads_them(
    cluster: LocalCluster,
) -> None:
    active_controller(cluster)
    create_all(cluster, [f"before-{i}" for i in range(15)])
    for node in cluster.ids:
        wait_for(f"a snapshot on node {node}", lambda n=node: checkpoints(cluster, n))

    follower = next(i for i in cluster.ids if i != active_controller(cluster))
    cluster.kill(follower)
    during = [f"during-{i}" for i in range(30)]
    create_all(cluster, during)
    cluster.start_node(follower)
    expected = {f"before-{i}" for i in range(15)} | set(during)
    wait_for(f"node {follower} caught up", lambda: expected <= topics_on(cluster, follower), 40)

    cluster.stop()
    cluster.start()
    active_controller(cluster)
    for node in cluster.ids:
        wait_for(
            f"every topic on node {node} after a restart",
            lambda n=node: expected <= topics_on(cluster, n),
            40,
        )


def test_a_controller_only_node_writes_its_snapshots_off_the_event_loop(tmp_path: Any) -> None:
    """Node 1 a controller-only node (ControllerServer), node 2 a broker: the controller's
    snapshots are written on a worker thread, as the broker's are (the server gives its
    metadata store `in_thread`; without it they would be written on the event loop)."""
    with make_cluster(tmp_path, SMALL, 1, controllers=1) as c:
        controller = c.nodes[1]
        assert controller.client_listener is False, "node 1 is controller-only"
        create_all_through(c, 2, [f"t-{i}" for i in range(15)])
        wait_for("a snapshot on the controller", lambda: checkpoints(c, 1))
        wait_for(
            "the controller's snapshot written off the event loop",
            lambda: "off the event loop" in controller.read_log(),
        )


def create_all_through(cluster: LocalCluster, node_id: int, names: list[str]) -> None:
    for name in names:
        wait_for(f"{name} created", lambda n=name: raw_create(cluster, node_id, n) == 0)
