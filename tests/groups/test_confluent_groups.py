"""Consumer groups with confluent-kafka (librdkafka), over real sockets against a real broker:
sharing partitions (range and cooperative-sticky), rebalancing when members leave or crash,
static membership, committed offsets across broker restarts, standalone consumers."""

from __future__ import annotations

import time

import confluent_kafka as ck
import pytest
from group_helpers import (
    Member,
    ProcessMember,
    balanced,
    create_topic,
    numbers,
    produce,
    pump,
    wait_until,
)

from gregor import Broker

ASSIGNORS = ["range", "cooperative-sticky"]


def consume_exactly(members: list[Member], expected: list[int], timeout: float = 30.0) -> None:
    """Poll until the members together got `expected`, then a little longer; every record once."""
    base = [len(m.records) for m in members]

    def got() -> list[int]:
        return numbers(r for m, b in zip(members, base, strict=True) for r in m.records[b:])

    wait_until(
        lambda: len(got()) >= len(expected), timeout, f"{len(expected)} records", pump(members)
    )
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        pump(members)()
    assert got() == sorted(expected), "every record exactly once"


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_members_share_partitions_and_take_over_from_one_that_leaves(
    bootstrap: str, name: str, assignor: str
) -> None:
    create_topic(bootstrap, name, 6)
    members = [
        Member(bootstrap, name, name, **{"partition.assignment.strategy": assignor})
        for _ in range(3)
    ]
    try:
        wait_until(
            lambda: balanced(members, 6),
            30,
            "3 disjoint assignments covering 6 partitions",
            pump(members),
        )
        owned = [m.partitions() for m in members]
        produce(bootstrap, name, 0, 600, 6)
        consume_exactly(members, list(range(600)))
        for m, ps in zip(members, owned, strict=True):
            assert m.records and {p for p, _, _ in m.records} <= ps, (
                "a member reads only its partitions"
            )
            m.commit()
        # A member leaves (LeaveGroup on close): the others take its partitions over from the
        # committed offsets.
        leaving = members.pop()
        leaving.close()
        wait_until(
            lambda: balanced(members, 6),
            30,
            "the 2 remaining members to cover 6 partitions",
            pump(members),
        )
        produce(bootstrap, name, 600, 300, 6)
        consume_exactly(members, list(range(600, 900)))
        assert not any(m.errors for m in members), [m.errors for m in members]
    finally:
        for m in members:
            m.close()


def test_sigkilled_member_is_evicted_after_its_session_timeout(bootstrap: str, name: str) -> None:
    session = 3000
    create_topic(bootstrap, name, 6)
    survivor = Member(bootstrap, name, name, **{"session.timeout.ms": session})
    crashing = ProcessMember(bootstrap, name, name, session)
    try:
        wait_until(
            lambda: len(crashing.partitions()) == 3 and len(survivor.partitions()) == 3,
            30,
            "both members to get 3 partitions",
            pump([survivor]),
        )
        crashing.kill()
        killed = time.monotonic()
        wait_until(
            lambda: survivor.partitions() == set(range(6)),
            20,
            "the survivor to get every partition",
            pump([survivor]),
        )
        took = time.monotonic() - killed
        # The coordinator cannot know before the session runs out; then one heartbeat interval.
        assert session / 1000 - 0.5 <= took <= session / 1000 + 4, took
    finally:
        crashing.kill()
        survivor.close()


def test_static_member_restarts_within_its_session_and_keeps_its_partitions(
    bootstrap: str, name: str
) -> None:
    session = 3000
    create_topic(bootstrap, name, 6)
    steady = Member(
        bootstrap, name, name, **{"group.instance.id": f"{name}-a", "session.timeout.ms": session}
    )
    first = ProcessMember(bootstrap, name, name, session, instance=f"{name}-b")
    second = None
    try:
        wait_until(
            lambda: len(first.partitions()) == 3 and len(steady.partitions()) == 3,
            30,
            "both static members to get 3 partitions",
            pump([steady]),
        )
        theirs, mine = first.partitions(), steady.partitions()
        assigns, revokes = steady.assigns, steady.revokes
        first.kill()  # a crash: no LeaveGroup (a static member would not send one anyway)
        second = ProcessMember(bootstrap, name, name, session, instance=f"{name}-b")
        wait_until(
            lambda: second.assignments,
            20,
            "the restarted static member's assignment",
            pump([steady]),
        )
        assert second.partitions() == theirs, "its old partitions, without a rebalance"
        # Past the old incarnation's session timeout: still nobody was evicted or rebalanced.
        end = time.monotonic() + session / 1000 + 1
        while time.monotonic() < end:
            steady.poll(0.1)
        assert steady.partitions() == mine
        assert (steady.assigns, steady.revokes) == (assigns, revokes), (
            "the other member saw no rebalance"
        )
        assert second.partitions() == theirs and len(second.assignments) == 1
    finally:
        first.kill()
        if second is not None:
            second.kill()
        steady.close()


def _consume_some(member: Member, at_least: int) -> None:
    wait_until(lambda: len(member.records) >= at_least, 30, f"{at_least} records", pump([member]))


@pytest.mark.parametrize("clean", [True, False], ids=["sigterm", "sigkill"])
def test_committed_offsets_survive_a_broker_restart(
    make_broker: object, name: str, clean: bool
) -> None:
    broker: Broker = make_broker()  # type: ignore[operator]
    create_topic(broker.bootstrap, name, 3)
    produce(broker.bootstrap, name, 0, 300, 3)
    m = Member(broker.bootstrap, name, name)
    try:
        _consume_some(m, 100)
        m.commit()  # the position after every record it got
        first = numbers(m.records)
    finally:
        m.close()
    broker.restart(clean=clean)
    produce(broker.bootstrap, name, 300, 100, 3)
    again = Member(broker.bootstrap, name, name)
    try:
        _consume_some(again, 400 - len(first))
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            again.poll(0.05)
        second = numbers(again.records)
    finally:
        again.close()
    assert not set(first) & set(second), "nothing consumed twice: everything consumed was committed"
    assert sorted(first + second) == list(range(400)), "nothing skipped"


def test_member_stays_in_its_group_across_a_broker_crash(make_broker: object, name: str) -> None:
    broker: Broker = make_broker()  # type: ignore[operator]
    create_topic(broker.bootstrap, name, 3)
    m = Member(broker.bootstrap, name, name, **{"session.timeout.ms": 10000})
    try:
        wait_until(lambda: m.partitions() == {0, 1, 2}, 30, "the assignment", pump([m]))
        produce(broker.bootstrap, name, 0, 90, 3)
        _consume_some(m, 90)
        m.commit()
        assigns = m.assigns
        broker.restart(clean=False)  # the group's generation is reloaded from __consumer_offsets
        produce(broker.bootstrap, name, 90, 90, 3)
        _consume_some(m, 180)
        assert numbers(m.records) == list(range(180))
        assert m.assigns == assigns, "the member kept its generation and assignment"
        m.commit()
    finally:
        m.close()
    committed = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name})
    try:
        offsets = committed.committed([ck.TopicPartition(name, p) for p in range(3)], timeout=10)
        assert [tp.offset for tp in offsets] == [60, 60, 60]
    finally:
        committed.close()


def test_standalone_consumer_commits_and_fetches_offsets(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name, 2)
    produce(bootstrap, name, 0, 20, 2)
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": name, "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(name, 0, 0), ck.TopicPartition(name, 1, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 20 and time.monotonic() < deadline:
            got += [m for m in c.consume(100, 0.2) if not m.error()]
        assert len(got) == 20
        c.commit(
            offsets=[ck.TopicPartition(name, 0, 4), ck.TopicPartition(name, 1, 7)],
            asynchronous=False,
        )
        offsets = c.committed([ck.TopicPartition(name, 0), ck.TopicPartition(name, 1)], timeout=10)
        assert [tp.offset for tp in offsets] == [4, 7]
    finally:
        c.close()
    # A new standalone consumer starts from there.
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": name, "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(name, 0, ck.OFFSET_STORED)])
        m = None
        deadline = time.monotonic() + 10
        while m is None and time.monotonic() < deadline:
            m = c.poll(0.2)
        assert m is not None and not m.error() and m.offset() == 4
    finally:
        c.close()
