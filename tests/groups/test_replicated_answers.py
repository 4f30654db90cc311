"""The group coordinator answers a write only once its records are replicated: over real storage
(a `BrokerServer` built but not listening), the group's `__consumer_offsets` partition gets a
second ISR member that has fetched nothing, so its high watermark stays behind the coordinator's
writes until the test plays that follower's Fetch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gregor.broker.broker import BrokerServer
from gregor.broker.config import BrokerConfig
from gregor.coordinator.group import codes
from gregor.coordinator.group.records import partition_for
from gregor.coordinator.group.results import OffsetCommitRequest, PartitionErrors
from gregor.coordinator.runtime import OFFSETS_TOPIC
from gregor.replication.partition import Partition, ReplicaState
from gregor.replication.pending import Pending

NOW = 1_700_000_000_000
FOLLOWER = 2


def broker(tmp_path: Path) -> BrokerServer:
    config = BrokerConfig.load(
        None, {"log.dirs": str(tmp_path / "logs"), "offsets.topic.num.partitions": "3"}
    )
    b = BrokerServer(config)
    b.logs.startup()
    b.services.apply_metadata()
    b.services.groups.ensure_offsets_topic()
    return b


def commit(
    b: BrokerServer, offset: int, now: int = NOW, group: str = "g"
) -> PartitionErrors | Pending:
    return b.services.groups.commit_offsets(
        OffsetCommitRequest(group, -1, "", None, -1, [("t", 0, offset, -1, None)]), now
    )


def hold_back(b: BrokerServer, group: str = "g") -> Partition:
    """The group's partition gets an ISR member that has fetched nothing: the HW stays put."""
    p = b.replicas.get(OFFSETS_TOPIC, partition_for(group, 3))
    assert p is not None and p.is_leader
    p.replicas, p.isr = [b.node_id, FOLLOWER], [b.node_id, FOLLOWER]
    p.followers = {FOLLOWER: ReplicaState(FOLLOWER)}
    return p


def follower_fetches(p: Partition, offset: int) -> None:
    """The follower's Fetch at `offset`: its log end, so the HW may move up to it."""
    p.update_follower_fetch_state(p.followers[FOLLOWER], offset, 0, NOW, p.log.log_end_offset, -1)


def committed(b: BrokerServer, group: str = "g") -> int:
    res = b.services.groups.fetch_offsets(group, [("t", [0])])
    assert not isinstance(res, Pending)
    return res.offsets[0].offset


def test_an_offset_commit_is_answered_once_replicated_in_offset_order(tmp_path: Path) -> None:
    b = broker(tmp_path)
    first = commit(b, 5)
    assert isinstance(first, PartitionErrors) and first.error == codes.NONE, (
        "one replica: answered at once"
    )
    p = hold_back(b)
    hw = p.high_watermark
    answered: list[tuple[str, Any]] = []

    a = commit(b, 10, NOW + 1)
    end_a = p.log.log_end_offset
    c = commit(b, 20, NOW + 2)
    end_c = p.log.log_end_offset
    assert isinstance(a, Pending) and isinstance(c, Pending) and not a.done and not c.done
    assert end_a > hw and end_c > end_a
    a.add_done_callback(lambda v: answered.append(("a", v)))
    c.add_done_callback(lambda v: answered.append(("c", v)))
    # A read made meanwhile waits too: what it would tell may not survive a failover yet.
    read = b.services.groups.fetch_offsets("g", [("t", [0])], now_ms=NOW + 3)
    assert isinstance(read, Pending) and not read.done
    read.add_done_callback(lambda v: answered.append(("read", v)))

    follower_fetches(p, end_a - 1)  # not all of the first commit's batch
    assert answered == []
    follower_fetches(p, end_a)
    assert p.high_watermark == end_a
    assert [name for name, _ in answered] == ["a"] and answered[0][1].partitions == [
        ("t", 0, codes.NONE)
    ]
    follower_fetches(p, end_c)
    assert [name for name, _ in answered] == ["a", "c", "read"]
    assert answered[2][1].offsets[0].offset == 20
    # Nothing left to replicate: answered at once again.
    assert committed(b) == 20
    b.logs.shutdown()


def test_leadership_lost_before_replication_answers_not_coordinator(tmp_path: Path) -> None:
    b = broker(tmp_path)
    p = hold_back(b)
    held = commit(b, 7)
    heartbeat = b.services.groups.heartbeat(
        "g", -1, "m", None, NOW
    )  # no records, but after the commit
    assert isinstance(held, Pending) and isinstance(heartbeat, Pending)
    reg = p.registration
    assert reg is not None
    p.make_follower(
        replace(
            reg,
            leader=FOLLOWER,
            leader_epoch=reg.leader_epoch + 1,
            partition_epoch=reg.partition_epoch + 1,
        )
    )
    assert held.done and held.value.error == codes.NOT_COORDINATOR
    assert held.value.partitions == [("t", 0, codes.NOT_COORDINATOR)]
    assert heartbeat.done and heartbeat.value == codes.NOT_COORDINATOR
    b.services.groups.on_metadata(NOW + 1)  # the coordinator unloads the partition
    assert b.services.groups.coordinator_error("g") == codes.NOT_COORDINATOR
    b.logs.shutdown()


def test_unloading_fails_held_answers_and_the_timeout_is_coordinator_not_available(
    tmp_path: Path,
) -> None:
    b = broker(tmp_path)
    p = hold_back(b)
    woken: list[int] = []
    b.services.groups.wakeup = lambda: woken.append(1)
    b.services.groups.poll(NOW)
    held = commit(b, 7, NOW)
    assert isinstance(held, Pending)
    timeout = int(b.services.config_value("offsets.commit.timeout.ms"))
    assert timeout == 5000 and woken, "the held answer's deadline brings the next poll forward"
    assert b.services.groups.poll(NOW + 1) == NOW + timeout
    assert not held.done
    b.services.groups.poll(NOW + timeout)
    assert held.done and held.value.error == codes.COORDINATOR_NOT_AVAILABLE
    # The record stays in the log: once replicated, it is the committed offset, as in Kafka.
    follower_fetches(p, p.log.log_end_offset)
    assert committed(b) == 7

    late = commit(b, 9, NOW + timeout)
    assert isinstance(late, Pending)
    b.services.groups.runtime.unload(partition_for("g", 3))
    assert late.done and late.value.error == codes.NOT_COORDINATOR
    b.logs.shutdown()
