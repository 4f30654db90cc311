"""The replica fetchers' decisions, sans I/O (replication/fetcher_session.py), on a clock the
test moves: one session per leader with one Fetch out at a time, the leader's registered
address, nothing before this broker is registered, back-off after a failed Fetch or a leader
with no address, and sessions made and dropped as partitions move (an answer to a dropped
session is ignored). The leader is a real Partition answering as the fetch handler does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gregor.protocol import api_keys
from gregor.protocol.outbound import Outbound
from gregor.replication.fetcher_session import ReplicaFetchers
from gregor.replication.follower import FETCH_VERSION, FetcherConfig, FollowerFetcher
from gregor.replication.partition import FollowerChange, Partition, ReplicaManager
from gregor.runtime.client import DisconnectedError
from gregor.storage.config import LogConfig

from .helpers import (
    NOW,
    TOPIC,
    TOPIC_ID,
    Cluster,
    host,
    manager,
    produce,
    registration,
    serve_fetch,
)

BACKOFF = 1000
CONFIG = FetcherConfig(replica_id=2, max_wait_ms=500, backoff_ms=BACKOFF)
SOCKET_TIMEOUT = 30_000


class Setup:
    """Broker 2 follows partition 0 (led by 1) and partition 1 (led by 3)."""

    def __init__(self, tmp_path: Path) -> None:
        cluster = Cluster()
        self.leader_rm = manager(tmp_path, 1, cluster)
        self.leader = host(self.leader_rm, registration(1))
        self.rm: ReplicaManager = manager(tmp_path, 2, cluster)
        self.p0 = self.follow(0, leader=1)
        self.p1 = self.follow(1, leader=3)
        self.epoch = 102
        self.endpoints = {1: ("10.0.0.1", 9092), 3: ("10.0.0.3", 9092)}
        self.fetchers = ReplicaFetchers(
            CONFIG,
            partition_of=self.rm.get,
            broker_epoch=lambda: self.epoch,
            endpoint_of=self.endpoints.get,
            socket_timeout_ms=SOCKET_TIMEOUT,
        )
        self.woken = 0
        self.fetchers.wakeup = self.wake
        self.fetchers.apply(self.rm.take_follower_changes())

    def wake(self) -> None:
        self.woken += 1

    def follow(self, index: int, leader: int, epoch: int = 0) -> Partition:
        reg = registration(leader, epoch)
        return self.rm.apply(TOPIC, index, TOPIC_ID, reg, LogConfig(), 1, NOW)

    def poll(self, now: int) -> tuple[dict[int, Outbound], int | None]:
        result = self.fetchers.poll(now)
        out = {o.destination: o for o in result.outbound}
        assert len(out) == len(result.outbound), "one Fetch per leader"
        return out, result.next_deadline_ms  # type: ignore[return-value]


def asked(out: Outbound) -> list[tuple[int, int]]:
    return [(p.partition, p.fetch_offset) for t in out.body.topics for p in t.partitions]


def test_one_fetch_per_leader_at_its_registered_address_and_one_out_at_a_time(
    tmp_path: Path,
) -> None:
    s = Setup(tmp_path)
    assert s.woken == 1 and sorted(s.fetchers.sessions) == [1, 3]
    out, deadline = s.poll(NOW)
    assert sorted(out) == [1, 3] and deadline is None
    f1 = out[1]
    assert (f1.api_key, f1.version, f1.address) == (
        api_keys.FETCH,
        FETCH_VERSION,
        ("10.0.0.1", 9092),
    )
    assert f1.timeout_ms == 500 + SOCKET_TIMEOUT
    assert f1.body.replica_state.replica_id == 2 and f1.body.replica_state.replica_epoch == 102
    assert asked(f1) == [(0, 0)] and asked(out[3]) == [(1, 0)]
    assert s.poll(NOW + 1) == ({}, None), "each session waits for its answer"


def test_an_answer_is_applied_and_the_next_fetch_goes_at_once(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    produce(s.leader, 3)
    out, _ = s.poll(NOW)
    s.fetchers.on_response(out[1], serve_fetch(s.leader, out[1].body, NOW), NOW + 1)
    assert s.p0.log.log_end_offset == 3
    again, _ = s.poll(NOW + 1)
    assert sorted(again) == [1] and asked(again[1]) == [(0, 3)]


def test_a_failed_fetch_backs_its_partitions_off(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    out, _ = s.poll(NOW)
    s.fetchers.on_error(out[1], DisconnectedError("connection refused"), NOW + 10)
    assert s.fetchers.sessions[1].failures == 1
    assert s.poll(NOW + 10) == ({}, NOW + 10 + BACKOFF)
    again, _ = s.poll(NOW + 10 + BACKOFF)
    assert sorted(again) == [1]
    s.fetchers.on_response(again[1], serve_fetch(s.leader, again[1].body, NOW), NOW + 2000)
    assert s.fetchers.sessions[1].failures == 0


def test_nothing_goes_before_this_broker_is_registered(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.epoch = -1
    assert s.poll(NOW) == ({}, NOW + 200)
    s.epoch = 102
    out, _ = s.poll(NOW + 200)
    assert sorted(out) == [1, 3]


def test_a_leader_with_no_address_yet_is_backed_off(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    del s.endpoints[3]
    out, deadline = s.poll(NOW)
    assert sorted(out) == [1] and deadline == NOW + BACKOFF
    s.endpoints[3] = ("10.0.0.3", 9093)  # registered since, at another port
    out, _ = s.poll(NOW + BACKOFF)
    assert out[3].address == ("10.0.0.3", 9093)


def test_partitions_move_between_sessions_and_an_answer_to_a_dropped_one_is_ignored(
    tmp_path: Path,
) -> None:
    s = Setup(tmp_path)
    produce(s.leader, 2)
    out, _ = s.poll(NOW)
    old = s.fetchers.sessions[1]
    s.follow(0, leader=3, epoch=1)  # partition 0 moves to broker 3: session 1 has nothing left
    s.fetchers.apply(s.rm.take_follower_changes())
    assert sorted(s.fetchers.sessions) == [3] and s.woken == 2
    s.fetchers.on_response(out[1], serve_fetch(s.leader, out[1].body, NOW), NOW + 1)
    assert s.p0.log.log_end_offset == 0, "the old leader's answer is not applied"
    assert old.in_flight is None
    # session 3 still has its Fetch for partition 1 out; partition 0 joins its next one
    assert s.poll(NOW + 2) == ({}, None)
    s.fetchers.on_error(out[3], DisconnectedError("lost"), NOW + 3)
    s.follow(1, leader=3, epoch=1)  # a new epoch: fetched again at once, back-off or not
    s.fetchers.apply(s.rm.take_follower_changes())
    again, _ = s.poll(NOW + 4)
    assert sorted(again) == [3] and sorted(asked(again[3])) == [(0, 0), (1, 0)]


def test_a_partition_this_broker_now_leads_leaves_its_session(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.follow(1, leader=2, epoch=1)
    s.fetchers.apply(s.rm.take_follower_changes())
    assert sorted(s.fetchers.sessions) == [1]


def test_sessions_use_the_fetcher_given(tmp_path: Path) -> None:
    """What one Fetch asks is the given FollowerFetcher's (the simulation's broken variants
    give a subclass): each session is one of it."""

    class Marking(FollowerFetcher):
        def build_request(self, now_ms: int, broker_epoch: int) -> Any:
            built = super().build_request(now_ms, broker_epoch)
            if built is not None:
                built[0].rack_id = "marked"
            return built

    s = Setup(tmp_path)
    s.fetchers = ReplicaFetchers(
        CONFIG, partition_of=s.rm.get, broker_epoch=lambda: s.epoch,
        endpoint_of=s.endpoints.get, socket_timeout_ms=SOCKET_TIMEOUT, fetcher=Marking,
    )  # fmt: skip
    s.fetchers.apply([FollowerChange(TOPIC, 0, 1, 0), FollowerChange(TOPIC, 1, 3, 0)])
    out, _ = s.poll(NOW)
    assert sorted(out) == [1, 3]
    assert all(type(sess.state) is Marking for sess in s.fetchers.sessions.values())
    assert {o.body.rack_id for o in out.values()} == {"marked"}
