"""The coordinator runtime in-process over real storage (a `BrokerServer` built but not
listening): records land in `__consumer_offsets` in Kafka's formats, loading replays them step
by step with COORDINATOR_LOAD_IN_PROGRESS meanwhile, timers complete parked requests."""

from __future__ import annotations

from pathlib import Path

from core_harness import PROTOCOLS

from gregor.broker.broker import BrokerServer
from gregor.broker.config import BrokerConfig
from gregor.clock import SYSTEM_CLOCK, Clock, ManualClock
from gregor.coordinator.group import codes
from gregor.coordinator.group.records import (
    GroupMetadataRecord,
    OffsetCommitRecord,
    decode,
    partition_for,
)
from gregor.coordinator.group.results import JoinRequest, OffsetCommitRequest, SyncRequest
from gregor.coordinator.runtime import OFFSETS_TOPIC
from gregor.protocol.records.batch import iter_headers
from gregor.protocol.records.records import iter_records
from gregor.replication.pending import Pending

NOW = 1_700_000_000_000


def broker(tmp_path: Path, clock: Clock = SYSTEM_CLOCK, **extra: str) -> BrokerServer:
    config = BrokerConfig.load(
        None,
        {
            "log.dirs": str(tmp_path / "logs"),
            "offsets.topic.num.partitions": "3",
            "offsets.load.buffer.size": "2000",
            "group.initial.rebalance.delay.ms": "3000",
            **extra,
        },
    )
    b = BrokerServer(config, clock=clock)
    b.logs.startup()
    b.services.apply_metadata()
    return b


def join(member_id: str = "", group: str = "g") -> JoinRequest:
    return JoinRequest(
        group, member_id, None, "client", "/127.0.0.1", 10_000, 20_000, "consumer", PROTOCOLS
    )


def test_write_load_and_timers_over_real_storage(tmp_path: Path) -> None:
    b = broker(tmp_path)
    groups = b.services.groups
    assert groups.coordinator_error("g") == codes.NOT_COORDINATOR, "no __consumer_offsets yet"
    groups.ensure_offsets_topic()
    info = b.store.topics[OFFSETS_TOPIC]
    assert info.partitions == 3 and info.configs["cleanup.policy"] == "compact"
    assert groups.coordinator_error("g") == codes.NONE, "empty partitions load at once"

    # A member joins; the initial rebalance delay parks it until a poll at its deadline.
    first = groups.join_group(join(), NOW)
    assert not isinstance(first, Pending) and first.error == codes.MEMBER_ID_REQUIRED
    parked = groups.join_group(join(first.member_id), NOW)
    assert isinstance(parked, Pending) and not parked.done
    deadline = groups.poll(NOW + 1)
    assert deadline == NOW + 3000 and not parked.done
    groups.poll(NOW + 3000)
    assert parked.done and parked.value.generation_id == 1
    me = parked.value.member_id
    synced = groups.sync_group(
        SyncRequest("g", 1, me, None, None, None, {me: b"assigned"}), NOW + 3001
    )
    assert isinstance(synced, Pending) and synced.done and synced.value.assignment == b"assigned"
    for i in range(100):
        res = groups.commit_offsets(
            OffsetCommitRequest("g", 1, me, None, -1, [("t", i % 4, i, 0, f"m{i}")]), NOW + 4000 + i
        )
        assert res.error == codes.NONE
    groups.commit_offsets(
        OffsetCommitRequest("solo", -1, "", None, -1, [("t", 0, 7, -1, None)]), NOW + 5000
    )

    # On disk: Kafka's records, in the group's partition.
    p = b.replicas.get(OFFSETS_TOPIC, partition_for("g", 3))
    assert p is not None
    decoded = [decode(r.key, r.value) for _, r in iter_records(p.log.read_bytes(0, 1 << 20))]  # type: ignore[arg-type]
    assert isinstance(decoded[0], GroupMetadataRecord) and decoded[0].value is not None
    assert decoded[0].value.members[0].assignment == b"assigned"
    assert sum(isinstance(r, OffsetCommitRecord) and r.group_id == "g" for r in decoded) == 100
    b.logs.shutdown()

    # A restart: loading is a replay, a few KB per poll, refusing requests meanwhile.
    b2 = broker(tmp_path)
    g2 = b2.services.groups
    assert g2.coordinator_error("g") == codes.COORDINATOR_LOAD_IN_PROGRESS
    assert g2.fetch_offsets("g", None).error == codes.COORDINATOR_LOAD_IN_PROGRESS
    assert g2.heartbeat("g", 1, me, None, NOW + 6000) == codes.COORDINATOR_LOAD_IN_PROGRESS
    assert g2.list_groups()[0] == codes.COORDINATOR_LOAD_IN_PROGRESS
    polls = 0
    while g2.runtime.loading:
        deadline = g2.poll(NOW + 6000)
        polls += 1
        if g2.runtime.loading:
            assert deadline == NOW + 6000, "more to do: poll again at once"
    assert polls > 2, "loaded in steps"
    fetched = {
        (o.topic, o.partition): (o.offset, o.metadata) for o in g2.fetch_offsets("g", None).offsets
    }
    assert fetched == {("t", q): (96 + q, f"m{96 + q}") for q in range(4)}
    assert [o.offset for o in g2.fetch_offsets("solo", None).offsets] == [7]
    described = g2.describe_group("g")
    assert not isinstance(described, int) and described is not None
    assert (described.state, [m.member_id for m in described.members]) == ("Stable", [me])
    assert g2.heartbeat("g", 1, me, None, NOW + 6000) == codes.NONE, "the member carries on"
    # Silent for a session (10 s from the load): evicted by the timer, the group empty.
    g2.poll(NOW + 16_001)
    assert g2.describe_group("g").state == "Empty"  # type: ignore[union-attr]
    b2.logs.shutdown()


def test_offsets_topic_replication_factor_is_capped_with_one_broker(tmp_path: Path) -> None:
    b = broker(tmp_path, **{"offsets.topic.replication.factor": "3"})
    b.services.groups.ensure_offsets_topic()
    assert all(len(r) == 1 for r in b.store.topics[OFFSETS_TOPIC].replicas)
    b.logs.shutdown()


def test_offsets_of_a_deleted_topic_are_removed(tmp_path: Path) -> None:
    from gregor.controller.admin import TopicSpec

    b = broker(tmp_path)
    b.services.groups.ensure_offsets_topic()
    for topic in ("gone", "kept"):
        b.services.admin.create_topic(TopicSpec(topic, 2, 1))
    b.services.apply_metadata()
    offsets = [("gone", 0, 5, -1, ""), ("gone", 1, 6, -1, ""), ("kept", 0, 7, -1, "")]
    assert (
        b.services.groups.commit_offsets(
            OffsetCommitRequest("g", -1, "", None, -1, offsets), NOW
        ).error
        == codes.NONE
    )
    b.services.admin.delete_topic("gone")
    b.services.apply_metadata()
    assert [(o.topic, o.offset) for o in b.services.groups.fetch_offsets("g", None).offsets] == [
        ("kept", 7)
    ]
    b.logs.shutdown()
    b2 = broker(tmp_path)
    while b2.services.groups.runtime.loading:
        b2.services.groups.poll(NOW)
    assert [(o.topic, o.offset) for o in b2.services.groups.fetch_offsets("g", None).offsets] == [
        ("kept", 7)
    ]
    b2.logs.shutdown()


def test_a_new_leader_epoch_reloads_the_partition(tmp_path: Path) -> None:
    """Leadership that comes back in a later leader epoch is a new coordinator: the shard is
    unloaded (a parked JoinGroup hears NOT_COORDINATOR) and loaded again from the log."""
    b = broker(tmp_path)
    groups = b.services.groups
    groups.ensure_offsets_topic()
    index = partition_for("g", 3)
    p = b.replicas.get(OFFSETS_TOPIC, index)
    assert p is not None
    offsets = [("t", 0, 42, -1, "m")]
    assert (
        groups.commit_offsets(OffsetCommitRequest("g", -1, "", None, -1, offsets), NOW).error
        == codes.NONE
    )
    first = groups.join_group(join(), NOW)
    parked = groups.join_group(join(first.member_id), NOW)  # type: ignore[union-attr]
    assert isinstance(parked, Pending) and not parked.done
    shard = groups.runtime.active(index)

    p.leader_epoch += 1
    groups.on_metadata(NOW + 1)
    assert parked.done and parked.value.error == codes.NOT_COORDINATOR
    assert groups.coordinator_error("g") == codes.COORDINATOR_LOAD_IN_PROGRESS
    while groups.runtime.loading:
        groups.poll(NOW + 2)
    assert (
        groups.runtime.active(index) is not shard and groups.runtime.epoch(index) == p.leader_epoch
    )
    assert [(o.topic, o.offset) for o in groups.fetch_offsets("g", None).offsets] == [("t", 42)]
    groups.on_metadata(NOW + 3)
    assert groups.coordinator_error("g") == codes.NONE, "the same epoch again: nothing reloads"
    b.logs.shutdown()


def test_a_partition_named_here_but_not_hosted_yet_is_loading_not_elsewhere(
    tmp_path: Path,
) -> None:
    """The metadata names this broker leader of the group's partition while its files are still
    being made (a new `__consumer_offsets` in a cluster): COORDINATOR_LOAD_IN_PROGRESS, which
    clients retry in place, not NOT_COORDINATOR, which fails a synchronous commit."""
    b = broker(tmp_path)
    groups = b.services.groups
    groups.ensure_offsets_topic()
    index = partition_for("g", 3)
    assert b.store.leader_of(OFFSETS_TOPIC, index) == b.node_id
    groups.runtime.contexts.pop(index)
    assert groups.coordinator_error("g") == codes.NOT_COORDINATOR, "hosted, not coordinated"
    b.replicas.remove(OFFSETS_TOPIC, index)  # as before hosting it
    assert groups.coordinator_error("g") == codes.COORDINATOR_LOAD_IN_PROGRESS
    b.logs.shutdown()


def test_a_write_larger_than_max_message_bytes_goes_in_several_batches(tmp_path: Path) -> None:
    """The expiry of many offsets writes more tombstones than one batch under the partition's
    max.message.bytes can hold: they go in several batches, each replayed once appended."""
    from gregor.controller.admin import TopicSpec

    limit = 2000
    b = broker(  # the partitions load, and the expiry starts, at NOW
        tmp_path,
        ManualClock(NOW),
        **{"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "1000"},
    )
    configs: dict[str, str | None] = {"cleanup.policy": "compact", "max.message.bytes": str(limit)}
    b.services.admin.create_topic(TopicSpec(OFFSETS_TOPIC, 3, 1, configs=configs))
    b.services.apply_metadata()
    groups = b.services.groups
    for i in range(10):  # 100 offsets, ten per commit (each commit is one batch)
        offsets = [("t", 10 * i + q, 7, -1, "") for q in range(10)]
        assert (
            groups.commit_offsets(OffsetCommitRequest("solo", -1, "", None, -1, offsets), NOW).error
            == codes.NONE
        )
    p = b.replicas.get(OFFSETS_TOPIC, partition_for("solo", 3))
    assert p is not None
    before = p.log.log_end_offset

    groups.poll(NOW + 61_000)  # the expiry run: 100 tombstones
    assert groups.fetch_offsets("solo", None).offsets == []
    sizes = [h.size for _, h in iter_headers(p.log.read_bytes(before, 1 << 20))]
    assert len(sizes) >= 2 and max(sizes) <= limit
    assert p.log.log_end_offset - before >= 100
    b.logs.shutdown()

    b2 = broker(tmp_path)
    while b2.services.groups.runtime.loading:
        b2.services.groups.poll(NOW + 62_000)
    assert b2.services.groups.fetch_offsets("solo", None).offsets == []
    b2.logs.shutdown()
