"""The decision of `gregor cluster health` (gregor/cli/health.py): from gathered facts to healthy
or not, the nodes down and why, leaderless and under-replicated partitions, and quorum lag.
Table-driven: each case is a cluster as the protocol would describe it and what must be said."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from gregor.cli.health import Broker, Facts, Partition, Quorum, QuorumReplica, decide, quorum_lag

NOW = 1_800_000_000_000
TIMEOUT_MS = 5_000


def broker(i: int, fenced: bool | None = False) -> Broker:
    return Broker(i, "127.0.0.1", 9090 + i, fenced)


def voter(i: int, fetched_ago: int | None = 100, caught_up_ago: int | None = 100, end: int = 50):
    fetch = None if fetched_ago is None else NOW - fetched_ago
    caught = None if caught_up_ago is None else NOW - caught_up_ago
    return QuorumReplica(i, True, end, fetch, caught)


def observer(i: int, fetched_ago: int | None = 100, end: int = 50) -> QuorumReplica:
    fetch = None if fetched_ago is None else NOW - fetched_ago
    return QuorumReplica(i, False, end, fetch, fetch)


def quorum(*replicas: QuorumReplica, leader: int = 1) -> Quorum:
    return Quorum(leader, 3, 50, replicas, NOW)


def part(p: int, leader: int = 1, replicas=(1, 2, 3), isr=(1, 2, 3), topic: str = "t") -> Partition:
    return Partition(topic, p, leader, tuple(replicas), tuple(isr))


HEALTHY = Facts(
    brokers=(broker(1), broker(2), broker(3)),
    partitions=(part(0), part(1, leader=2)),
    quorum=quorum(voter(1, 0, 0), voter(2), voter(3)),
)


@dataclass
class Case:
    facts: Facts
    healthy: bool
    down: dict[int, str]  # node -> a words its reason must contain
    leaderless: list[tuple[str, int]]
    under: list[tuple[str, int]]
    reasons: list[str]  # words that must be in the reasons, in order
    not_checked: list[str] = ()  # type: ignore[assignment]


CASES = {
    "all up and in sync": Case(HEALTHY, True, {}, [], [], []),
    "a fenced broker (DescribeCluster v2)": Case(
        replace(
            HEALTHY,
            brokers=(broker(1), broker(2), broker(3, fenced=True)),
            partitions=(part(0, isr=(1, 2)), part(1, leader=2, isr=(2, 1))),
        ),
        False,
        {3: "fenced"},
        [],
        [("t", 0), ("t", 1)],
        ["node 3 is down: fenced", "2 partitions under-replicated"],
    ),
    "a replica's broker missing from a v0-1 broker list": Case(
        replace(
            HEALTHY,
            brokers=(broker(1, None), broker(2, None)),
            partitions=(part(0, isr=(1, 2)),),
            quorum=None,
        ),
        False,
        {3: "not a live registered broker"},
        [],
        [("t", 0)],
        ["node 3 is down", "1 partition under-replicated"],
        ["fenced brokers"],
    ),
    "a voter silent for longer than the timeout": Case(
        replace(HEALTHY, quorum=quorum(voter(1, 0, 0), voter(2), voter(3, 7_000, 7_000))),
        False,
        {3: "not fetched from the quorum's leader for 7000 ms"},
        [],
        [],
        ["node 3 is down"],
    ),
    "a voter silent for just under the timeout": Case(
        replace(HEALTHY, quorum=quorum(voter(1, 0, 0), voter(2), voter(3, 4_999, 4_999))),
        True,
        {},
        [],
        [],
        [],
    ),
    "a voter that never fetched from the new leader": Case(
        replace(HEALTHY, quorum=quorum(voter(1, 0, 0), voter(2), voter(3, None, None))),
        False,
        {3: "in this epoch"},
        [],
        [],
        ["node 3 is down"],
    ),
    "a voter fetching but not caught up": Case(
        replace(HEALTHY, quorum=quorum(voter(1, 0, 0), voter(2), voter(3, 100, 9_000, end=20))),
        False,
        {},
        [],
        [],
        ["voter 3 has not caught up with the quorum's leader for 9000 ms"],
    ),
    "a leaderless partition": Case(
        replace(HEALTHY, partitions=(part(0), part(1, leader=-1, isr=(2,)), part(0, topic="a"))),
        False,
        {},
        [("t", 1)],
        [("t", 1)],
        ["1 partition without a leader", "1 partition under-replicated"],
    ),
    "no quorum leader": Case(
        replace(HEALTHY, quorum=quorum(voter(1), voter(2), voter(3, None, None), leader=-1)),
        False,
        {},
        [],
        [],
        ["the metadata quorum has no leader"],
    ),
    "the quorum could not be described": Case(
        replace(HEALTHY, quorum=None, quorum_error="not described (request timed out)"),
        False,
        {},
        [],
        [],
        ["the metadata quorum: not described (request timed out)"],
    ),
    "the quorum not served: healthy, but said not checked": Case(
        replace(HEALTHY, quorum=None, quorum_not_asked="does not serve DescribeQuorum"),
        True,
        {},
        [],
        [],
        [],
        ["the metadata quorum: does not serve DescribeQuorum"],
    ),
    "a silent observer is not a voter: listed, not down": Case(
        replace(HEALTHY, quorum=quorum(voter(1, 0, 0), voter(2), voter(3), observer(4, 60_000))),
        True,
        {},
        [],
        [],
        [],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_decision(name: str) -> None:
    case = CASES[name]
    found = decide(case.facts, TIMEOUT_MS)
    assert found.healthy is case.healthy
    assert found.healthy is (not found.reasons)
    assert found.nodes_down == sorted(case.down)
    for node in found.nodes:
        if node.id in case.down:
            assert case.down[node.id] in (node.why or ""), node.why
        else:
            assert node.why is None
    assert [(p.topic, p.partition) for p in found.leaderless] == case.leaderless
    assert [(p.topic, p.partition) for p in found.under_replicated] == case.under
    assert len(found.reasons) == len(case.reasons), found.reasons
    for words, reason in zip(case.reasons, found.reasons, strict=True):
        assert words in reason
    assert len(found.not_checked) == len(case.not_checked), found.not_checked
    for words, said in zip(case.not_checked, found.not_checked, strict=True):
        assert words in said


def test_nodes_are_the_union_of_brokers_voters_observers_and_replicas_with_their_roles() -> None:
    facts = Facts(
        brokers=(broker(2), broker(5)),
        partitions=(part(0, leader=2, replicas=(2, 5, 6), isr=(2, 5)),),
        quorum=quorum(voter(1, 0, 0), voter(2), observer(5)),
    )
    found = decide(facts, TIMEOUT_MS)
    roles = {n.id: n.roles for n in found.nodes}
    assert roles == {
        1: ("voter",),  # a dedicated controller
        2: ("broker", "voter"),
        5: ("broker", "observer"),
        6: ("broker",),  # known from a partition's replicas only
    }
    assert found.nodes_down == [6]
    assert found.controller_id == 1


def test_reasons_of_one_node_are_all_given() -> None:
    facts = replace(
        HEALTHY,
        brokers=(broker(1), broker(2), broker(3, fenced=True)),
        quorum=quorum(voter(1, 0, 0), voter(2), voter(3, 8_000, 8_000)),
    )
    [three] = [n for n in decide(facts, TIMEOUT_MS).nodes if n.id == 3]
    assert three.why is not None
    assert "fenced" in three.why and "for 8000 ms" in three.why


def test_quorum_lag_is_behind_the_leaders_log_end_voters_first() -> None:
    q = quorum(observer(7, end=40), voter(3, end=-1), voter(2, end=45), voter(1, 0, 0, end=50))
    lags = [(r.node, r.role, r.lag) for r in quorum_lag(q)]
    assert lags == [
        (1, "Leader", 0),
        (2, "Follower", 5),
        (3, "Follower", None),  # log end offset unknown
        (7, "Observer", 10),
    ]
    assert decide(replace(HEALTHY, quorum=q), TIMEOUT_MS).controller_id == 1
