"""A follower's incremental fetch session over a `BrokerServer` built but not listening: its idle
partitions cost little. An in-sync follower asking again for the log end it has keeps its fetch
state moving without the full update; a parked fetch looks only at the partition an event came
from, is not read again when only that partition's high watermark moved, and when it is read
again reads that partition (and those its last pass answered), not the quiet ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.broker.broker import BrokerServer
from gregor.broker.config import BrokerConfig
from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.controller.admin import TopicSpec
from gregor.handlers import fetch, produce
from gregor.handlers.context import RequestContext
from gregor.protocol import api_keys, errors
from gregor.protocol.headers import RequestHeader
from gregor.protocol.messages import FetchRequest
from gregor.replication.partition import Partition, ReplicaState
from gregor.replication.pending import Pending

from .helpers import produce_request

pytestmark = pytest.mark.unit

FOLLOWER = 2
PARTITIONS = 6


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    yield from leader_of_six(tmp_path, SYSTEM_CLOCK)


def leader_of_six(tmp_path: Path, clock: Clock) -> Iterator[BrokerServer]:
    """A broker leading topic t's partitions, each with FOLLOWER in its ISR."""
    b = BrokerServer(BrokerConfig.load(None, {"log.dirs": str(tmp_path / "logs")}), clock=clock)
    b.logs.startup()
    b.services.apply_metadata()
    b.admin.create_topic(TopicSpec("t", PARTITIONS, 1))
    b.services.apply_metadata()
    for i in range(PARTITIONS):
        p = partition(b, i)
        p.replicas, p.isr = [b.node_id, FOLLOWER], [b.node_id, FOLLOWER]
        p.followers = {FOLLOWER: ReplicaState(FOLLOWER)}
    yield b
    b.logs.shutdown()


def partition(b: BrokerServer, index: int) -> Partition:
    p = b.replicas.get("t", index)
    assert p is not None
    return p


def ctx(b: BrokerServer, key: int, version: int) -> RequestContext:
    return RequestContext(b.services, RequestHeader(key, version, 1, "test"), "127.0.0.1:1")


def append(b: BrokerServer, index: int) -> None:
    request = produce_request("t", index)
    response = produce.handle(ctx(b, api_keys.PRODUCE, 9), request)
    assert response.responses[0].partition_responses[0].error_code == errors.NONE


class Follower:
    """A follower's session: a full fetch, then incremental ones naming what moved."""

    def __init__(self, b: BrokerServer) -> None:
        self.b = b
        self.broker_epoch = -1
        self.offsets = {i: partition(b, i).log.log_end_offset for i in range(PARTITIONS)}
        self.session = (0, 0)
        self.moved = dict(self.offsets)

    def fetch(self, wait_ms: int = 500) -> Any:
        request = FetchRequest(
            replica_state=FetchRequest.ReplicaState(
                replica_id=FOLLOWER, replica_epoch=self.broker_epoch
            ),
            max_wait_ms=wait_ms,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=self.session[0],
            session_epoch=self.session[1],
            topics=[
                FetchRequest.FetchTopic(
                    topic_id=partition(self.b, 0).topic_id,
                    partitions=[
                        FetchRequest.FetchPartition(
                            partition=i, fetch_offset=o, partition_max_bytes=1 << 20
                        )
                        for i, o in self.moved.items()
                    ],
                )
            ]
            if self.moved
            else [],
            forgotten_topics_data=[],
        )
        self.moved = {}
        return fetch.handle(ctx(self.b, api_keys.FETCH, 15), request)

    def took(self, response: Any) -> list[int]:
        """Take an answer: the partitions that brought records."""
        assert response.error_code == errors.NONE
        self.session = (response.session_id, self.session[1] + 1)
        got = []
        for t in response.responses:
            for p in t.partitions:
                if p.records:
                    end = partition(self.b, p.partition_index).log.log_end_offset
                    self.offsets[p.partition_index] = self.moved[p.partition_index] = end
                    got.append(p.partition_index)
        return got


def in_session(b: BrokerServer) -> Follower:
    """A follower whose session holds every partition, caught up, its next fetch parked."""
    f = Follower(b)
    for i in range(PARTITIONS):
        append(b, i)
    assert sorted(f.took(f.fetch())) == list(range(PARTITIONS))
    assert f.session[0] != 0
    assert f.took(f.fetch(wait_ms=0)) == []  # the follower's offsets reach the leader: HW moves
    assert f.took(f.fetch(wait_ms=0)) == []  # and the session tells the follower the new HW
    return f


def counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Any]:
    """Calls of fetch.`name`, by their arguments."""
    calls: list[Any] = []
    real = getattr(fetch, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(fetch, name, spy)
    return calls


def full_updates(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The partitions given the full follower fetch-state update, in call order."""
    full: list[int] = []
    real = Partition.update_follower_fetch_state
    monkeypatch.setattr(
        Partition,
        "update_follower_fetch_state",
        lambda self, *a: (full.append(self.index), real(self, *a))[1],
    )
    return full


def parked(broker: BrokerServer) -> tuple[Follower, Pending]:
    """A follower in session, its next fetch parked."""
    f = in_session(broker)
    waiting = f.fetch()
    assert isinstance(waiting, Pending)
    return f, waiting


def test_an_idle_in_sync_follower_moves_its_fetch_times_without_the_full_update(
    broker: BrokerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = in_session(broker)
    full = full_updates(monkeypatch)
    states = [partition(broker, i).followers[FOLLOWER] for i in range(PARTITIONS)]
    for state in states:
        state.last_caught_up_time_ms = state.last_fetch_time_ms = 0
    before = broker.services.now_ms()
    assert isinstance(f.fetch(), Pending)  # nothing new: parked
    assert full == []
    for i, state in enumerate(states):
        assert state.last_caught_up_time_ms >= before and state.last_fetch_time_ms >= before
        assert state.log_end_offset == partition(broker, i).log.log_end_offset


def test_a_follower_behind_on_a_partition_gets_the_full_update(
    broker: BrokerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = in_session(broker)
    partition(broker, 3).isr = [broker.node_id]  # out of the ISR: its fetch may add it back
    full = full_updates(monkeypatch)
    f.fetch()
    assert full == [3]


def test_a_parked_follower_fetch_is_not_read_again_when_only_a_high_watermark_moved(
    broker: BrokerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _f, waiting = parked(broker)
    passes = counting(monkeypatch, "_collect")
    p = partition(broker, 2)
    p.log.update_high_watermark(p.log.high_watermark)  # (unchanged, but the event fires)
    p.notify()
    assert passes == [] and not waiting.done


def test_a_woken_follower_fetch_reads_the_partition_that_changed_and_not_the_quiet_ones(
    broker: BrokerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    f, waiting = parked(broker)
    looked = counting(monkeypatch, "_quiet")
    append(broker, 4)
    assert waiting.done
    assert f.took(waiting.value) == [4]
    assert [args[1].index for args in looked] == [4]  # not the five quiet partitions
    # The session goes on: the next record on another partition comes in the next answer.
    looked.clear()
    waiting = f.fetch()
    # A request reads the partition it names (4, at its new offset), none of the quiet ones.
    assert isinstance(waiting, Pending) and [args[1].index for args in looked] == [4]
    append(broker, 1)
    assert waiting.done and f.took(waiting.value) == [1]


def test_a_follower_fetching_with_a_stale_broker_epoch_is_refused_on_every_partition(
    broker: BrokerServer,
) -> None:
    f = in_session(broker)
    for i in range(PARTITIONS):
        p = partition(broker, i)
        p.followers[FOLLOWER].broker_epoch = f.broker_epoch = 4
        p.liveness = lambda broker_id: type("L", (), {"epoch": 5, "eligible": True})()
    response = f.fetch(wait_ms=0)
    codes = [q.error_code for t in response.responses for q in t.partitions]
    assert codes == [errors.NOT_LEADER_OR_FOLLOWER] * PARTITIONS


def test_a_fetch_of_epoch_minus_one_closes_the_session_it_names_and_makes_none(broker) -> None:
    """Epoch -1 (a consumer's sessionless Fetch, or a client leaving its session): with id 0
    no session is made and the others stay; with a session's id that session is closed first
    (KIP-227). Both are read and answered in full, with session id 0."""
    f = in_session(broker)
    sessions = broker.services.fetch_sessions
    assert f.session[0] in sessions.sessions
    for session_id in (0, f.session[0]):
        f.session, f.moved = (session_id, -1), {0: f.offsets[0]}
        answer = f.fetch(wait_ms=0)
        assert answer.error_code == errors.NONE and answer.session_id == 0
        assert [p.partition_index for t in answer.responses for p in t.partitions] == [0]
        assert len(sessions) == (1 if session_id == 0 else 0), "closed only when named"
