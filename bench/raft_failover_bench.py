#!/usr/bin/env python
"""KRaft failover time: kill the leader of a three-voter quorum, time until a write commits again.

    python bench/raft_failover_bench.py              # 20 kills with Kafka's default timeouts
    python bench/raft_failover_bench.py --kills 5    # fewer
    python bench/raft_failover_bench.py --tuned      # election 300 ms, fetch timeout 600 ms

Prints figures; asserts nothing about time.

Three RaftDrivers (gregor/runtime/raft_driver.py) in one process on loopback, each with its own
`__cluster_metadata-0` (StorageRaftLog) and quorum-state file in a temp dir. A kill stops the
leader's driver without resigning (no EndQuorumEpoch: to the others it is a crashed process),
then the clock runs until a record appended to whichever node becomes leader is committed on
it. The killed node is started again on its port and directory and catches up before the next
kill. Failover is bounded below by `controller.quorum.fetch.timeout.ms` (the followers must
notice the silence) plus an election, as in Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from gregor.raft import FileQuorumStateStore, RaftConfig, StorageRaftLog  # noqa: E402
from gregor.raft.node import Entry, NotLeader  # noqa: E402
from gregor.runtime.raft_driver import RaftDriver  # noqa: E402

IDS = (1, 2, 3)


async def run(kills: int, config: RaftConfig, root: str) -> list[float]:
    committed: dict[int, list[bytes]] = {i: [] for i in IDS}
    drivers: dict[int, RaftDriver] = {}
    ports: dict[int, int] = {}

    def make(node_id: int) -> RaftDriver:
        raft_log = StorageRaftLog.open(os.path.join(root, f"node-{node_id}"))
        store = FileQuorumStateStore(raft_log.directory, list(IDS))

        def on_commit(entries: list[Entry], into: list[bytes] = committed[node_id]) -> None:
            into.extend(e.data for e in entries if not e.control)

        d = RaftDriver(
            node_id, raft_log, store, config=config, cluster_id="bench", on_commit=on_commit
        )
        drivers[node_id] = d
        return d

    for i in IDS:
        ports[i] = await make(i).bind("127.0.0.1", 0)
    voters = {i: ("127.0.0.1", p) for i, p in ports.items()}
    for d in drivers.values():
        await d.start(voters)

    def leader() -> int | None:
        found = [
            i
            for i, d in drivers.items()
            if d.node is not None and not d._stopped and d.node.is_leader
        ]
        return found[0] if len(found) == 1 else None

    async def commit_one(tag: bytes, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            lead = leader()
            if lead is not None:
                offset = drivers[lead].append([tag])
                if not isinstance(offset, NotLeader):
                    while time.monotonic() < deadline and leader() == lead:
                        if tag in committed[lead]:
                            return
                        await asyncio.sleep(0.002)
            await asyncio.sleep(0.005)
        raise RuntimeError(f"no commit of {tag!r} within {timeout_s}s")

    await commit_one(b"warm-up")
    times: list[float] = []
    for k in range(kills):
        victim = leader()
        assert victim is not None
        start = time.monotonic()
        await drivers[victim].stop(resign=False)
        await commit_one(b"after-kill-%d" % k)
        took = time.monotonic() - start
        times.append(took)
        print(
            f"  kill {k + 1:>2}: node {victim} -> node {leader()}, write committed after {took * 1000:7.0f} ms"
        )
        # Bring the victim back and let it catch up before the next kill.
        d = make(victim)
        await d.bind("127.0.0.1", ports[victim])
        await d.start(voters)
        while b"after-kill-%d" % k not in committed[victim]:
            await asyncio.sleep(0.01)
    for d in drivers.values():
        await d.stop(resign=False)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--tuned", action="store_true", help="election 300 ms, fetch timeout 600 ms")
    args = ap.parse_args()
    config = RaftConfig()
    label = "Kafka's defaults (election 1000 ms, fetch timeout 2000 ms)"
    if args.tuned:
        config = RaftConfig(
            election_timeout_ms=300,
            fetch_timeout_ms=600,
            election_backoff_max_ms=300,
            request_timeout_ms=500,
        )
        label = "tuned (election 300 ms, fetch timeout 600 ms)"
    print(f"raft failover, 3 voters on loopback, {label}, {args.kills} kills")
    with tempfile.TemporaryDirectory(prefix="raft-bench-") as root:
        times = asyncio.run(run(args.kills, config, root))
    ms = [t * 1000 for t in times]
    print(
        f"failover: median {statistics.median(ms):.0f} ms, max {max(ms):.0f} ms, min {min(ms):.0f} ms"
    )


if __name__ == "__main__":
    main()
