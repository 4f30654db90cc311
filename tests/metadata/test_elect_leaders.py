"""ElectLeaders and automatic preferred leader election on the controller (sans I/O): the
result per partition, the records, and the imbalance rule with its ISR and liveness conditions."""

from __future__ import annotations

import pytest

from gregor.controller import quorum_controller as qc
from gregor.controller.leader_balance import PreferredElection, imbalance, preferred_elections
from gregor.controller.quorum_controller import IsrChange, TopicRequest
from gregor.metadata import records as r
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from tests.metadata.test_controller import Ctx

NOT_NEEDED = errors.BY_NAME["ELECTION_NOT_NEEDED"].code
NOT_AVAILABLE = errors.BY_NAME["PREFERRED_LEADER_NOT_AVAILABLE"].code
NO_ELIGIBLE = errors.BY_NAME["ELIGIBLE_LEADERS_NOT_AVAILABLE"].code
UNKNOWN = errors.UNKNOWN_TOPIC_OR_PARTITION


def add_to_isr(ctx: Ctx, name: str, index: int, broker: int) -> None:
    """The partition's leader asks for `broker` in its ISR (AlterPartition), committed."""
    p = ctx.part(name, index)
    topic = ctx.c.image.topic(name)
    assert topic is not None
    change = IsrChange(topic.topic_id, index, p.leader_epoch, p.partition_epoch, [*p.isr, broker])
    res = ctx.c.alter_partition(p.leader, ctx.c.image.brokers[p.leader].epoch, [change])
    assert res.response[0].error_code == 0
    ctx.commit(res.records)


def bounced(**static: str) -> Ctx:
    """Three brokers, `t` with preferred leaders 1, 2, 3; broker 2 fenced and back, not yet in
    the ISR of t-1 (led by 3 meanwhile)."""
    ctx = Ctx(**static)
    ctx.run(
        ctx.c.create_topics(
            [TopicRequest("t", assignments={0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})]
        )
    )
    ctx.run(ctx.heartbeat(2, want_fence=True))
    ctx.run(ctx.heartbeat(2))
    assert ctx.part("t", 1).leader == 3 and 2 not in ctx.part("t", 1).isr
    return ctx


def test_preferred_election_results_per_partition() -> None:
    ctx = bounced()
    asked = [("t", 0), ("t", 1), ("t", 5), ("nope", 0)]
    res = ctx.c.elect_leaders(qc.PREFERRED, asked)
    # 2 is alive but not in the ISR: not available; no record.
    assert res.response == {
        ("t", 0): NOT_NEEDED,
        ("t", 1): NOT_AVAILABLE,
        ("t", 5): UNKNOWN,
        ("nope", 0): UNKNOWN,
    }
    assert res.records == []
    add_to_isr(ctx, "t", 1, 2)
    epoch = ctx.part("t", 1).leader_epoch
    res = ctx.c.elect_leaders(qc.PREFERRED, [("t", 1), ("t", 1), ("t", 2)])
    assert res.response == {("t", 1): errors.NONE, ("t", 2): NOT_NEEDED}
    assert len(res.records) == 1  # named twice, elected once
    ctx.commit(res.records)
    assert ctx.part("t", 1).leader == 2 and ctx.part("t", 1).leader_epoch == epoch + 1
    # Every partition (None): each one has its preferred leader now.
    assert set(ctx.run(ctx.c.elect_leaders(qc.PREFERRED)).values()) == {NOT_NEEDED}


def test_preferred_replica_in_the_isr_but_not_alive_is_not_available() -> None:
    ctx = bounced()
    add_to_isr(ctx, "t", 1, 2)
    ctx.run(ctx.heartbeat(2, want_shut_down=True))  # controlled shutdown: leads nothing, no ISR
    assert ctx.c.elect_leaders(qc.PREFERRED, [("t", 1)]).response == {("t", 1): NOT_AVAILABLE}


def test_unclean_election() -> None:
    ctx = Ctx()
    ctx.run(
        ctx.c.create_topics(
            [TopicRequest("u", assignments={0: [3, 1]}), TopicRequest("v", assignments={0: [3]})]
        )
    )
    t_id = ctx.c.image.topic("u").topic_id  # type: ignore[union-attr]
    p = ctx.part("u", 0)
    ctx.run(
        ctx.c.alter_partition(
            3,
            ctx.c.image.brokers[3].epoch,
            [IsrChange(t_id, 0, p.leader_epoch, p.partition_epoch, [3])],
        )
    )
    assert ctx.c.elect_leaders(qc.UNCLEAN, [("u", 0)]).response == {("u", 0): NOT_NEEDED}  # 3 leads
    ctx.run(ctx.heartbeat(3, want_fence=True))
    assert ctx.part("u", 0).leader == -1 and ctx.part("v", 0).leader == -1
    res = ctx.c.elect_leaders(qc.UNCLEAN, [("u", 0), ("v", 0)])
    assert res.response == {("u", 0): errors.NONE, ("v", 0): NO_ELIGIBLE}  # v-0: only 3, fenced
    ctx.commit(res.records)
    p = ctx.part("u", 0)
    assert (p.leader, p.isr, p.leader_recovery_state) == (1, (1,), 1)


def test_unknown_election_type_is_an_invalid_request() -> None:
    with pytest.raises(KafkaError) as exc:
        Ctx().c.elect_leaders(7, None)
    assert exc.value.code == errors.INVALID_REQUEST


def test_imbalance_counts_per_preferred_broker() -> None:
    ctx = bounced()
    assert imbalance(ctx.c.image) == {1: (0, 1), 2: (1, 1), 3: (0, 1)}


def test_preferred_elections_need_the_isr_and_a_live_replica() -> None:
    ctx = bounced()
    alive = lambda b: True  # noqa: E731
    assert preferred_elections(ctx.c.image, alive, 0) == []  # 2 is not in the ISR of t-1
    add_to_isr(ctx, "t", 1, 2)
    t_id = ctx.c.image.topic("t").topic_id  # type: ignore[union-attr]
    assert preferred_elections(ctx.c.image, alive, 0) == [PreferredElection("t", t_id, 1, 2)]
    assert preferred_elections(ctx.c.image, lambda b: b != 2, 0) == []


def test_preferred_elections_only_above_the_percentage() -> None:
    ctx = Ctx()
    # Broker 2 is preferred for three partitions; it loses one of them.
    ctx.run(
        ctx.c.create_topics(
            [TopicRequest("p", assignments={0: [2, 1], 1: [2, 3], 2: [2, 1], 3: [1, 2]})]
        )
    )
    ctx.run(ctx.heartbeat(2, want_fence=True))
    ctx.run(ctx.heartbeat(2))
    for i in (0, 1):  # back in two ISRs; p-2 stays without it
        add_to_isr(ctx, "p", i, 2)
    assert imbalance(ctx.c.image)[2] == (3, 3)
    assert [e.partition for e in preferred_elections(ctx.c.image, lambda b: True, 10)] == [0, 1]
    ctx.commit(
        [
            r.PartitionChangeRecord(
                partition_id=0, topic_id=ctx.c.image.topic("p").topic_id, leader=2
            )
        ]
    )  # type: ignore[union-attr]
    assert imbalance(ctx.c.image)[2] == (2, 3)
    assert [e.partition for e in preferred_elections(ctx.c.image, lambda b: True, 66)] == [
        1
    ]  # 2/3 > 66%
    assert preferred_elections(ctx.c.image, lambda b: True, 67) == []  # 2/3 <= 67%


def test_balance_leaders_runs_every_interval() -> None:
    ctx = bounced(
        **{
            "leader.imbalance.check.interval.seconds": "2",
            "leader.imbalance.per.broker.percentage": "0",
        }
    )
    add_to_isr(ctx, "t", 1, 2)
    ctx.now = 10_000
    assert ctx.c.balance_leaders(ctx.now).records == []  # the first call starts the interval
    assert ctx.c.balance_leaders(ctx.now + 1999).records == []
    res = ctx.c.balance_leaders(ctx.now + 2000)
    assert res.response == [("t", 1)]
    ctx.commit(res.records)
    assert ctx.part("t", 1).leader == 2
    assert ctx.c.balance_leaders(ctx.now + 4000).records == []  # balanced


def test_balance_leaders_disabled() -> None:
    ctx = bounced(
        **{"auto.leader.rebalance.enable": "false", "leader.imbalance.per.broker.percentage": "0"}
    )
    add_to_isr(ctx, "t", 1, 2)
    for now in (0, 300_000, 600_000, 10**9):
        assert ctx.c.balance_leaders(now).records == []


def test_balance_leaders_default_interval_and_percentage() -> None:
    ctx = bounced()
    add_to_isr(ctx, "t", 1, 2)
    assert ctx.c.balance_leaders(0).records == []
    assert ctx.c.balance_leaders(299_999).records == []
    assert ctx.c.balance_leaders(300_000).response == [("t", 1)]  # 1/1 > 10%
