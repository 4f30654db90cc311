"""The controller in the style of Kafka's ReplicationControlManagerTest: feed requests, check the
records returned, replay them, check the image."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from gregor.controller import quorum_controller as qc
from gregor.controller.quorum_controller import (
    BrokerHeartbeat,
    BrokerRegistration,
    ControllerConfig,
    IsrChange,
    Listener,
    QuorumController,
    TopicRequest,
)
from gregor.metadata import records as r
from gregor.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError

SESSION = 9000


class Ctx:
    """A controller whose records are committed (replayed) as soon as they are returned."""

    def __init__(self, brokers: int = 3, seed: int = 0, **static: str) -> None:
        ids = iter(range(1, 10_000))
        self.c = QuorumController(
            ControllerConfig(SESSION, static),
            new_uuid=lambda: uuid.UUID(int=next(ids)),
            rng=random.Random(seed),
        )
        self.now = 0
        self.commit(qc.bootstrap_records())
        for b in range(1, brokers + 1):
            self.register(b)
            self.unfence(b)

    def commit(self, records: list[Any]) -> list[Any]:
        start = self.c.image.offset + 1
        # Every record goes through the wire format on its way to the image.
        self.c.replay([(r.decode(r.encode(rec)), start + i, 1) for i, rec in enumerate(records)])
        return records

    def run(self, result: Any) -> Any:
        self.commit(result.records)
        return result.response

    def register(self, b: int, incarnation: int = 0) -> int:
        req = BrokerRegistration(
            b, uuid.UUID(int=1000 * b + incarnation), [Listener("PLAINTEXT", f"h{b}", 9092)]
        )
        res = self.c.register_broker(req, self.now, self.c.image.offset + 1)
        assert res.response.error_code == 0
        self.commit(res.records)
        return int(res.response.broker_epoch)

    def heartbeat(self, b: int, **kw: Any) -> Any:
        reg = self.c.image.brokers[b]
        return self.c.heartbeat(BrokerHeartbeat(b, reg.epoch, self.c.image.offset, **kw), self.now)

    def unfence(self, b: int) -> None:
        assert self.run(self.heartbeat(b)).is_fenced is False

    def part(self, name: str, i: int = 0) -> Any:
        p = self.c.image.partition(name, i)
        assert p is not None
        return p


def test_bootstrap_and_registration() -> None:
    ctx = Ctx(brokers=0)
    assert ctx.c.image.features == {"metadata.version": qc.DEFAULT_METADATA_VERSION}
    epoch = ctx.register(1)
    reg = ctx.c.image.brokers[1]
    assert reg.epoch == epoch == 1  # the offset of the RegisterBrokerRecord
    assert reg.fenced and reg.listeners[0].host == "h1"
    # Behind its registration record: stays fenced.
    res = ctx.c.heartbeat(BrokerHeartbeat(1, epoch, 0), 0)
    assert res.records == [] and res.response.is_fenced and not res.response.is_caught_up
    res = ctx.heartbeat(1)
    assert res.records == [
        r.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=epoch, fenced=-1)
    ]
    ctx.commit(res.records)
    assert ctx.c.image.unfenced_brokers() == [1]


def test_heartbeat_errors() -> None:
    ctx = Ctx(brokers=1)
    assert (
        ctx.c.heartbeat(BrokerHeartbeat(9, 1, 0), 0).response.error_code
        == errors.BY_NAME["BROKER_ID_NOT_REGISTERED"].code
    )
    assert (
        ctx.c.heartbeat(BrokerHeartbeat(1, 99, 0), 0).response.error_code
        == errors.BY_NAME["STALE_BROKER_EPOCH"].code
    )


def test_duplicate_registration_while_alive_then_new_incarnation_replaces() -> None:
    ctx = Ctx(brokers=1)
    req = BrokerRegistration(1, uuid.UUID(int=77))
    res = ctx.c.register_broker(req, ctx.now + 1, ctx.c.image.offset + 1)
    assert (
        res.response.error_code == errors.BY_NAME["DUPLICATE_BROKER_REGISTRATION"].code
        and res.records == []
    )
    ctx.now += SESSION
    ctx.run(ctx.c.tick(ctx.now))
    new_epoch = ctx.register(1, incarnation=5)
    assert ctx.c.image.brokers[1].incarnation_id == uuid.UUID(int=1005)
    assert ctx.c.image.brokers[1].epoch == new_epoch


def test_create_topics_places_round_robin() -> None:
    ctx = Ctx()
    res = ctx.c.create_topics([TopicRequest("t", 3, 2, configs={"retention.ms": "100"})])
    assert [type(x).__name__ for x in res.records] == ["TopicRecord", "ConfigRecord"] + [
        "PartitionRecord"
    ] * 3
    assert res.response[0].error_code == 0 and res.response[0].num_partitions == 3
    ctx.commit(res.records)
    parts = [ctx.part("t", i) for i in range(3)]
    for p in parts:  # two distinct replicas, all in the ISR, the first leads
        assert len(set(p.replicas)) == 2 and p.isr == p.replicas and p.leader == p.replicas[0]
    # the leaders go round the brokers in id order from wherever partition 0 starts
    first = parts[0].leader
    assert [p.leader for p in parts] == [(first - 1 + i) % 3 + 1 for i in range(3)]
    assert ctx.c.image.config(TOPIC_RESOURCE, "t") == {"retention.ms": "100"}
    assert ctx.c.image.topic("t").topic_id == res.response[0].topic_id  # type: ignore[union-attr]


def test_the_defaults_a_request_asks_for_are_the_brokers_when_it_comes() -> None:
    """-1 takes num.partitions and default.replication.factor as they are when the request
    comes (a dynamic broker config committed since counts), read once for all its topics."""
    ctx = Ctx(brokers=3, **{"num.partitions": "2", "default.replication.factor": "2"})
    ctx.run(ctx.c.create_topics([TopicRequest("a"), TopicRequest("b", 1)]))
    assert [len(ctx.part(n).replicas) for n in "ab"] == [2, 2]
    assert len(ctx.c.image.topic("a").partitions) == 2  # type: ignore[union-attr]
    assert len(ctx.c.image.topic("b").partitions) == 1  # type: ignore[union-attr]
    ctx.commit(
        [
            r.ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=k, value=v)
            for k, v in (("num.partitions", "4"), ("default.replication.factor", "3"))
        ]
    )
    res = ctx.run(ctx.c.create_topics([TopicRequest("c"), TopicRequest("d", -1, 1)]))
    assert [t.num_partitions for t in res] == [4, 4]
    assert [t.replication_factor for t in res] == [3, 1]
    reads: list[str] = []
    read = ctx.c._broker_default
    ctx.c._broker_default = lambda key: reads.append(key) or read(key)  # type: ignore[method-assign]
    ctx.run(ctx.c.create_topics([TopicRequest("e"), TopicRequest("f"), TopicRequest("g", 1, 1)]))
    assert sorted(reads) == ["default.replication.factor", "num.partitions"]
    reads.clear()
    ctx.run(ctx.c.create_topics([TopicRequest("h", 1, 1)]))  # nothing to default: nothing read
    assert reads == []


def test_create_topics_validation() -> None:
    ctx = Ctx(brokers=2, **{"num.partitions": "2"})
    ctx.run(ctx.c.create_topics([TopicRequest("a.b")]))
    assert len(ctx.c.image.topic("a.b").partitions) == 2  # type: ignore[union-attr]
    res = ctx.c.create_topics(
        [
            TopicRequest("a.b"),
            TopicRequest("a_b"),
            TopicRequest("bad/name"),
            TopicRequest("big", 1, 3),
            TopicRequest("cfg", configs={"retention.ms": "x"}),
            TopicRequest("dup"),
            TopicRequest("dup"),
            TopicRequest("manual", assignments={0: [2, 9]}),
            TopicRequest("ok", assignments={0: [2, 1], 1: [1, 2]}),
        ]
    )
    codes = [(x.name, x.error_code) for x in res.response]
    assert codes == [
        ("a.b", errors.TOPIC_ALREADY_EXISTS),
        ("a_b", errors.INVALID_TOPIC_EXCEPTION),
        ("bad/name", errors.INVALID_TOPIC_EXCEPTION),
        ("big", errors.INVALID_REPLICATION_FACTOR),
        ("cfg", errors.INVALID_CONFIG),
        ("dup", errors.INVALID_REQUEST),
        ("dup", errors.INVALID_REQUEST),
        ("manual", errors.INVALID_REPLICA_ASSIGNMENT),
        ("ok", 0),
    ]
    ctx.commit(res.records)
    assert set(ctx.c.image.topics_by_name) == {"a.b", "ok"}
    assert ctx.part("ok", 0).leader == 2
    # validate_only writes nothing
    res = ctx.c.create_topics([TopicRequest("v", 1, 1)], validate_only=True)
    assert res.records == [] and res.response[0].error_code == 0


def test_placement_uses_only_unfenced_brokers() -> None:
    ctx = Ctx()
    ctx.run(ctx.heartbeat(2, want_fence=True))
    res = ctx.c.create_topics([TopicRequest("t", 2, 2)])
    ctx.commit(res.records)
    assert {ctx.part("t", i).replicas for i in range(2)} == {(1, 3), (3, 1)}


def test_session_expiry_fences_and_reelects() -> None:
    ctx = Ctx()
    ctx.run(ctx.c.create_topics([TopicRequest("t", assignments={0: [1, 2, 3], 1: [2, 3, 1]})]))
    ctx.now = SESSION - 1
    for b in (2, 3):
        ctx.run(ctx.heartbeat(b))
    assert ctx.c.tick(ctx.now).records == []
    ctx.now = SESSION
    res = ctx.c.tick(ctx.now)
    assert res.response == [1]
    assert res.records[-1] == r.BrokerRegistrationChangeRecord(
        broker_id=1, broker_epoch=ctx.c.image.brokers[1].epoch, fenced=1
    )
    ctx.commit(res.records)
    p0 = ctx.part("t", 0)  # replicas 1,2,3: led by 1
    assert (p0.leader, p0.isr, p0.leader_epoch, p0.partition_epoch) == (2, (2, 3), 1, 1)
    p1 = ctx.part("t", 1)  # replicas 2,3,1: leader kept, 1 leaves the ISR
    assert (p1.leader, p1.isr, p1.leader_epoch, p1.partition_epoch) == (2, (2, 3), 0, 1)
    assert ctx.c.image.brokers[1].fenced


def test_last_isr_member_fenced_leaves_partition_leaderless_then_back() -> None:
    ctx = Ctx(brokers=2)
    ctx.run(ctx.c.create_topics([TopicRequest("t", assignments={0: [1]})]))
    ctx.run(ctx.heartbeat(1, want_fence=True))
    p = ctx.part("t")
    assert (p.leader, p.isr, p.leader_epoch) == (-1, (1,), 1)
    ctx.run(ctx.heartbeat(1))  # caught up again: unfenced, and leads its partition again
    p = ctx.part("t")
    assert (p.leader, p.isr, p.leader_epoch) == (1, (1,), 2)


def test_unclean_leader_election_when_enabled() -> None:
    ctx = Ctx(brokers=2)
    ctx.run(
        ctx.c.create_topics(
            [
                TopicRequest(
                    "t", assignments={0: [1, 2]}, configs={"unclean.leader.election.enable": "true"}
                )
            ]
        )
    )
    t_id = ctx.c.image.topic("t").topic_id  # type: ignore[union-attr]
    ctx.run(ctx.c.alter_partition(1, ctx.c.image.brokers[1].epoch, [IsrChange(t_id, 0, 0, 0, [1])]))
    ctx.now = SESSION
    ctx.run(ctx.heartbeat(2))
    ctx.run(ctx.c.tick(ctx.now))
    p = ctx.part("t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), 1)


def test_controlled_shutdown_moves_leadership_first() -> None:
    ctx = Ctx()
    ctx.run(ctx.c.create_topics([TopicRequest("t", 3, 2)]))
    res = ctx.heartbeat(1, want_shut_down=True)
    assert not res.response.should_shut_down
    ctx.commit(res.records)
    assert ctx.c.image.brokers[1].in_controlled_shutdown
    assert all(1 not in ctx.part("t", i).isr and ctx.part("t", i).leader != 1 for i in range(3))
    assert ctx.run(ctx.heartbeat(1, want_shut_down=True)).should_shut_down
    # A broker in controlled shutdown gets no new replicas.
    res = ctx.c.create_topics([TopicRequest("u", 1, 3)])
    assert res.response[0].error_code == errors.INVALID_REPLICATION_FACTOR


def test_requests_too_large_are_refused_before_any_placement() -> None:
    """Kafka's bounds: more than 10,000 partitions asked for in all (counted before any other
    check), more than 10,000 records to write, or more than 10,000 new partitions."""
    ctx = Ctx()
    many = "Excessively large number of partitions per request."
    batch = "Unable to perform excessively large batch operation."
    res = ctx.c.create_topics([TopicRequest("huge", 2**31 - 1, 1), TopicRequest("ok", 1, 1)])
    assert [(t.name, t.error_code, t.error_message) for t in res.response] == [
        ("huge", errors.POLICY_VIOLATION, many),
        ("ok", errors.POLICY_VIOLATION, many),
    ] and res.records == []
    res = ctx.c.create_topics(
        [TopicRequest("a", 5000, 1), TopicRequest("b", assignments={i: [1] for i in range(5001)})]
    )
    assert {t.error_message for t in res.response} == {many}
    # 10,000 partitions: the TopicRecord makes 10,001 records, one too many.
    res = ctx.c.create_topics([TopicRequest("edge", 10_000, 1)], validate_only=True)
    assert [(t.error_code, t.error_message) for t in res.response] == [
        (errors.POLICY_VIOLATION, batch)
    ]
    res = ctx.c.create_topics([TopicRequest("edge", 9_999, 1)])
    assert res.response[0].error_code == 0 and len(res.records) == 10_000
    ctx.commit(res.records)
    res = ctx.c.create_partitions("edge", 2**31 - 1)
    assert (res.response.error_code, res.response.error_message, res.records) == (
        errors.POLICY_VIOLATION,
        batch,
        [],
    )
    assert len(ctx.c.create_partitions("edge", 19_999).records) == 10_000


def test_delete_topics_and_create_partitions() -> None:
    ctx = Ctx()
    ctx.run(ctx.c.create_topics([TopicRequest("t", 1, 2)]))
    res = ctx.c.create_partitions("t", 3)
    assert res.response.error_code == 0 and len(res.records) == 2
    ctx.commit(res.records)
    # the added partitions continue round the brokers from partition 0's leader
    first = ctx.part("t", 0).leader
    assert [ctx.part("t", i).leader for i in range(3)] == [
        (first - 1 + i) % 3 + 1 for i in range(3)
    ]
    assert all(len(set(ctx.part("t", i).replicas)) == 2 for i in range(3))
    assert ctx.c.create_partitions("t", 3).response.error_code == errors.INVALID_PARTITIONS
    assert (
        ctx.c.create_partitions("t", 4, [[1, 2, 3]]).response.error_code
        == errors.INVALID_REPLICA_ASSIGNMENT
    )
    assert ctx.c.create_partitions("x", 4).response.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
    res = ctx.c.delete_topics(["t", "x"])
    assert res.response == {"t": 0, "x": errors.UNKNOWN_TOPIC_OR_PARTITION}
    ctx.commit(res.records)
    assert ctx.c.image.topics_by_name == {}


def test_configs() -> None:
    ctx = Ctx()
    ctx.run(ctx.c.create_topics([TopicRequest("t", 1, 1, configs={"cleanup.policy": "delete"})]))
    res = ctx.c.incremental_alter_configs(
        [
            (TOPIC_RESOURCE, "t", [("retention.ms", 0, "5"), ("cleanup.policy", 2, "compact")]),
            (TOPIC_RESOURCE, "nope", [("retention.ms", 0, "5")]),
            (BROKER_RESOURCE, "", [("log.retention.ms", 0, "7")]),
        ]
    )
    assert [x[2] for x in res.response] == [0, errors.UNKNOWN_TOPIC_OR_PARTITION, 0]
    ctx.commit(res.records)
    assert ctx.c.image.config(TOPIC_RESOURCE, "t") == {
        "cleanup.policy": "delete,compact",
        "retention.ms": "5",
    }
    assert ctx.c.image.config(BROKER_RESOURCE, "") == {"log.retention.ms": "7"}
    # AlterConfigs replaces the whole set: the keys left out are deleted (null values).
    res = ctx.c.alter_configs([(TOPIC_RESOURCE, "t", {"retention.ms": "6"})])
    assert (
        r.ConfigRecord(
            resource_type=TOPIC_RESOURCE, resource_name="t", name="cleanup.policy", value=None
        )
        in res.records
    )
    ctx.commit(res.records)
    assert ctx.c.image.config(TOPIC_RESOURCE, "t") == {"retention.ms": "6"}
    bad = ctx.c.alter_configs(
        [(TOPIC_RESOURCE, "t", {"retention.ms": "x"}), (BROKER_RESOURCE, "1", {"nope": "1"})]
    )
    assert [x[2] for x in bad.response] == [
        errors.INVALID_CONFIG,
        errors.INVALID_CONFIG,
    ] and bad.records == []


def test_allocate_producer_ids() -> None:
    ctx = Ctx(brokers=1)
    epoch = ctx.c.image.brokers[1].epoch
    assert ctx.run(ctx.c.allocate_producer_ids(1, epoch)) == (0, 0, 1000)
    assert ctx.run(ctx.c.allocate_producer_ids(1, epoch)) == (0, 1000, 1000)
    assert ctx.c.image.next_producer_id == 2000
    assert (
        ctx.c.allocate_producer_ids(1, epoch + 1).response[0]
        == errors.BY_NAME["STALE_BROKER_EPOCH"].code
    )


def test_alter_partition_epoch_checks() -> None:
    ctx = Ctx()
    ctx.run(ctx.c.create_topics([TopicRequest("t", assignments={0: [1, 2, 3]})]))
    t_id = ctx.c.image.topic("t").topic_id  # type: ignore[union-attr]
    e1 = ctx.c.image.brokers[1].epoch
    code = errors.BY_NAME

    def alter(broker: int, *changes: IsrChange) -> Any:
        return ctx.c.alter_partition(broker, ctx.c.image.brokers[broker].epoch, list(changes))

    res = alter(1, IsrChange(t_id, 0, 0, 0, [1, 2]))
    assert res.response[0].error_code == 0 and res.response[0].partition_epoch == 1
    ctx.commit(res.records)
    assert ctx.part("t").isr == (1, 2) and ctx.part("t").partition_epoch == 1
    cases = [
        (1, IsrChange(t_id, 0, 0, 0, [1, 2, 3]), code["INVALID_UPDATE_VERSION"].code),
        (2, IsrChange(t_id, 0, 0, 1, [1, 2, 3]), errors.INVALID_REQUEST),  # not the leader
        (1, IsrChange(t_id, 0, 0, 1, [2, 3]), errors.INVALID_REQUEST),  # leader left out
        (1, IsrChange(t_id, 0, 0, 1, [1, 4]), errors.INVALID_REQUEST),  # not a replica
        (1, IsrChange(t_id, 0, 0, 1, [1, 3], {3: 999}), code["INELIGIBLE_REPLICA"].code),
        (1, IsrChange(t_id, 1, 0, 1, [1]), errors.UNKNOWN_TOPIC_OR_PARTITION),
        (1, IsrChange(uuid.UUID(int=5555), 0, 0, 1, [1]), code["UNKNOWN_TOPIC_ID"].code),
    ]
    for broker, change, want in cases:
        assert alter(broker, change).response[0].error_code == want, change
    assert ctx.c.alter_partition(1, e1 + 100, []).response == code["STALE_BROKER_EPOCH"].code
    # A new leader epoch fences the old leader's requests.
    ctx.run(ctx.c.elect_leaders(qc.PREFERRED, [("t", 0)]))  # not needed: 1 leads
    ctx.run(ctx.heartbeat(1, want_fence=True))
    assert ctx.part("t").leader == 2 and ctx.part("t").leader_epoch == 1
    ctx.run(ctx.heartbeat(1))
    res = alter(2, IsrChange(t_id, 0, 0, 2, [2, 1]))
    assert res.response[0].error_code == code["FENCED_LEADER_EPOCH"].code
    # A fenced replica is ineligible.
    ctx.run(ctx.heartbeat(3, want_fence=True))
    p = ctx.part("t")
    res = alter(2, IsrChange(t_id, 0, p.leader_epoch, p.partition_epoch, [2, 3]))
    assert res.response[0].error_code == code["INELIGIBLE_REPLICA"].code


def test_elect_preferred_leaders() -> None:
    ctx = Ctx()
    ctx.run(ctx.c.create_topics([TopicRequest("t", assignments={0: [1, 2], 1: [2, 1]})]))
    ctx.run(ctx.heartbeat(1, want_fence=True))
    assert ctx.part("t", 0).leader == 2
    res = ctx.c.elect_leaders(qc.PREFERRED)
    assert res.response == {
        ("t", 0): errors.BY_NAME["PREFERRED_LEADER_NOT_AVAILABLE"].code,
        ("t", 1): errors.BY_NAME["ELECTION_NOT_NEEDED"].code,
    }
    ctx.run(ctx.heartbeat(1))
    t_id = ctx.c.image.topic("t").topic_id  # type: ignore[union-attr]
    p = ctx.part("t", 0)
    ctx.run(
        ctx.c.alter_partition(
            2,
            ctx.c.image.brokers[2].epoch,
            [IsrChange(t_id, 0, p.leader_epoch, p.partition_epoch, [2, 1])],
        )
    )
    res = ctx.c.elect_leaders(qc.PREFERRED, [("t", 0), ("x", 0)])
    assert res.response == {("t", 0): 0, ("x", 0): errors.UNKNOWN_TOPIC_OR_PARTITION}
    ctx.commit(res.records)
    assert ctx.part("t", 0).leader == 1 and ctx.part("t", 0).leader_epoch == p.leader_epoch + 1


def test_same_requests_give_the_same_image() -> None:
    def build() -> Any:
        ctx = Ctx()
        ctx.run(ctx.c.create_topics([TopicRequest("t", 4, 3)]))
        ctx.now = SESSION
        ctx.run(ctx.heartbeat(1))
        ctx.run(ctx.c.tick(ctx.now))
        return ctx.c.image

    assert build() == build()


def test_offline_log_dirs_move_leadership_and_keep_the_broker_out_of_elections() -> None:
    """KIP-858: a heartbeat naming every log dir of a broker as offline takes it out of every
    ISR and leadership (once: later heartbeats change nothing), it is not elected again (not by
    preferred election either) while its dirs are offline, and a heartbeat without them (after
    a restart) makes it eligible again."""
    ctx = Ctx(brokers=0)
    dirs = {b: uuid.UUID(int=500 + b) for b in (1, 2, 3)}
    for b in (1, 2, 3):
        req = BrokerRegistration(
            b, uuid.UUID(int=1000 * b), [Listener("PLAINTEXT", f"h{b}", 9092)], log_dirs=[dirs[b]]
        )
        ctx.commit(ctx.c.register_broker(req, ctx.now, ctx.c.image.offset + 1).records)
        ctx.unfence(b)
    ctx.run(
        ctx.c.create_topics([TopicRequest("t", 3, 2), TopicRequest("solo", assignments={0: [1]})])
    )
    led_by_1 = [i for i in range(3) if ctx.part("t", i).leader == 1]
    assert led_by_1 and ctx.part("solo").leader == 1
    res = ctx.heartbeat(1, offline_log_dirs=[dirs[1]])
    assert res.response.error_code == 0 and not res.response.is_fenced
    ctx.commit(res.records)
    for i in range(3):
        p = ctx.part("t", i)
        assert p.leader != 1 and 1 not in p.isr and p.leader in p.isr
    # Its only replica is offline: no leader, the ISR kept (it comes back with the broker).
    assert (ctx.part("solo").leader, ctx.part("solo").isr) == (-1, (1,))
    assert ctx.heartbeat(1, offline_log_dirs=[dirs[1]]).records == []
    assert ctx.c.image.brokers[1].fenced is False  # still a live broker, serving what it can
    # Not elected while offline: not by ElectLeaders (preferred), nor when the others die.
    elect = ctx.c.elect_leaders(qc.PREFERRED, [("t", 0), ("t", 1), ("t", 2), ("solo", 0)])
    ctx.commit(elect.records)
    assert ctx.part("solo").leader == -1 and all(ctx.part("t", i).leader != 1 for i in range(3))
    # A heartbeat without offline dirs (the restarted broker) makes it eligible again.
    ctx.run(ctx.heartbeat(1))
    ctx.run(ctx.c.elect_leaders(qc.PREFERRED, [("solo", 0)]))
    assert ctx.part("solo").leader == 1


def test_a_partly_failed_broker_keeps_partitions_in_other_dirs() -> None:
    ctx = Ctx(brokers=0)
    for b in (1, 2):
        dirs = [uuid.UUID(int=600 + 10 * b), uuid.UUID(int=601 + 10 * b)]
        req = BrokerRegistration(
            b, uuid.UUID(int=1000 * b), [Listener("PLAINTEXT", f"h{b}", 9092)], log_dirs=dirs
        )
        ctx.commit(ctx.c.register_broker(req, ctx.now, ctx.c.image.offset + 1).records)
        ctx.unfence(b)
    ctx.run(ctx.c.create_topics([TopicRequest("t", assignments={0: [1, 2]})]))
    # The partition names no directory (gregor assigns none): with one of two dirs offline the
    # controller cannot tell it is there, and leaves it; the broker refuses its writes itself.
    ctx.run(ctx.heartbeat(1, offline_log_dirs=[uuid.UUID(int=610)]))
    assert ctx.part("t").leader == 1
    assert 1 not in ctx.c.dirs_offline


def test_a_name_collides_with_any_spelling_that_differs_only_in_dots_and_underscores() -> None:
    existing = dict.fromkeys(["orders.v1", "a_b.c", "plain", "x" + "._" * 6])
    assert qc.colliding_topic("orders_v1", existing) == "orders.v1"
    assert qc.colliding_topic("a.b_c", existing) == "a_b.c"
    assert qc.colliding_topic("a.b.c", existing) == "a_b.c"
    assert qc.colliding_topic("orders.v1", existing) is None  # itself: TOPIC_ALREADY_EXISTS
    assert qc.colliding_topic("plain", existing) is None
    assert qc.colliding_topic("orders-v1", existing) is None
    many = "x" + "_." * 6  # 12 of them: compared with every topic instead
    assert qc.colliding_topic(many, existing) == "x" + "._" * 6
    assert qc.colliding_topic("y" + "_." * 6, existing) is None


def test_a_placed_topic_gets_the_records_create_topics_writes() -> None:
    """create_placed_topic (Admin has validated and placed) writes what create_topics writes
    for the same replicas and configs, record for record."""
    a, b = Ctx(), Ctx()
    configs = {"retention.ms": "1000", "cleanup.policy": "compact"}
    request = TopicRequest("t", assignments={0: [2, 1], 1: [3, 2]}, configs=dict(configs))
    full = a.c.create_topics([request])
    placed = b.c.create_placed_topic("t", [[2, 1], [3, 2]], configs)
    assert [r.encode(x) for x in placed.records] == [r.encode(x) for x in full.records]
    assert placed.response == full.response[0].topic_id


def test_a_placed_topic_is_checked_again_on_what_may_have_changed() -> None:
    """What Admin saw on the committed image may be stale on the controller's: the name taken
    or colliding meanwhile, a replica's broker fenced or gone."""
    ctx = Ctx()
    ctx.run(ctx.c.create_topics([TopicRequest("a.b", 1, 1)]))

    def refused(name: str, replicas: list[list[int]]) -> tuple[int, str | None]:
        with pytest.raises(KafkaError) as ei:
            ctx.c.create_placed_topic(name, replicas, {})
        return ei.value.code, ei.value.message

    assert refused("a.b", [[1]]) == (errors.TOPIC_ALREADY_EXISTS, "Topic 'a.b' already exists.")
    assert refused("a_b", [[1]]) == (
        errors.INVALID_TOPIC_EXCEPTION,
        "Topic 'a_b' collides with existing topic: a.b",
    )
    assert refused("c", [[1, 7]])[0] == errors.INVALID_REPLICA_ASSIGNMENT
    assert "broker 7, but no such broker is registered" in str(refused("c", [[1, 7]])[1])
    ctx.run(ctx.heartbeat(3, want_fence=True))
    assert refused("c", [[3]]) == (
        errors.INVALID_REPLICA_ASSIGNMENT,
        "All brokers specified in the manual partition assignment for partition 0 are fenced "
        "or in controlled shutdown.",
    )
    ok = ctx.c.create_placed_topic("c", [[3, 1]], {})  # the ISR is the active replicas
    assert [rec.isr for rec in ok.records if isinstance(rec, r.PartitionRecord)] == [[1]]
