"""A follower's incremental Fetch looks only at the partitions that may have changed
(replication/follower.py), against a real leader (a `BrokerServer` built but not listening,
its fetch handler and sessions): once settled, a request looks at the partition an answer
moved and no other; what moves a partition's fetch without the fetcher (a log start moved by
retention or DeleteRecords, a log dir offline) is still told, a partition backed off is asked
again when its back-off ends, a new leader epoch given by `add` is sent, a removed partition
is forgotten, and the throttle holds a lagging partition back and lets it go."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from gregor.broker.broker import BrokerServer
from gregor.clock import SYSTEM_CLOCK
from gregor.handlers import fetch
from gregor.metadata.image import PartitionRegistration
from gregor.protocol import api_keys, errors
from gregor.replication.follower import FetcherConfig, FollowerFetcher
from gregor.replication.partition import Partition, ReplicaManager
from gregor.replication.pending import Pending
from gregor.security.replication_quotas import (
    FOLLOWER_REPLICAS,
    UNLIMITED,
    ReplicationQuota,
)
from gregor.storage import retention
from gregor.storage.config import LogConfig
from gregor.storage.log_manager import LogManager

from .helpers import NOW
from .test_fetch_wakeups import FOLLOWER, PARTITIONS, append, ctx, leader_of_six, partition

pytestmark = pytest.mark.unit
BACKOFF = 1000
DAY_MS = 24 * 3600 * 1000


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    yield from leader_of_six(tmp_path, SYSTEM_CLOCK)


class Quota:
    """The follower throttle, its bound and topic configs set by the test."""

    def __init__(self) -> None:
        self.bound = UNLIMITED
        self.configs = {"t": {FOLLOWER_REPLICAS: "*"}}
        self.q = ReplicationQuota(
            FOLLOWER, FOLLOWER_REPLICAS, lambda: self.bound, self.configs.get, num=11,
            window_ms=1000,
        )  # fmt: skip


class Replica:
    """Broker FOLLOWER (two log dirs) following the leader's partitions of t with one
    fetcher given its replica manager's stamp, as the broker wires it; `looked` lists the
    partitions each request looked at."""

    def __init__(
        self, b: BrokerServer, tmp_path: Path, quota: Quota | None = None, max_bytes: int = 1 << 20
    ) -> None:
        self.b = b
        self.dirs = [str(tmp_path / "follower-a"), str(tmp_path / "follower-b")]
        logs = LogManager(self.dirs, LogConfig())
        logs.startup()
        self.rm = ReplicaManager(FOLLOWER, logs)
        lead = partition(b, 0)
        self.epoch = lead.leader_epoch
        reg = PartitionRegistration(
            replicas=(b.node_id, FOLLOWER), isr=(b.node_id, FOLLOWER), leader=b.node_id,
            leader_epoch=self.epoch, partition_epoch=lead.partition_epoch,
        )  # fmt: skip
        self.parts = [
            self.rm.apply("t", i, lead.topic_id, reg, LogConfig(), 1, NOW)
            for i in range(PARTITIONS)
        ]
        config = FetcherConfig(
            replica_id=FOLLOWER, max_wait_ms=0, max_bytes=max_bytes, backoff_ms=BACKOFF,
            partition_max_bytes=1,
        )  # fmt: skip
        self.fetcher = Spy(
            b.node_id, config, quota.q if quota is not None else None, stamp=self.rm.stamp
        )
        for p in self.parts:
            self.fetcher.add(p, self.epoch)
        self.now = NOW

    def fetch(self) -> Any:
        """One request and the leader's answer to it; the request (None: none was made)."""
        self.now += 10
        built = self.fetcher.build_request(self.now, -1)
        if built is None:
            return None
        request, sent = built
        response = fetch.handle(ctx(self.b, api_keys.FETCH, 15), request)
        assert not isinstance(response, Pending) and response.error_code == errors.NONE
        self.fetcher.handle_response(sent, response, self.now)
        return request

    def caught_up(self) -> bool:
        return all(
            (p.log.log_end_offset, p.log.high_watermark)
            == (partition(self.b, p.index).log.log_end_offset,) * 2
            for p in self.parts
        )

    def settle(self) -> None:
        """Fetch until caught up, every high watermark known, and a request names nothing."""
        for _ in range(30):
            request = self.fetch()
            if request is not None and not named(request) and self.caught_up():
                return
        raise AssertionError("the follower did not catch up")


class Spy(FollowerFetcher):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.looked: list[list[int]] = []

    def _look(self, states: Any, *args: Any) -> Any:
        states = list(states)
        self.looked.append([s.partition.index for s in states])
        return super()._look(states, *args)


def named(request: Any) -> dict[int, tuple[int, int, int]]:
    """{partition: (fetch offset, log start, leader epoch)} of what a request names."""
    return {
        fp.partition: (fp.fetch_offset, fp.log_start_offset, fp.current_leader_epoch)
        for t in request.topics
        for fp in t.partitions
    }


def forgotten(request: Any) -> list[int]:
    return sorted(i for t in request.forgotten_topics_data for i in t.partitions)


def leader_isr_alone(b: BrokerServer, index: int) -> Partition:
    """The leader's partition with an ISR of the leader alone: its HW follows its appends."""
    p = partition(b, index)
    p.isr = [b.node_id]
    return p


def test_a_settled_follower_looks_only_at_the_partition_an_answer_moved(
    broker: BrokerServer, tmp_path: Path
) -> None:
    r = Replica(broker, tmp_path)
    r.settle()
    append(broker, 3)
    r.fetcher.looked.clear()
    assert named(r.fetch()) == {}  # the answer brings partition 3's batch
    assert r.parts[3].log.log_end_offset == partition(broker, 3).log.log_end_offset
    request = r.fetch()
    assert named(request) == {3: (r.parts[3].log.log_end_offset, 0, r.epoch)}
    assert r.fetcher.looked == [[], [3]]
    r.settle()
    assert r.caught_up()


@pytest.mark.parametrize("how", ["retention", "delete-records"])
def test_an_idle_partitions_log_start_moved_without_the_fetcher_is_told(
    broker: BrokerServer, tmp_path: Path, how: str
) -> None:
    for i in range(PARTITIONS):
        append(broker, i)
    r = Replica(broker, tmp_path)
    r.settle()
    lg = r.parts[4].log
    end = lg.log_end_offset
    assert lg.log_start_offset == 0 < end == lg.high_watermark
    if how == "retention":  # the batch's timestamp is more than retention.ms (7 days) old
        assert retention.enforce(lg, NOW + 8 * DAY_MS) == 1  # (the log manager's sweep, of one)
    else:
        lg.increment_log_start_offset(end)
    assert lg.log_start_offset == end
    assert named(r.fetch()) == {4: (end, end, r.epoch)}
    assert named(r.fetch()) == {}


def test_a_partition_backed_off_after_an_error_is_asked_again_when_its_back_off_ends(
    broker: BrokerServer, tmp_path: Path
) -> None:
    r = Replica(broker, tmp_path)
    r.settle()
    # Following partition 2 in an epoch its leader has not applied yet: UNKNOWN_LEADER_EPOCH,
    # and the partition backs off.
    r.fetcher.add(r.parts[2], r.epoch + 1)
    assert named(r.fetch()) == {2: (0, 0, r.epoch + 1)}
    ends = r.now + BACKOFF
    request = r.fetch()  # backed off: it leaves the session
    assert (named(request), forgotten(request)) == ({}, [2])
    while r.now + 10 < ends:  # (each request 10 ms after the last)
        assert named(r.fetch()) == {}
    partition(broker, 2).leader_epoch = r.epoch + 1  # the leader applied it meanwhile
    append(broker, 2)
    assert named(r.fetch()) == {2: (0, 0, r.epoch + 1)}  # its back-off is over
    r.settle()
    assert r.parts[2].log.log_end_offset == 1


def test_a_new_leader_epoch_given_by_add_is_sent(broker: BrokerServer, tmp_path: Path) -> None:
    r = Replica(broker, tmp_path)
    r.settle()
    for i in (1, 5):
        partition(broker, i).leader_epoch = r.epoch + 1
        r.fetcher.add(r.parts[i], r.epoch + 1)
    request = r.fetch()
    assert (named(request), forgotten(request)) == (
        {1: (0, 0, r.epoch + 1), 5: (0, 0, r.epoch + 1)},
        [],
    )
    append(broker, 5)
    r.settle()
    assert r.parts[5].log.log_end_offset == 1


def test_a_removed_partition_is_forgotten_and_not_asked_again(
    broker: BrokerServer, tmp_path: Path
) -> None:
    r = Replica(broker, tmp_path)
    r.settle()
    append(broker, 5)
    r.fetch()  # its batch comes: the next request would name its new offset
    assert r.parts[5].log.log_end_offset == 1
    r.fetcher.remove("t", 5)
    request = r.fetch()
    assert (named(request), forgotten(request)) == ({}, [5])
    append(broker, 5)
    r.fetch()
    r.fetch()
    assert r.parts[5].log.log_end_offset == 1  # the leader's session no longer holds it


def test_a_partition_whose_log_dir_goes_offline_leaves_the_session(
    broker: BrokerServer, tmp_path: Path
) -> None:
    r = Replica(broker, tmp_path)
    r.settle()
    r.rm.logs.fail_dir(r.dirs[0], OSError(errno.EIO, "Input/output error"), "writing")
    offline = [p.index for p in r.parts if p.log.offline]
    assert 0 < len(offline) < PARTITIONS
    request = r.fetch()
    assert (named(request), forgotten(request)) == ({}, offline)
    for i in range(PARTITIONS):
        append(broker, i)
    for _ in range(3):
        r.fetch()
    # the online partitions replicate on; the offline ones are not asked
    assert [p.index for p in r.parts if p.log.log_end_offset == 1] == [
        i for i in range(PARTITIONS) if i not in offline
    ]


def test_the_throttle_holds_a_lagging_partition_back_and_lets_it_go(
    broker: BrokerServer, tmp_path: Path
) -> None:
    quota = Quota()
    r = Replica(broker, tmp_path, quota)
    r.settle()
    leader_isr_alone(broker, 1)
    for _ in range(3):
        append(broker, 1)
    r.fetch()  # one batch of 3 (a partition max of 1 byte): lagging
    assert r.parts[1].log.log_end_offset == 1
    quota.bound = 50
    quota.q.record(1000, r.now)  # over the bound: a lagging throttled partition waits
    request = r.fetch()
    assert (named(request), forgotten(request)) == ({}, [1])
    for _ in range(3):
        r.fetch()
    assert r.parts[1].log.log_end_offset == 1
    r.now += 60_000  # the rate's window has passed: under the bound again
    assert named(r.fetch()) == {1: (1, 0, r.epoch)}
    assert r.parts[1].log.log_end_offset == 2
    quota.bound = UNLIMITED
    r.settle()
    assert r.parts[1].log.log_end_offset == 3


def test_the_throttle_holds_back_a_lagging_partition_the_last_answer_left_out(
    broker: BrokerServer, tmp_path: Path
) -> None:
    """Answers of one batch (a response max of 1 byte) feed two lagging partitions in turn:
    the one left out of the last answer is held back too once the rate is over its bound."""
    quota = Quota()
    r = Replica(broker, tmp_path, quota, max_bytes=1)
    r.settle()
    for i in (1, 3):
        leader_isr_alone(broker, i)
        for _ in range(3):
            append(broker, i)
    r.fetch()
    r.fetch()
    assert (r.parts[1].log.log_end_offset, r.parts[3].log.log_end_offset) == (1, 1)
    quota.bound = 50
    quota.q.record(1000, r.now)
    request = r.fetch()
    assert (named(request), forgotten(request)) == ({}, [1, 3])
