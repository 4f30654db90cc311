"""Replica placement (controller/rules.py): every partition's replicas distinct, leaders going
round the brokers from a random start, so that one-partition topics spread their leaders over the
cluster instead of all landing on the lowest broker id; added partitions continue a topic's
pattern; a seed gives the same placement again."""

from __future__ import annotations

import random
import uuid
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.controller import quorum_controller as qc
from gregor.controller.quorum_controller import (
    BrokerHeartbeat,
    BrokerRegistration,
    Listener,
    QuorumController,
    TopicRequest,
)
from gregor.controller.rules import assign_replicas, place_added, place_new
from gregor.metadata import records as r
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError


def _controller(brokers: list[int], seed: int) -> QuorumController:
    """A controller with `brokers` registered and unfenced, its placement seeded."""
    ids = iter(range(1, 100_000))
    c = QuorumController(new_uuid=lambda: uuid.UUID(int=next(ids)), rng=random.Random(seed))

    def commit(records: list[object]) -> None:
        start = c.image.offset + 1
        c.replay([(rec, start + i, 1) for i, rec in enumerate(records)])

    commit(qc.bootstrap_records())
    for b in brokers:
        req = BrokerRegistration(b, uuid.UUID(int=b), [Listener("PLAINTEXT", f"h{b}", 9092)])
        commit(c.register_broker(req, 0, c.image.offset + 1).records)
        beat = c.heartbeat(BrokerHeartbeat(b, c.image.brokers[b].epoch, c.image.offset), 0)
        commit(beat.records)
    return c


def _replicas(records: list[object]) -> list[list[int]]:
    return [list(x.replicas) for x in records if isinstance(x, r.PartitionRecord)]


def test_one_partition_topics_spread_their_leaders_over_every_broker() -> None:
    """Fails with a placement that starts at the lowest broker id: every leader would be 1."""
    c = _controller([1, 2, 3], seed=7)
    res = c.create_topics([TopicRequest(f"t{i}", 1, 3) for i in range(30)])
    leaders = Counter(reps[0] for reps in _replicas(res.records))
    assert set(leaders) == {1, 2, 3}, leaders
    assert min(leaders.values()) >= 3, leaders  # 30 draws of 3: each far from never


def test_many_partitions_lead_evenly_and_hold_replicas_evenly() -> None:
    """N*k partitions on N brokers: each broker leads k and holds k*factor replicas."""
    for seed in range(20):
        c = _controller([1, 2, 5, 9], seed)
        placed = _replicas(c.create_topics([TopicRequest("t", 4 * 5, 3)]).records)
        assert all(len(set(reps)) == 3 for reps in placed)
        assert Counter(reps[0] for reps in placed) == {1: 5, 2: 5, 5: 5, 9: 5}
        assert Counter(b for reps in placed for b in reps) == {1: 15, 2: 15, 5: 15, 9: 15}


def test_a_seed_gives_the_same_placement_and_seeds_differ() -> None:
    def placement(seed: int) -> list[list[int]]:
        c = _controller([1, 2, 3, 4], seed)
        return _replicas(c.create_topics([TopicRequest(f"t{i}", 2, 2) for i in range(8)]).records)

    assert placement(1) == placement(1)
    assert len({str(placement(s)) for s in range(10)}) > 1


def test_added_partitions_continue_the_topics_leaders() -> None:
    """A one-partition topic grown to as many partitions as brokers has one leader on each,
    whichever broker partition 0 landed on."""
    for seed in range(10):
        c = _controller([1, 2, 3], seed)
        res = c.create_topics([TopicRequest("t", 1, 2)])
        c.replay([(rec, c.image.offset + 1 + i, 1) for i, rec in enumerate(res.records)])
        added = _replicas(c.create_partitions("t", 3).records)
        first = c.image.partition("t", 0)
        assert first is not None
        assert sorted([first.leader] + [reps[0] for reps in added]) == [1, 2, 3]
        assert all(len(set(reps)) == 2 for reps in added)


def test_place_added_starts_at_the_first_broker_not_below_partition_0s_leader() -> None:
    assert [p[0] for p in place_added([1, 2, 3], [2, 3], 1, 2)] == [3, 1]
    # partition 0's leader is gone: the next broker up takes its place in the pattern
    assert [p[0] for p in place_added([1, 3, 4], [2, 1], 1, 3)] == [4, 1, 3]
    assert [p[0] for p in place_added([1, 3], [7, 1], 1, 2)] == [3, 1]  # none above: from 1


def test_too_few_brokers_is_refused_before_drawing() -> None:
    for call in (
        lambda: place_new([], 1, 1, random.Random(0)),
        lambda: place_new([1, 2], 1, 3, random.Random(0)),
        lambda: place_added([1], [1, 2], 2, 1),
    ):
        try:
            call()
        except KafkaError as exc:
            assert exc.code == errors.INVALID_REPLICATION_FACTOR
        else:
            raise AssertionError("placed on too few brokers")


@settings(max_examples=200, deadline=None)
@given(
    brokers=st.sets(st.integers(0, 50), min_size=1, max_size=7),
    data=st.data(),
)
def test_assign_replicas_properties(brokers: set[int], data: st.DataObject) -> None:
    """Any start, shift and first partition: replicas distinct and registered; leaders go round
    the sorted brokers one step per partition; over a block of n partitions with one shift
    (first aligned to n) every broker holds the same number of replicas."""
    n = len(brokers)
    factor = data.draw(st.integers(1, n))
    first = data.draw(st.integers(0, 30))
    count = data.draw(st.integers(1, 3 * n))
    start, shift = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, 100))
    placed = assign_replicas(list(brokers), count, factor, first, start, shift)
    order = sorted(brokers)
    assert len(placed) == count
    for i, reps in enumerate(placed):
        assert len(reps) == factor and len(set(reps)) == factor and set(reps) <= brokers
        assert reps[0] == order[(first + i + start) % n]
    block = assign_replicas(list(brokers), n, factor, n * (first // n + 1), start, shift)
    assert set(Counter(b for reps in block for b in reps).values()) == {factor}
