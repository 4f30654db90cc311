"""Three RaftDrivers in one process on loopback: election, replication, failover, catch-up."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from gregor.protocol import api_keys
from gregor.protocol.messages import ApiVersionsRequest
from gregor.raft import messages as m
from gregor.raft import wire
from gregor.raft.node import NotLeader
from gregor.runtime.aio_fsync import AioFsync, aio_fsync_available
from gregor.runtime.client import NetworkClient
from gregor.runtime.raft_driver import parse_voters
from tests.kraft_net.helpers import CONFIG, IDS, Cluster, wait_for


def test_parse_voters() -> None:
    assert parse_voters("1@localhost:9093, 2@10.0.0.2:9094,3@[::1]:9095") == {
        1: ("localhost", 9093),
        2: ("10.0.0.2", 9094),
        3: ("::1", 9095),
    }
    for bad in ("", "1@host", "x@h:1", "1@h:1,1@h:2", "1host:9"):
        with pytest.raises(ValueError):
            parse_voters(bad)


def test_three_drivers_elect_replicate_fail_over_and_catch_up(tmp_path: Path) -> None:
    async def main() -> None:
        cluster = Cluster(tmp_path)
        ports = {i: await cluster.make(i).bind("127.0.0.1", 0) for i in IDS}
        cluster.voters = {i: ("127.0.0.1", p) for i, p in ports.items()}
        for d in cluster.drivers.values():
            await d.start(cluster.voters)
        try:
            await run(cluster, ports)
        finally:
            for d in cluster.drivers.values():
                await d.stop()

    asyncio.run(main())


async def run(cluster: Cluster, ports: dict[int, int]) -> None:
    drivers = cluster.drivers
    # 1. One leader, followed by the other two.
    await wait_for("a leader", lambda: len(cluster.leaders()) == 1, 5.0)
    (leader,) = cluster.leaders()
    epoch = drivers[leader].node.epoch  # type: ignore[union-attr]
    await wait_for(
        "followers",
        lambda: all(d.node is not None and d.node.leader_id == leader for d in drivers.values()),
    )
    # Non-leaders refuse appends.
    other = next(i for i in IDS if i != leader)
    assert isinstance(drivers[other].append([b"nope"]), NotLeader)

    # 2. Appended records are committed, in order, on all three.
    first = [f"record-{i}".encode() for i in range(20)]
    for i in range(0, 20, 5):
        assert not isinstance(drivers[leader].append(first[i : i + 5]), NotLeader)
    await wait_for("commit on all", lambda: all(cluster.committed[i] == first for i in IDS))

    # DescribeQuorum over the wire, from the leader's listener.
    client = NetworkClient({leader: ("127.0.0.1", ports[leader])})
    try:
        key, version, body = wire.to_request(m.DescribeQuorumRequest(0))
        described = wire.from_response(
            key, version, await client.send(leader, key, version, body), 0
        )
        assert described.leader_id == leader and described.leader_epoch == epoch
        assert sorted(r.replica_id for r in described.current_voters) == list(IDS)
        served = await client.send(
            leader,
            api_keys.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
        assert {a.api_key for a in served.api_keys} == {18, 1, 52, 53, 54, 55, 59}
    finally:
        await client.close()

    # 3. Stop the leader: the other two elect a new one, in a later epoch, and commit.
    old = leader
    await drivers[old].stop()
    del drivers[old]
    took = await wait_for("a new leader", lambda: len(cluster.leaders()) == 1, 8.0)
    (leader,) = cluster.leaders()
    assert leader != old and drivers[leader].node.epoch > epoch  # type: ignore[union-attr]
    assert took < 8.0
    second = [f"after-{i}".encode() for i in range(10)]
    assert not isinstance(drivers[leader].append(second), NotLeader)
    survivors = [i for i in IDS if i != old]
    await wait_for(
        "commit on survivors",
        lambda: all(cluster.committed[i] == first + second for i in survivors),
    )

    # 4. Restart the old leader on its port and data: it follows and catches up.
    restarted = cluster.make(old)
    assert await restarted.bind("127.0.0.1", ports[old]) == ports[old]
    await restarted.start(cluster.voters)
    await wait_for("catch-up", lambda: cluster.committed[old] == first + second)
    assert restarted.node is not None and restarted.node.leader_id == leader
    third = [b"last"]
    assert not isinstance(drivers[leader].append(third), NotLeader)
    await wait_for(
        "commit on all three", lambda: all(cluster.committed[i][-1:] == third for i in IDS)
    )


def test_graceful_resign_hands_over_quickly(tmp_path: Path) -> None:
    async def main() -> None:
        cluster = Cluster(tmp_path)
        async with cluster.running() as leader:
            await cluster.drivers.pop(leader).stop(resign=True)
            took = await wait_for("a successor", lambda: len(cluster.leaders()) == 1, 5.0)
            assert took < CONFIG.fetch_timeout_ms / 1000  # did not wait for the fetch timeout

    asyncio.run(main())


@pytest.mark.parametrize("aio", [False, True], ids=["flush-thread", "aio-fsync"])
def test_the_log_is_fsynced_off_the_event_loop_and_commits_are_durable_on_a_majority(
    tmp_path: Path, aio: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every node's flushes run off the loop: on the driver's flush thread, or (`aio`) handed
    to the kernel as Linux AIO fsyncs, whose completions the loop reads; what the leader
    reports committed is flushed on a majority's disks when it is reported."""
    if aio and not aio_fsync_available():
        pytest.skip("this kernel offers no Linux AIO")
    flush_threads: set[str] = set()
    aio_fsyncs: list[int] = []
    submit = AioFsync.submit

    def submit_traced(self: AioFsync, fds: list[int], on_done: Any) -> bool:
        taken = submit(self, fds, on_done)
        aio_fsyncs.append(len(fds) if taken else 0)
        return taken

    monkeypatch.setattr(AioFsync, "submit", submit_traced)
    durable_at_commit: list[int] = []

    async def main() -> None:
        cluster = Cluster(tmp_path)
        for i in IDS:
            driver = cluster.make(i)
            driver.aio_fsync = aio
            begin = driver.log.begin_flush  # type: ignore[attr-defined]

            def traced(up_to: int, begin=begin):  # type: ignore[no-untyped-def]
                sync, done = begin(up_to)

                def sync_traced() -> None:
                    flush_threads.add(threading.current_thread().name)
                    sync()

                return sync_traced, done

            driver.log.begin_flush = traced  # type: ignore[attr-defined]
        ports = {i: await cluster.drivers[i].bind("127.0.0.1", 0) for i in IDS}
        cluster.voters = {i: ("127.0.0.1", p) for i, p in ports.items()}
        for d in cluster.drivers.values():
            await d.start(cluster.voters)
        try:
            await wait_for("a leader", lambda: len(cluster.leaders()) == 1, 5.0)
            (leader,) = cluster.leaders()
            records = [b"r%d" % i for i in range(30)]
            for r in records:
                assert not isinstance(cluster.drivers[leader].append([r]), NotLeader)
                await asyncio.sleep(0)

            def committed_on_leader() -> bool:
                if cluster.committed[leader] != records:
                    return False
                hw = cluster.drivers[leader].node.high_watermark  # type: ignore[union-attr]
                durable_at_commit.extend(
                    sorted((d.log.flushed_offset for d in cluster.drivers.values()), reverse=True)
                )
                durable_at_commit.append(hw or 0)
                return True

            await wait_for("commit", committed_on_leader)
        finally:
            for d in cluster.drivers.values():
                await d.stop()

    asyncio.run(main())
    if aio:
        assert not flush_threads, flush_threads  # no fsync by a thread of ours
        assert aio_fsyncs and all(n >= 1 for n in aio_fsyncs), aio_fsyncs
    else:
        assert not aio_fsyncs
        assert flush_threads and all("flush" in name for name in flush_threads), flush_threads
        assert threading.main_thread().name not in flush_threads
    *durable, hw = durable_at_commit
    assert durable[1] >= hw  # the second most durable of three: a majority holds the commit


def test_requests_to_other_voters_need_no_task_once_connected(tmp_path: Path) -> None:
    """A node's requests to the other voters (the followers' Fetches, parked at the leader
    between appends) are written on the open connection and answered from its reading: no
    task is left waiting on one."""

    async def main() -> None:
        cluster = Cluster(tmp_path)
        async with cluster.running() as leader:
            drivers = cluster.drivers
            for i in range(5):
                assert not isinstance(drivers[leader].append([b"r%d" % i]), NotLeader)
                await wait_for(
                    "commit", lambda i=i: all(len(cluster.committed[n]) > i for n in IDS)
                )
            followers = [drivers[n] for n in IDS if n != leader]
            assert all(f.client is not None and f.client.connection(leader) for f in followers)
            assert all(not f._tasks for f in followers), [f._tasks for f in followers]

    asyncio.run(main())


def test_the_timer_is_set_again_only_for_an_earlier_deadline(tmp_path: Path) -> None:
    async def main() -> None:
        driver = Cluster(tmp_path).make(1)
        now = driver.clock()
        driver._arm_timer(now + 1_000)
        first = driver._timer
        driver._arm_timer(now + 5_000)  # later: the earlier timer stays (an early poll is free)
        assert driver._timer is first and first is not None and not first.cancelled()
        driver._arm_timer(now + 10)  # earlier: set again
        assert driver._timer is not first and first.cancelled()
        assert driver._timer is not None
        driver._timer.cancel()

    asyncio.run(main())


def test_a_timer_that_fires_before_the_nodes_deadline_does_not_poll_it(tmp_path: Path) -> None:
    """The timer stays set for an earlier deadline when the node's moves later (a parked
    Fetch answered by an append): when it fires, the node is polled only if its deadline has
    come; else the timer is set again for it."""

    async def main() -> None:
        cluster = Cluster(tmp_path)
        async with cluster.running() as leader:
            driver = cluster.drivers[leader]
            node = driver.node
            assert node is not None
            polls = []
            real_poll = node.poll

            def counting_poll(now_ms: int) -> Any:
                polls.append(now_ms)
                return real_poll(now_ms)

            node.poll = counting_poll  # type: ignore[method-assign]
            now = driver.clock()
            driver._apply(real_poll(now))
            deadline = driver._deadline_ms
            assert now < deadline <= now + 60_000, (now, deadline)
            driver._on_timer()  # early: nothing is due
            assert polls == []
            assert driver._timer is not None and driver._timer_at_ms >= deadline - 1
            driver._deadline_ms = now  # its deadline has come
            driver._on_timer()
            assert len(polls) == 1

    asyncio.run(main())


def test_a_follower_writes_its_leaders_batches_byte_for_byte(tmp_path: Path) -> None:
    """A follower copies the record batches of the metadata log as its leader wrote them (the
    leader's timestamps and CRCs), as Kafka's followers do: the three logs are the same bytes."""

    async def main() -> None:
        cluster = Cluster(tmp_path)
        async with cluster.running() as leader:
            drivers = cluster.drivers
            for i in range(4):
                assert not isinstance(drivers[leader].append([b"x%d" % i, b"y"]), NotLeader)
                await asyncio.sleep(0.01)  # different milliseconds: batches of other timestamps
            await wait_for("commit", lambda: all(len(cluster.committed[n]) == 8 for n in IDS))
            ends = {n: d.log.end_offset for n, d in drivers.items()}
            assert len(set(ends.values())) == 1, ends
            files = {}
            for n, d in drivers.items():
                with open(os.path.join(d.log.directory, "00000000000000000000.log"), "rb") as f:
                    files[n] = f.read()
            assert len(files[leader]) > 0
            assert all(data == files[leader] for data in files.values())

    asyncio.run(main())
