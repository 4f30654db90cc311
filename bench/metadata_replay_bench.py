#!/usr/bin/env python
"""Instructions a broker that is not the active controller spends when one topic creation
commits, in process and without I/O on the loop, counted by valgrind's callgrind: what every
other node of a KRaft cluster does per metadata change (the store's replay of the committed
records into its image and topics, then the partition hosting's apply and the group and
transaction coordinators' look at their internal topics).

    python bench/metadata_replay_bench.py --tree /tmp/old --tree $PWD --results /tmp/out

For each tree in turn (`--runs` times, alternating) and each case, a Python of that tree runs
under `valgrind --tool=callgrind` with counting off: an active controller on a one-voter KRaft
node polled by hand (as bench/controller_create_bench.py), three brokers registered through
it, and beside it node 2's follower side: a metadata store fed every committed entry (decoding
them, as a node that did not append them does), the partition hosting of node 2 over a log
manager in a temporary directory, and node 2's group and transaction coordinators on its
`on_applied`. `__consumer_offsets` (`--internal` partitions) and `__transaction_state` (the
same) are created led by node 2 and loaded. The loop is a list: `on_replayed` schedules the
hosting's apply there, and a new partition's log is made there as a worker thread would.
Then `--warm` topics are created and replayed on both sides (not counted), `--topics` more
are created by node 1 (one topic each, one partition), and counting goes on while node 2 is
fed what node 1 committed, poll by poll as its Raft driver would hand it over (each creation
its own commit), off again: only node 2's side is counted.

Cases: `elsewhere` (each topic's replica is node 1: node 2 only replays it) and `here` (node 2
hosts and leads it: its log is made, and it is hosted). Figures only: instructions per
creation; they move by well under 1% from run to run (no threads, no timers, no network).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from tree_child import inner_instructions

CASES = {"elsewhere": 1, "here": 2}


def _inner(case: str, topics: int, warm: int, internal: int) -> None:
    """Run under callgrind, with the tree's gregor first on sys.path."""
    import random
    from collections.abc import Callable

    import gregor

    assert gregor.__file__.startswith(os.getcwd()), f"{gregor.__file__}: not the tree measured"
    from controller_rig import CLUSTER, one_voter_store, register_brokers

    from gregor.broker.config import BrokerConfig
    from gregor.clock import ManualClock
    from gregor.controller.admin import Admin, TopicSpec
    from gregor.controller.local import LocalController
    from gregor.coordinator.runtime import GroupCoordinator
    from gregor.coordinator.txn.runtime import TransactionCoordinator
    from gregor.metadata.config_view import BrokerConfigView
    from gregor.metadata.raft_store import RaftMetadataStore
    from gregor.node.active_controller import ActiveControllerCore
    from gregor.replication.hosting import PartitionHosting
    from gregor.replication.partition import ReplicaManager
    from gregor.storage.log_manager import LogManager

    cluster, now = CLUSTER, 1_000
    node, _log, store = one_voter_store(now)
    raft = node

    # node 2: its store (fed what node 1 commits), hosting and coordinators
    clock = ManualClock(now)
    follower = RaftMetadataStore(None, cluster, clock=lambda: now)
    follower.local_id = 2

    class FollowerQuorum:
        node = raft  # for `caught_up`: the high watermark is known

    follower.attach(FollowerQuorum())  # type: ignore[arg-type]
    logs_dir = tempfile.mkdtemp(prefix="gregor-replay-")
    values = BrokerConfig.load(None, {"log.dirs": logs_dir, "node.id": "2"}).values
    view = BrokerConfigView(follower, 2, values)
    logs = LogManager([logs_dir], config_for=view.log_config_for, clock=clock)
    logs.startup()
    replicas = ReplicaManager(2, logs)
    hosting = PartitionHosting(2, follower, replicas, logs, view, clock)
    loop: list[Callable[[], None]] = []  # the event loop's next turns
    hosting.schedule = loop.append
    hosting.in_thread = lambda work, done: loop.append(lambda: done(work()))
    follower.on_replayed = hosting.apply_soon

    # What node 1 commits, poll by poll, for node 2 to be fed: (leader change or None, entries)
    committed: list[tuple[Any, list[Any]]] = []

    def run() -> None:
        for _ in range(8):
            effects = node.poll(now)
            if effects.leader_change is not None:
                store.on_leader_change(effects.leader_change)
            store.on_committed(effects.committed)
            committed.append((effects.leader_change, effects.committed))
            if not effects.committed and effects.leader_change is None:
                return

    def feed() -> None:
        """Node 2 takes what node 1 committed so far, poll by poll, each followed by what it
        scheduled on its loop."""
        for change, entries in committed:
            if change is not None:
                follower.on_leader_change(change)
            follower.on_committed(entries)
            while loop:
                loop.pop(0)()
        committed.clear()

    controller = LocalController(store, 1, {}, rng=random.Random(0))
    core = ActiveControllerCore(1, store, controller)
    run()
    core.poll(now)
    run()
    register_brokers(core, store, run, now)
    admin = Admin(store, controller, [1, 2, 3], {}, 1)
    groups = GroupCoordinator(2, follower, replicas, admin, view.value, hosting.apply)
    txns = TransactionCoordinator(
        2, follower, replicas, admin, view.value, hosting.apply, lambda: 0, lambda *a: None
    )
    hosting.on_applied += [groups.on_metadata, txns.on_metadata]

    def create(name: str, on: int, partitions: int = 1) -> None:
        assignments = {i: [on] for i in range(partitions)}
        (outcome,) = admin.create_topics([TopicSpec(name, assignments=assignments)])
        assert not isinstance(outcome, Exception), outcome
        run()

    for name in ("__consumer_offsets", "__transaction_state"):
        create(name, 2, internal)
    feed()
    while groups.runtime.loading or txns.runtime.loading:
        groups.poll(now)
        txns.poll(now)
    assert len(groups.runtime.shards()) == len(txns.runtime.shards()) == internal
    on = CASES[case]
    for i in range(warm):
        create(f"warm-{i}", on)
    feed()
    for i in range(topics):
        create(f"t-{i}", on)
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True, check=False)
    feed()
    subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True, check=False)
    assert len(follower.image.topics_by_id) == warm + topics + 2
    assert len(replicas.partitions) == 2 * internal + (warm + topics if on == 2 else 0)
    logs.shutdown()
    shutil.rmtree(logs_dir, ignore_errors=True)


def one_run(tree: Any, case: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gregor-replay-", dir=args.dir) as tmp:
        total = inner_instructions(
            tree.path, __file__, [case, str(args.topics), str(args.warm), str(args.internal)], tmp
        )
    if isinstance(total, str):
        return {"error": total}
    return {"replay_k": round(total / args.topics / 1e3, 1)}


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--inner":
        _inner(sys.argv[2], *(int(a) for a in sys.argv[3:]))
        return
    # imported here: scale_common puts this checkout first on sys.path, and the inner run
    # must import the measured tree's gregor
    from scale_common import Figure, Report, add_common_args, alternate, runs_of, trees_of

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(ap, runs=2)
    ap.add_argument("--topics", type=int, default=200, help="creations counted")
    ap.add_argument("--warm", type=int, default=200, help="creations before counting")
    ap.add_argument("--internal", type=int, default=50, help="partitions of each internal topic")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="default: both")
    args = ap.parse_args()
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    if args.quick:
        args.topics, args.warm = 20, 20
    cases = args.case or sorted(CASES)
    trees = trees_of(args)
    report = Report("metadata-replay", args, trees)
    for case in cases:
        alternate(
            report, trees, runs_of(args, default=2), case, lambda t, c=case: one_run(t, c, args)
        )
    report.write(
        "A follower node's side of a topic creation, in process (bench/metadata_replay_bench.py)",
        (__doc__ or "").split("\n\n")[0],
        [Figure(c, "replay_k", f"topic {c}: K instructions per creation") for c in cases],
        [],
    )


if __name__ == "__main__":
    main()
