"""The metadata store of a three-voter quorum, in one process over loopback: three RaftDrivers,
each feeding a networked RaftMetadataStore, as `gregor serve` wires them (broker/cluster_member.py),
and each store polled as the broker's timer polls it.

- A controller that dies inside a metadata transaction: every node holds its records back; the
  next active controller aborts it; none of it is ever applied, anywhere.
- The time-based snapshot (`metadata.log.max.snapshot.interval.ms`) fires on every node with no
  further commit to replay.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gregor.controller.local import LocalController
from gregor.metadata import records as r
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.metadata.transactions import FAILOVER_REASON
from gregor.protocol.errors import KafkaError
from gregor.raft.node import NotLeader
from gregor.runtime.raft_driver import RaftDriver
from tests.kraft_net.helpers import wait_for

CLUSTER = "J8qXRwI-Qyi2G0guFTiuYw"
IDS = (1, 2, 3)
# Quick elections, but a fetch timeout well above the leader's fetch wait (500 ms): no
# election while the leader lives.
FAST = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "1500",
    "controller.quorum.election.backoff.max.ms": "300",
    "controller.quorum.request.timeout.ms": "1000",
    "controller.quorum.retry.backoff.ms": "20",
}


@dataclass
class Node:
    store: RaftMetadataStore
    driver: RaftDriver
    controller: LocalController
    poller: asyncio.Task[None] | None = None


async def drive(store: RaftMetadataStore) -> None:
    """What the broker's timer does with the store (runtime/timers.py `drive`)."""
    while True:
        deadline = store.poll(int(time.time() * 1000))
        delay_ms = (
            1000 if deadline is None else min(1000, max(0, deadline - int(time.time() * 1000)))
        )
        await asyncio.sleep(delay_ms / 1000)


async def start_quorum(root: Path, configs: dict[str, str]) -> dict[int, Node]:
    nodes: dict[int, Node] = {}
    ports = {}
    for i in IDS:
        store, raft_log, quorum_state, config = RaftMetadataStore.open_networked(
            str(root / f"node-{i}"), i, CLUSTER, IDS, configs={**FAST, **configs}
        )
        driver = RaftDriver(
            i,
            raft_log,
            quorum_state,
            config=config,
            cluster_id=CLUSTER,
            on_commit=store.on_committed,
            on_snapshot=store.on_snapshot,
            on_leader_change=store.on_leader_change,
        )
        store.attach(driver)
        nodes[i] = Node(store, driver, LocalController(store, i, {}))
        ports[i] = await driver.bind("127.0.0.1", 0)
    voters = {i: ("127.0.0.1", p) for i, p in ports.items()}
    for node in nodes.values():
        await node.driver.start(voters)
        node.poller = asyncio.ensure_future(drive(node.store))
    return nodes


async def stop(node: Node) -> None:
    if node.poller is not None:
        node.poller.cancel()
    node.store.close()
    await node.driver.stop(resign=True)


async def active(nodes: dict[int, Node]) -> Node:
    """The active controller, once every node follows it."""

    def settled() -> bool:
        leaders = [i for i, n in nodes.items() if n.store.is_active()]
        return len(leaders) == 1 and all(n.store.leader_id == leaders[0] for n in nodes.values())

    await wait_for("an active controller followed by all", settled)
    node = next(n for n in nodes.values() if n.store.is_active())
    node.controller.activate()  # what the controller's tick does on a new leader (node/active_controller.py)
    return node


async def create(nodes: dict[int, Node], name: str) -> int:
    """A topic of one partition, written on the active controller (again if leadership moved
    first, as a client retries NOT_CONTROLLER); its last offset."""
    for _ in range(20):
        node = await active(nodes)
        topic = r.TopicRecord(name=name, topic_id=uuid.uuid4())
        part = r.PartitionRecord(
            partition_id=0, topic_id=topic.topic_id, replicas=[1], isr=[1], leader=1
        )
        try:
            return node.store.commit([topic, part])
        except KafkaError:
            await asyncio.sleep(0.1)
    raise AssertionError(f"{name} could not be written")


def caught_up(nodes: dict[int, Node], offset: int) -> Callable[[], bool]:
    return lambda: all(n.store.applied >= offset for n in nodes.values())


def test_a_transaction_left_open_by_a_dead_controller_is_aborted_everywhere(tmp_path: Path) -> None:
    async def main() -> None:
        nodes = await start_quorum(tmp_path, {})
        try:
            leader = await active(nodes)
            tid = r.TopicRecord(name="half", topic_id=uuid.uuid4())
            first_batch = [r.BeginTransactionRecord(name="create topics"), tid]
            first_batch += [
                r.PartitionRecord(
                    partition_id=p, topic_id=tid.topic_id, replicas=[1], isr=[1], leader=1
                )
                for p in range(3)
            ]
            # The controller writes the first batch of a transaction, then dies.
            last = leader.driver.append([r.encode(rec) for rec in first_batch])
            assert not isinstance(last, NotLeader)
            await wait_for(
                "the first batch on every node",
                lambda: all(n.store.in_transaction for n in nodes.values()),
            )
            assert all("half" not in n.store.topics for n in nodes.values()), "held back"
            assert all(n.store.applied < last - len(first_batch) + 1 for n in nodes.values())
            dead = next(i for i, n in nodes.items() if n is leader)
            await stop(nodes.pop(dead))

            successor = await active(nodes)
            abort = successor.store.last_appended
            await wait_for("the Abort on both survivors", caught_up(nodes, abort))
            for node in nodes.values():
                assert not node.store.in_transaction and "half" not in node.store.topics
            await wait_for(
                "a later write everywhere", caught_up(nodes, await create(nodes, "whole"))
            )
            assert all(
                "whole" in n.store.topics and "half" not in n.store.topics for n in nodes.values()
            )
            recs = [r.decode(b.records[0]) for b in successor.driver.log.read(abort, 1 << 20)[:1]]
            assert recs == [r.AbortTransactionRecord(reason=FAILOVER_REASON)]
        finally:
            for node in nodes.values():
                await stop(node)

    asyncio.run(main())


def test_the_time_based_snapshot_fires_without_another_commit(tmp_path: Path) -> None:
    async def main() -> None:
        nodes = await start_quorum(tmp_path, {"metadata.log.max.snapshot.interval.ms": "1500"})
        try:
            await wait_for(
                "the first topic everywhere", caught_up(nodes, await create(nodes, "first"))
            )
            last = await create(nodes, "second")
            await wait_for("the second topic everywhere", caught_up(nodes, last))
            ends = {i: n.driver.log.end_offset for i, n in nodes.items()}

            def covered(node: Any) -> bool:
                snap = node.driver.log.latest_snapshot()
                return snap is not None and snap.end_offset > last

            await wait_for(
                "a snapshot covering the second topic on every node",
                lambda: all(map(covered, nodes.values())),
                8,
            )
            assert {i: n.driver.log.end_offset for i, n in nodes.items()} == ends, (
                "nothing was written since"
            )
            for node in nodes.values():
                snap = node.driver.log.latest_snapshot()
                assert snap is not None and node.driver.log.start_offset == snap.end_offset
        finally:
            for node in nodes.values():
                await stop(node)

    asyncio.run(main())
