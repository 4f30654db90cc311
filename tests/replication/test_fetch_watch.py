"""A follower's watched fetch session (replication/fetch_watch.py) over a `BrokerServer` built but
not listening: once its partitions are clean a Fetch reads none of them and parks on the session
alone; a clean partition's follower still counts as fetched at every Fetch; what changes an
answer without a partition event (a log start moved, new metadata) makes the next Fetch read
every partition; a closed session lets go of its partitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gregor.broker.broker import BrokerServer
from gregor.controller.admin import TopicSpec
from gregor.protocol import errors
from gregor.replication.fetch_watch import FetchWatch
from gregor.replication.pending import Pending

from .test_fetch_wakeups import (
    FOLLOWER,
    PARTITIONS,
    Follower,
    append,
    counting,
    leader_of_six,
    partition,
)

pytestmark = pytest.mark.unit
LAG_MS = 30_000


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def now_ms(self) -> int:
        return self.ms

    def monotonic_s(self) -> float:
        return self.ms / 1000

    def monotonic_ms(self) -> int:
        return self.ms

    def sleep(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def broker(tmp_path: Path, clock: Clock) -> Any:
    yield from leader_of_six(tmp_path, clock)


def settled(b: BrokerServer) -> Follower:
    """A follower whose session holds every partition, each of them clean."""
    f = Follower(b)
    for i in range(PARTITIONS):
        append(b, i)
    assert sorted(f.took(f.fetch())) == list(range(PARTITIONS))
    # Its offsets reach the leader, the HW moves, the session tells it, and a Fetch finds
    # every partition quiet.
    for _ in range(3):
        assert f.took(f.fetch(wait_ms=0)) == []
    watch = session_watch(b)
    assert not watch.dirty and len(watch.entries) == PARTITIONS
    return f


def session_watch(b: BrokerServer) -> FetchWatch:
    (session,) = b.services.fetch_sessions.sessions.values()
    assert session.watch is not None
    return session.watch


def test_a_fetch_of_a_settled_session_reads_no_partition_and_parks_on_the_session(
    broker: BrokerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = settled(broker)
    looked = counting(monkeypatch, "_quiet")
    waiting = f.fetch()
    assert isinstance(waiting, Pending)
    assert looked == []
    purgatory = broker.services.purgatory
    assert purgatory.keys() == 1 and purgatory.watched(session_watch(broker)) == 1
    append(broker, 3)
    assert waiting.done and f.took(waiting.value) == [3]
    assert [args[1].index for args in looked] == [3]


def test_a_clean_partitions_follower_counts_as_fetched_at_every_fetch(
    broker: BrokerServer, clock: Clock
) -> None:
    f = settled(broker)
    state = partition(broker, 1).followers[FOLLOWER]
    settled_at = state.last_caught_up_time_ms
    for _ in range(4):  # well past replica.lag.time.max.ms, fetching all along
        clock.ms += LAG_MS // 2
        f.took(f.fetch(wait_ms=0))
    last_fetch = clock.ms
    assert state.clock is session_watch(broker)
    assert state.last_caught_up_time_ms == settled_at  # (not written while clean)
    assert state.caught_up_ms() == last_fetch
    clock.ms += 1_000
    append(broker, 1)  # the follower is behind now: only its caught-up time keeps it in sync
    assert state.clock is None
    assert state.last_caught_up_time_ms == state.last_fetch_time_ms == last_fetch
    assert broker.replicas.maybe_shrink_isr(clock.ms) == []
    assert FOLLOWER in partition(broker, 1).isr


def test_a_follower_that_stops_fetching_falls_out_of_the_isr(
    broker: BrokerServer, clock: Clock
) -> None:
    f = settled(broker)
    f.took(f.fetch(wait_ms=0))
    clock.ms += LAG_MS + 1
    append(broker, 2)
    updates = broker.replicas.maybe_shrink_isr(clock.ms)
    assert [(u.partition, u.new_isr) for u in updates] == [(2, (broker.node_id,))]


def test_a_log_start_moved_on_a_clean_partition_is_told_at_the_next_fetch(
    broker: BrokerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = settled(broker)
    p = partition(broker, 4)
    start = p.log.log_end_offset
    p.log.increment_log_start_offset(start)  # (DeleteRecords), no partition event
    looked = counting(monkeypatch, "_quiet")
    answer = f.fetch(wait_ms=0)
    assert len(looked) == PARTITIONS  # every partition read: the watch is made anew
    told = [(q.partition_index, q.log_start_offset) for t in answer.responses for q in t.partitions]
    assert told == [(4, start)]
    f.took(answer)
    looked.clear()
    # Read once more (told last time, so dirty), found quiet, and clean from then on.
    assert f.took(f.fetch(wait_ms=0)) == [] and [args[1].index for args in looked] == [4]
    looked.clear()
    assert isinstance(f.fetch(), Pending) and looked == []


def test_new_metadata_makes_the_next_fetch_read_every_partition(
    broker: BrokerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = settled(broker)
    before = session_watch(broker)
    broker.admin.create_topic(TopicSpec("other", 1, 1))
    broker.services.apply_metadata()
    looked = counting(monkeypatch, "_quiet")
    f.took(f.fetch(wait_ms=0))
    assert len(looked) == PARTITIONS
    assert before.closed and session_watch(broker) is not before


def test_a_parked_fetch_answers_when_its_watch_stops_holding(broker: BrokerServer) -> None:
    f = settled(broker)
    waiting = f.fetch()
    assert isinstance(waiting, Pending)
    p = partition(broker, 0)
    p.log.increment_log_start_offset(p.log.log_end_offset)
    p.notify()  # any event: the parked fetch sees the stamp moved and answers
    assert waiting.done
    told = [
        (q.partition_index, q.log_start_offset)
        for t in waiting.value.responses
        for q in t.partitions
    ]
    assert told == [(0, p.log.log_start_offset)]


def test_a_closed_session_lets_go_of_its_partitions(broker: BrokerServer) -> None:
    settled(broker)
    watch = session_watch(broker)
    callbacks = {e.on_event for e in watch.entries.values()}
    states = [partition(broker, i).followers[FOLLOWER] for i in range(PARTITIONS)]
    assert all(s.clock is watch for s in states)
    (session_id,) = broker.services.fetch_sessions.sessions
    broker.services.fetch_sessions.remove(session_id)
    assert watch.closed
    for i in range(PARTITIONS):
        assert not callbacks & set(partition(broker, i).fetches.watchers)
    assert all(s.clock is None and s.last_fetch_time_ms == watch.fetch_ms for s in states)


def test_a_partition_with_an_error_stays_dirty_and_is_told(broker: BrokerServer) -> None:
    f = settled(broker)
    p = partition(broker, 5)
    p.make_follower(
        type(p.registration)(  # another broker leads it now
            replicas=p.registration.replicas,
            isr=p.registration.isr,
            leader=FOLLOWER,
            leader_epoch=p.leader_epoch + 1,
            partition_epoch=p.partition_epoch + 1,
        )
    )
    answer = f.fetch(wait_ms=0)
    codes = [(q.partition_index, q.error_code) for t in answer.responses for q in t.partitions]
    assert codes == [(5, errors.NOT_LEADER_OR_FOLLOWER)]


def test_a_fetch_parked_on_a_session_that_ends_is_answered(broker: BrokerServer) -> None:
    f = settled(broker)
    waiting = f.fetch()
    assert isinstance(waiting, Pending)
    (session_id,) = broker.services.fetch_sessions.sessions
    broker.services.fetch_sessions.remove(session_id)
    assert waiting.done and waiting.value.error_code == errors.NONE
    assert broker.services.purgatory.delayed() == 0
