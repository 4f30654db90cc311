"""Many topic creations at once on three nodes, through a real AdminClient: sent pipelined from
one client and one per request from several, every one succeeds, every node lists them, and
the leader of each partition hosts it, with its leader epoch in its leader-epoch checkpoint
once it stops.
Created and killed (SIGKILL) the moment the answers came, a node brings them all back."""

from __future__ import annotations

import glob
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gregor.storage import checkpoints
from gregor.testing.cluster import LocalCluster
from tests.kraft_cluster.helpers import (
    FAST,
    active_controller,
    admin,
    all_brokers_seen,
    make_cluster,
    metadata_of,
    wait_for,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

pytestmark = pytest.mark.cluster


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    with make_cluster(tmp_path, FAST) as c:
        active_controller(c)
        all_brokers_seen(c)
        yield c


def pipelined(client: Any, names: list[str]) -> None:
    """One CreateTopics per topic, all sent before any answer is awaited; each must succeed."""
    futures = [client.create_topics([NewTopic(n, 1, 1)], request_timeout=30)[n] for n in names]
    for f in futures:
        f.result(60)


def leaders(cluster: LocalCluster, names: set[str], via: int = 1) -> dict[str, tuple[int, int]]:
    """topic -> (leader id, leader epoch) of partition 0, as node `via` answers Metadata."""
    return {
        t.name: (t.partitions[0].leader_id, t.partitions[0].leader_epoch)
        for t in metadata_of(cluster, via).topics
        if t.name in names
    }


def hosted_dir(cluster: LocalCluster, node: int, topic: str) -> str | None:
    """The directory of `topic`-0 in `node`'s log dirs (None: none)."""
    found = glob.glob(os.path.join(cluster.data_dir(node), "**", f"{topic}-0"), recursive=True)
    return found[0] if found else None


def hosted_epochs(cluster: LocalCluster, node: int, topic: str) -> list[tuple[int, int]] | None:
    """The leader-epoch checkpoint of `topic`-0 in `node`'s log dirs (None: no such dir or
    no checkpoint yet)."""
    found = hosted_dir(cluster, node, topic)
    path = os.path.join(found or "", "leader-epoch-checkpoint")
    return checkpoints.read_epochs(path) if found and os.path.exists(path) else None


def test_many_creations_at_once_all_succeed_are_listed_everywhere_and_hosted_by_their_leaders(
    cluster: LocalCluster,
) -> None:
    ctrl = active_controller(cluster)
    tag = uuid.uuid4().hex[:6]
    names = [f"p-{tag}-{i}" for i in range(120)]
    pipelined(admin(cluster.bootstrap_of(ctrl)), names)
    errors: list[BaseException] = []

    def one_per_request(t: int) -> None:
        client = admin(cluster.bootstrap_of(cluster.ids[t % 3]))  # forwarded too
        try:
            for i in range(30):
                name = f"c-{tag}-{t}-{i}"
                client.create_topics([NewTopic(name, 1, 1)], request_timeout=30)[name].result(60)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=one_per_request, args=(t,)) for t in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not errors, errors
    every = set(names) | {f"c-{tag}-{t}-{i}" for t in range(6) for i in range(30)}
    for node in cluster.ids:
        wait_for(
            f"every topic listed by node {node}",
            lambda n=node: every <= {t.name for t in metadata_of(cluster, n).topics},
        )
    placed = leaders(cluster, every)
    assert len(placed) == len(every) and {leader for leader, _ in placed.values()} == {1, 2, 3}
    for topic, (leader, _epoch) in placed.items():
        wait_for(
            f"{topic} hosted by its leader {leader}",
            lambda t=topic, n=leader: hosted_dir(cluster, n, t) is not None,
        )
    # A new partition's checkpoint is made by its first flush or its close (leader_epoch.py
    # `create_file`): a clean stop makes every one, holding the epoch it was led in.
    cluster.stop()
    for topic, (leader, epoch) in placed.items():
        assert hosted_epochs(cluster, leader, topic) == [(epoch, 0)], topic


def test_topics_created_just_before_their_leader_is_killed_are_all_back_after_its_restart(
    cluster: LocalCluster,
) -> None:
    ctrl = active_controller(cluster)
    victim = next(i for i in cluster.ids if i != ctrl)
    names = [f"k-{uuid.uuid4().hex[:6]}-{i}" for i in range(60)]
    pipelined(admin(cluster.bootstrap_of(ctrl)), names)
    cluster.kill(victim)  # the moment every creation was answered
    # asked of the controller: the victim may be node 1
    wait_for("the placement", lambda: len(leaders(cluster, set(names), ctrl)) == len(names))
    placed = leaders(cluster, set(names), ctrl)
    theirs = [t for t, (leader, _e) in placed.items() if leader == victim]
    assert theirs, "placement starts at a random broker: 60 one-partition topics reach each"
    cluster.start_node(victim)
    active_controller(cluster)
    wait_for(
        f"every topic listed by node {victim} after its restart",
        lambda: set(names) <= {t.name for t in metadata_of(cluster, victim).topics},
        30,
    )
    for topic in theirs:  # led again in a later epoch once it registered: the file says so
        wait_for(
            f"{topic} hosted again by node {victim}",
            lambda t=topic: (
                (now := leaders(cluster, {t}, ctrl)[t])[0] == victim
                and hosted_epochs(cluster, victim, t) == [(now[1], 0)]
            ),
            30,
        )
    topic = theirs[0]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic, b"after the kill")
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    try:
        got = wait_for("the record back", lambda: consumer.poll(1.0), 30)
        assert got.error() is None and got.value() == b"after the kill"
    finally:
        consumer.close()
