#!/usr/bin/env python
"""Instructions each node of a 3-node cluster spends on one topic creation, counted by
valgrind's callgrind: the figure that shows a change to the KRaft metadata path when the
wall-clock rate of `cluster_metadata_bench.py` cannot (on this 2-core machine the rate moves
15-30% from run to run, and every node's work shares the same two cores).

    python bench/metadata_chain_bench.py --tree /tmp/old --tree $PWD        # 150 topics
    python bench/metadata_chain_bench.py --tree $PWD --topics 300 --partitions 3

Each tree in turn (`--runs` times, alternating) starts a `LocalCluster` of three nodes (every
node broker and controller), each node's Python run under `valgrind --tool=callgrind` with
counting off. Once the quorum has a leader and every broker is registered, 30 topics are
created to warm up (not counted), and with `--internal` a transactional producer and a group
have `__transaction_state` and `__consumer_offsets` made (50 partitions each, RF 3). Then
counting is switched on in all three (`callgrind_control -i on`), `--topics` topics are created by confluent-kafka's AdminClient on
the active controller, one per request, each awaited before the next (RF 1, `--partitions`
partitions: the cluster_metadata_bench's "one per request" case), counting is switched off and
the counts dumped; the same again with twice as many topics; then `--idle` seconds with
counting on and nothing asked. A node's instructions per topic are the difference of its two
counts, less what it does idle (heartbeats, parked fetches timing out, timers) at the idle
window's rate over the difference of their durations, over `--topics`: what a creation costs
it, with the cost of switching and dumping and the background left out. (Under valgrind a
creation takes about 100 ms, and the background would otherwise be some 15% of the figure,
moving with the machine's load.) The figure with the background in is reported too.

Printed, and written to bench/results/metadata-chain-<date>.md and .json: the active
controller's instructions per topic, the other two nodes' (each and together) and the sum, a
column per tree. Figures only. Needs valgrind (`apt-get install valgrind`); takes about two
minutes per run.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from cluster_metadata_bench import one_per_request
from scale_common import (
    Figure,
    LocalCluster,
    Report,
    Tree,
    add_common_args,
    alternate,
    broker_pid,
    runs_of,
    spawning_from,
    trees_of,
)

WARM_UP = 30
START_TIMEOUT_S = 600  # a node's start-up under valgrind (imports and all)

_TRIGGER = re.compile(r"^desc: Trigger: dump (\w+)", re.M)
_TOTALS = re.compile(r"^totals: (\d+)", re.M)


def _launcher(tmp: str) -> str:
    """A script that runs this Python under callgrind, counting off: the nodes' interpreter."""
    path = os.path.join(tmp, "python-callgrind")
    out = os.path.join(tmp, "callgrind.%p")
    with open(path, "w") as f:
        f.write(
            "#!/bin/sh\n"
            f'exec valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file={out} "{sys.executable}" "$@"\n'
        )
    os.chmod(path, 0o755)
    return path


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], capture_output=True, check=False)


def _counted(pids: list[int], prefix: str, work: Callable[[], Any]) -> float:
    """`work()` with counting on in every node; dump the counts as `prefix`; its seconds."""
    for pid in pids:
        _control(pid, "-i", "on")
    started = time.perf_counter()
    work()
    took = time.perf_counter() - started
    for pid in pids:
        _control(pid, "-i", "off")
    for pid in pids:
        _control(pid, "-d", prefix)
    return took


def _create(bootstrap: str, prefix: str, topics: int, partitions: int) -> Callable[[], None]:
    def work() -> None:
        result = one_per_request(bootstrap, prefix, topics, partitions)
        if result["failed"]:
            raise RuntimeError(f"{result['failed']} of {topics} creations failed")

    return work


def _internal_topics(bootstrap: str) -> None:
    """`__consumer_offsets` and `__transaction_state`, made as clients make them (a
    transactional producer's and a group's FindCoordinator), and loaded: each node's group and
    transaction coordinators then lead their share of the partitions."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "chain-bench"})
    producer.init_transactions(START_TIMEOUT_S)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chain-bench"})
    try:
        consumer.committed([TopicPartition("warm-0", 0)], timeout=START_TIMEOUT_S)
    finally:
        consumer.close()


def _counts(tmp: str, pid: int) -> dict[str, int]:
    """{dump name: instructions} of one node's dumps."""
    out = {}
    for path in glob.glob(os.path.join(tmp, f"callgrind.{pid}.*")):
        with open(path, errors="replace") as f:
            text = f.read()
        trigger, totals = _TRIGGER.search(text), _TOTALS.search(text)
        if trigger and totals:
            out[trigger.group(1)] = int(totals.group(1))
    return out


def _keep(tmp: str, pids: dict[int, int], ctrl: int, into: str) -> None:
    """Copy each node's dumps to `into` as controller.<dump> and node-<id>.<dump>, for
    callgrind_annotate (the "b" dump less the "a" one is what the creations cost)."""
    os.makedirs(into, exist_ok=True)
    for node, pid in pids.items():
        role = "controller" if node == ctrl else f"node-{node}"
        for path in glob.glob(os.path.join(tmp, f"callgrind.{pid}.*")):
            with open(path, errors="replace") as f:
                trigger = _TRIGGER.search(f.read())
            if trigger:
                shutil.copy(path, os.path.join(into, f"{role}.{trigger.group(1)}"))


def one_run(tree: Tree, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gregor-chain-", dir=args.dir) as tmp:
        launcher = _launcher(tmp)
        cluster = LocalCluster(3, base_dir=os.path.join(tmp, "nodes"), log_level="WARNING")
        for node in cluster.nodes.values():
            node.start_timeout_s = START_TIMEOUT_S
        real, sys.executable = sys.executable, launcher  # the nodes' interpreter (testing.Broker)
        try:
            with spawning_from(tree):
                cluster.start()
        finally:
            sys.executable = real
        try:
            ctrl = cluster.active_controller(START_TIMEOUT_S)
            cluster.wait_for_brokers(START_TIMEOUT_S)
            pids = {i: broker_pid(cluster.nodes[i]) for i in cluster.ids}
            bootstrap = cluster.bootstrap_of(ctrl)
            one_per_request(bootstrap, "warm", WARM_UP, args.partitions)
            if args.internal:
                _internal_topics(bootstrap)
            n, p, every = args.topics, args.partitions, list(pids.values())
            took_a = _counted(every, "a", _create(bootstrap, "a", n, p))
            took_b = _counted(every, "b", _create(bootstrap, "b", 2 * n, p))
            took_idle = _counted(every, "idle", lambda: time.sleep(args.idle))
        finally:
            cluster.stop()
        if args.keep:
            _keep(tmp, pids, ctrl, os.path.join(args.keep, os.path.basename(tree.path)))
        net, gross = {}, {}
        for node, pid in pids.items():
            counts = _counts(tmp, pid)
            if not {"a", "b", "idle"} <= set(counts):
                return {"error": f"node {node}: callgrind dumps missing ({sorted(counts)})"}
            gross[node] = (counts["b"] - counts["a"]) / n
            idle_rate = counts["idle"] / took_idle
            net[node] = gross[node] - idle_rate * (took_b - took_a) / n
        others = sorted(v for k, v in net.items() if k != ctrl)
        return {
            "controller": net[ctrl],
            "other_low": others[0],
            "other_high": others[1],
            "others": sum(others),
            "total": sum(net.values()),
            "total_with_background": sum(gross.values()),
            "topics_per_s_under_valgrind": 3 * n / (took_a + took_b),
        }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(ap, runs=1)
    ap.add_argument("--topics", type=int, default=150, help="topics in the first window")
    ap.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    ap.add_argument("--idle", type=float, default=15.0, help="seconds of the idle window")
    ap.add_argument(
        "--internal",
        action="store_true",
        help="make __consumer_offsets and __transaction_state first (a group and a "
        "transactional producer have been used): what the coordinators look at per change",
    )
    ap.add_argument(
        "--keep",
        metavar="DIR",
        help="keep each node's callgrind dumps in DIR/<tree>/ (controller.a, node-2.b, ...)",
    )
    args = ap.parse_args()
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    if args.quick:
        args.topics, args.idle = 20, 3.0
    trees = trees_of(args)
    report = Report("metadata-chain", args, trees)
    alternate(report, trees, runs_of(args, default=1), "chain", lambda t: one_run(t, args))
    millions = [
        ("controller", "active controller, M instructions per topic"),
        ("other_low", "another node (the lower), M instructions per topic"),
        ("other_high", "another node (the higher), M instructions per topic"),
        ("others", "the two other nodes together, M instructions per topic"),
        ("total", "all three nodes, M instructions per topic"),
        ("total_with_background", "all three nodes, background in, M instructions per topic"),
    ]
    for run_list in report.runs.get("chain", {}).values():
        for r in run_list:
            for key, _ in millions:
                if key in r:
                    r[key] = round(r[key] / 1e6, 4)
    figures = [Figure("chain", key, label) for key, label in millions]
    figures.append(
        Figure("chain", "topics_per_s_under_valgrind", "creations per second under valgrind")
    )
    report.write(
        "Instructions per topic creation on three nodes (bench/metadata_chain_bench.py)",
        __doc__.split("\n\n")[0],
        figures,
        [],
    )


if __name__ == "__main__":
    main()
