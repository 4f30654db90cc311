"""A RaftDriver observer (a broker-only node) over loopback: no listener of its own, only the
bootstrap servers' addresses; it learns the leader and where it listens from a Fetch answer,
replicates what the voters commit, shows in DescribeQuorum as an observer, and finds the new
leader after the old one stops."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gregor.raft import FileQuorumStateStore, StorageRaftLog
from gregor.raft.node import Entry, NotLeader
from gregor.runtime.raft_driver import RaftDriver
from tests.kraft_net.helpers import CONFIG, IDS, Cluster, wait_for

OBSERVER = 7


def make_observer(root: Path, committed: list[bytes]) -> RaftDriver:
    raft_log = StorageRaftLog.open(str(root / f"node-{OBSERVER}"))
    store = FileQuorumStateStore(raft_log.directory, [])

    def on_commit(entries: list[Entry]) -> None:
        committed.extend(e.data for e in entries if not e.control)

    return RaftDriver(
        OBSERVER, raft_log, store, config=CONFIG, cluster_id="c1", on_commit=on_commit
    )


def test_an_observer_knowing_only_bootstrap_servers_follows_the_leader(tmp_path: Path) -> None:
    async def main() -> None:
        cluster = Cluster(tmp_path)
        await cluster.start()
        voters = cluster.voters
        seen: list[bytes] = []
        observer = make_observer(tmp_path, seen)
        await observer.start({}, bootstrap=[voters[i] for i in IDS])
        try:
            await wait_for("a leader", lambda: len(cluster.leaders()) == 1, 5.0)
            (leader,) = cluster.leaders()
            assert not isinstance(cluster.drivers[leader].append([b"a", b"b"]), NotLeader)
            await wait_for("the observer's copy", lambda: seen == [b"a", b"b"])
            assert observer.server is None  # it never listened
            assert observer.node is not None and observer.node.leader_id == leader
            assert observer.endpoint(leader) == voters[leader]  # named by the leader's answer
            described = cluster.drivers[leader].describe_quorum()
            assert [o.replica_id for o in described.observers] == [OBSERVER]
            assert sorted(v.replica_id for v in described.current_voters) == list(IDS)

            await cluster.drivers.pop(leader).stop(resign=True)
            await wait_for("a new leader", lambda: len(cluster.leaders()) == 1, 8.0)
            (second,) = cluster.leaders()
            assert not isinstance(cluster.drivers[second].append([b"c"]), NotLeader)
            await wait_for("the observer follows the new leader", lambda: seen[-1:] == [b"c"], 10)
            assert observer.node.leader_id == second
        finally:
            await observer.stop()
            for d in cluster.drivers.values():
                await d.stop()

    asyncio.run(main())
