"""The group and transaction coordinators look at their internal topic's partitions only when
the partition hosting says something they depend on may have changed (hosting.py's `changed`):
a change of another topic costs them no lookup, and none of the changes that move what they
coordinate is missed (the topic created after start, leadership moving away and back, a
snapshot loaded, a partition whose log is made later on the worker thread).

Node 2 of a three-broker cluster, in process: an active controller (node 1, a one-voter KRaft
node polled by hand, as bench/metadata_replay_bench.py) commits, and node 2's metadata store is
fed each commit (decoding it, as a node that did not append it does), its hosting applies it
(`on_replayed`) over a log manager in a temporary directory, and its coordinators follow."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gregor.broker.config import BrokerConfig
from gregor.clock import ManualClock
from gregor.controller.admin import Admin, TopicSpec
from gregor.controller.local import LocalController
from gregor.coordinator.runtime import OFFSETS_TOPIC, GroupCoordinator
from gregor.coordinator.txn.runtime import TRANSACTION_TOPIC, TransactionCoordinator
from gregor.metadata import records as r
from gregor.metadata.config_view import BrokerConfigView
from gregor.metadata.raft_store import RaftMetadataStore
from gregor.metadata.snapshot import encode_snapshot
from gregor.node.active_controller import ActiveControllerCore
from gregor.protocol import api_keys
from gregor.protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
from gregor.raft.config import RaftConfig
from gregor.raft.log import MemoryLog, SnapshotId
from gregor.raft.node import LoadSnapshot, RaftNode
from gregor.raft.store import MemoryQuorumStateStore
from gregor.replication.hosting import PartitionHosting
from gregor.replication.partition import ReplicaManager
from gregor.storage.log_manager import LogManager

CLUSTER, NOW = "J8qXRwI-Qyi2G0guFTiuYw", 1_000
INTERNAL = (OFFSETS_TOPIC, TRANSACTION_TOPIC)
Job = tuple[Callable[[], Any], Callable[[Any], None]]


class Node2:
    """Node 2's follower side of a cluster whose active controller is node 1."""

    def __init__(self, tmp_path: Path, *, worker: bool = False) -> None:
        raft = RaftNode(
            1, [1], MemoryLog(), MemoryQuorumStateStore(), random.Random(0), NOW,
            RaftConfig(append_linger_ms=0), CLUSTER,
        )  # fmt: skip
        self.raft = raft
        self.controller_store = RaftMetadataStore(None, CLUSTER, clock=lambda: NOW)
        self.controller_store.local_id = 1

        class Quorum:
            node = raft

            def append(self, records: Any) -> Any:
                return raft.append(records, NOW)

        self.controller_store.attach(Quorum())  # type: ignore[arg-type]
        self.store = RaftMetadataStore(None, CLUSTER, clock=lambda: NOW)
        self.store.local_id = 2

        class Follower:
            node = raft  # the high watermark is known: caught up

        self.store.attach(Follower())  # type: ignore[arg-type]
        self.feeding = True  # node 2 is given what node 1 commits
        clock = ManualClock(NOW)
        values = BrokerConfig.load(None, {"log.dirs": str(tmp_path), "node.id": "2"}).values
        view = BrokerConfigView(self.store, 2, values)
        self.logs = LogManager([str(tmp_path)], config_for=view.log_config_for, clock=clock)
        self.logs.startup()
        self.replicas = ReplicaManager(2, self.logs)
        self.hosting = PartitionHosting(2, self.store, self.replicas, self.logs, view, clock)
        self.jobs: list[Job] = []  # the worker thread's, run when the test says
        if worker:
            self.hosting.in_thread = lambda work, done: self.jobs.append((work, done))
        self.store.on_replayed = self.hosting.apply_soon
        controller = LocalController(self.controller_store, 1, {}, rng=random.Random(0))
        self.core = ActiveControllerCore(1, self.controller_store, controller)
        self.run()
        self.core.poll(NOW)
        self.run()
        for b in (1, 2, 3):
            self._register(b)
        self.admin = Admin(self.controller_store, controller, [1, 2, 3], {}, 1)
        self.groups = GroupCoordinator(2, self.store, self.replicas, self.admin, view.value, self.hosting.apply)  # fmt: skip
        self.txns = TransactionCoordinator(
            2, self.store, self.replicas, self.admin, view.value, self.hosting.apply,
            lambda: 0, lambda *_a: None,
        )  # fmt: skip
        self.hosting.on_applied += [self.groups.on_metadata, self.txns.on_metadata]
        self.hosting.apply()
        # lookups of an internal topic's partitions in the replica manager, by topic
        self.lookups = dict.fromkeys(INTERNAL, 0)
        get = self.replicas.get

        def counted(topic: str, index: int) -> Any:
            if topic in self.lookups:
                self.lookups[topic] += 1
            return get(topic, index)

        self.replicas.get = counted  # type: ignore[method-assign]

    def _register(self, b: int) -> None:
        R = BrokerRegistrationRequest
        registration = R(
            broker_id=b, cluster_id=CLUSTER, incarnation_id=uuid.UUID(int=b),
            listeners=[R.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
            features=[], rack=None, log_dirs=[uuid.UUID(int=9)],
        )  # fmt: skip
        answer = self.core.handle(api_keys.BROKER_REGISTRATION, 3, registration, NOW)
        self.run()
        beat = BrokerHeartbeatRequest(
            broker_id=b, broker_epoch=answer.value.broker_epoch,
            current_metadata_offset=self.controller_store.applied, want_fence=False,
            want_shut_down=False, offline_log_dirs=[],
        )  # fmt: skip
        self.core.handle(api_keys.BROKER_HEARTBEAT, 1, beat, NOW)
        self.run()

    def run(self) -> None:
        """Node 1 commits what it appended; node 2 replays it (and hosts at once)."""
        for _ in range(8):
            effects = self.raft.poll(NOW)
            if effects.leader_change is not None:
                self.controller_store.on_leader_change(effects.leader_change)
                self.store.on_leader_change(effects.leader_change)
            self.controller_store.on_committed(effects.committed)
            if self.feeding:
                self.store.on_committed(effects.committed)
            if not effects.committed and effects.leader_change is None:
                return

    def create(self, name: str, assignments: dict[int, list[int]]) -> None:
        (outcome,) = self.admin.create_topics([TopicSpec(name, assignments=assignments)])
        assert not isinstance(outcome, Exception), outcome
        self.run()

    def move_leader(self, topic: str, partition: int, leader: int) -> None:
        topic_id = self.controller_store.topics[topic].topic_id
        rec = r.PartitionChangeRecord(partition_id=partition, topic_id=topic_id, leader=leader)
        self.controller_store.commit([rec])
        self.run()

    def run_jobs(self) -> None:
        """The worker thread's jobs, one at a time (what is asked meanwhile makes the next)."""
        while self.jobs:
            work, done = self.jobs.pop(0)
            done(work())

    def led(self) -> dict[str, dict[int, int]]:
        """By internal topic, the loaded partitions with their coordinator epochs."""
        out: dict[str, dict[int, int]] = {}
        for name, runtime in ((OFFSETS_TOPIC, self.groups.runtime), (TRANSACTION_TOPIC, self.txns.runtime)):  # fmt: skip
            while runtime.loading:
                (self.groups if runtime is self.groups.runtime else self.txns).poll(NOW)
            out[name] = {i: runtime.epoch(i) for i in sorted(runtime.contexts)}
        return out

    def close(self) -> None:
        self.logs.shutdown()


@pytest.fixture
def node2(tmp_path: Path) -> Any:
    node = Node2(tmp_path)
    yield node
    node.close()


def both_led_by_2(node: Node2, partitions: int = 3) -> None:
    for name in INTERNAL:
        node.create(name, {i: [2, 1] for i in range(partitions)})


def test_an_unrelated_topic_costs_the_coordinators_no_lookup(node2: Node2) -> None:
    both_led_by_2(node2)
    assert node2.led() == {name: {0: 0, 1: 0, 2: 0} for name in INTERNAL}
    node2.lookups = dict.fromkeys(INTERNAL, 0)
    node2.create("hosted-here", {i: [2] for i in range(4)})
    node2.create("elsewhere", {0: [1], 1: [3]})
    assert len(node2.replicas.partitions) == 6 + 4  # the new topic's partitions are hosted
    assert node2.lookups == dict.fromkeys(INTERNAL, 0)
    assert node2.led() == {name: {0: 0, 1: 0, 2: 0} for name in INTERNAL}


def test_the_topics_created_after_start_are_loaded(node2: Node2) -> None:
    assert node2.led() == {name: {} for name in INTERNAL}
    node2.create("other", {0: [2]})
    both_led_by_2(node2, 2)
    assert node2.led() == {name: {0: 0, 1: 0} for name in INTERNAL}


def test_leadership_moving_away_unloads_and_coming_back_loads_again(node2: Node2) -> None:
    both_led_by_2(node2)
    for name in INTERNAL:
        node2.move_leader(name, 1, 1)
    assert node2.led() == {name: {0: 0, 2: 0} for name in INTERNAL}
    node2.create("unrelated", {0: [2]})  # nothing moves back by itself
    assert node2.led() == {name: {0: 0, 2: 0} for name in INTERNAL}
    for name in INTERNAL:
        node2.move_leader(name, 1, 2)
    assert node2.led() == {name: {0: 0, 1: 2, 2: 0} for name in INTERNAL}


def test_a_snapshot_loaded_is_looked_at_whole(node2: Node2) -> None:
    """Node 2 misses the creation of the internal topics and their leadership moves, then
    loads a snapshot of node 1's image: every change since comes with it."""
    node2.create("before", {0: [2]})
    both_led_by_2(node2)
    node2.move_leader(OFFSETS_TOPIC, 0, 1)
    assert node2.led() == {OFFSETS_TOPIC: {1: 0, 2: 0}, TRANSACTION_TOPIC: {0: 0, 1: 0, 2: 0}}
    node2.feeding = False
    node2.move_leader(OFFSETS_TOPIC, 0, 2)  # back to node 2 (epoch 2)
    node2.move_leader(TRANSACTION_TOPIC, 2, 1)  # away from it
    image = node2.controller_store.image
    data = encode_snapshot(image, image.epoch, 0, NOW)
    node2.store.on_snapshot(LoadSnapshot(SnapshotId(image.offset + 1, image.epoch), data))
    assert node2.led() == {OFFSETS_TOPIC: {0: 2, 1: 0, 2: 0}, TRANSACTION_TOPIC: {0: 0, 1: 0}}


def test_a_partition_whose_log_is_made_later_is_loaded_then(tmp_path: Path) -> None:
    node2 = Node2(tmp_path, worker=True)
    try:
        both_led_by_2(node2)
        assert node2.led() == {name: {} for name in INTERNAL}  # their logs are being made
        node2.create("unrelated", {0: [1]})
        node2.run_jobs()  # made on the worker thread: the next apply hosts them
        assert node2.led() == {name: {0: 0, 1: 0, 2: 0} for name in INTERNAL}
    finally:
        node2.close()
