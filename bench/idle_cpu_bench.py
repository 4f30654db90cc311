"""CPU an idle node spends: ms of CPU (utime + stime, all threads) per second of wall clock.

    python bench/idle_cpu_bench.py --tree /tmp/rt_base --tree /tmp/rt_new [--window 25] [--runs 2]
    python bench/idle_cpu_bench.py --tree . --skip-cluster --partitions 2000   # one node, 2,000

Per tree: a 3-node KRaft cluster (scale_common.start_cluster, every node broker and
controller), left alone for --settle seconds after it is up, then /proc/PID/stat read at the
start and the end of a --window second window for each node; then one node (`gregor serve`)
the same way. Nothing is sent to the nodes meanwhile, so the figure is the cost of the
timers, the periodic tasks and the Raft fetches between the nodes: CPU taken from every
request on a machine whose cores the nodes share. The trees alternate run by run; the
figures are printed per node (the active controller marked) and as a median over runs.

CPU is read from /proc/PID/task/*/schedstat (nanoseconds; utime + stime in 10 ms ticks where
there is none). Noise: a node's figure moves by about 0.1-0.3 ms/s run to run on a machine
others share (cache, frequency, what the other nodes do).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from scale_common import (  # noqa: E402
    Tree,
    broker_pid,
    proc_cpu_seconds,
    start_broker,
    start_cluster,
    trees_of,
)


def cpu_seconds(pid: int) -> float:
    """CPU a process has run, all its threads: the scheduler's nanoseconds
    (/proc/PID/task/*/schedstat) where there are, else utime + stime (10 ms ticks). A thread
    that ended meanwhile is missed by the first (the nodes' threads live as long as they do)."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError):
        return proc_cpu_seconds(pid)


def cpu_ms_per_s(pids: list[int], window_s: float) -> list[float]:
    """Each process's CPU over the next `window_s` seconds, in ms per second."""
    before = [cpu_seconds(pid) for pid in pids]
    t0 = time.monotonic()
    time.sleep(window_s)
    took = time.monotonic() - t0
    after = [cpu_seconds(pid) for pid in pids]
    return [(a - b) * 1000.0 / took for a, b in zip(after, before, strict=True)]


def cluster_run(tree: Tree, args: argparse.Namespace) -> tuple[list[float], int]:
    """(ms/s per node, ordered by node id; the active controller's index)."""
    with tempfile.TemporaryDirectory(dir=args.dir) as base:
        cluster = start_cluster(tree, 3, base)
        try:
            active = cluster.active_controller(60)
            time.sleep(args.settle)
            ids = sorted(cluster.nodes)
            pids = [broker_pid(cluster.nodes[i]) for i in ids]
            return cpu_ms_per_s(pids, args.window), ids.index(active)
        finally:
            cluster.stop()


def _create_topic(bootstrap: str, partitions: int) -> None:
    """One topic of `partitions` partitions, made by an AdminClient that is gone before the
    window (its connection would be one more thing the node serves)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("idle", partitions, 1)]).values():
        future.result(120)
    del admin


def single_run(tree: Tree, args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory(dir=args.dir) as base:
        broker = start_broker(tree, base)
        try:
            if args.partitions:
                _create_topic(broker.bootstrap, args.partitions)
            time.sleep(args.settle)
            return cpu_ms_per_s([broker_pid(broker)], args.window)[0]
        finally:
            broker.stop()


def _cluster_figures(
    tree: Tree, args: argparse.Namespace, run: int, figures: dict[str, list[float]]
) -> None:
    nodes, active = cluster_run(tree, args)
    marks = " ".join(f"{ms:.2f}{'*' if i == active else ''}" for i, ms in enumerate(nodes))
    print(f"run {run} {tree.label}: cluster nodes ms/s {marks} (* active controller)")
    figures.setdefault("cluster, active controller", []).append(nodes[active])
    others = [ms for i, ms in enumerate(nodes) if i != active]
    figures.setdefault("cluster, other node (mean)", []).append(statistics.mean(others))
    figures.setdefault("cluster, sum of 3 nodes", []).append(sum(nodes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tree", action="append", default=[], metavar="PATH")
    ap.add_argument("--runs", type=int, default=1, help="runs per tree (alternating)")
    ap.add_argument("--window", type=float, default=25.0, help="seconds measured")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds left alone first")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--skip-single", action="store_true", help="the 3-node cluster only")
    ap.add_argument("--skip-cluster", action="store_true", help="the single node only")
    ap.add_argument(
        "--partitions", type=int, default=0, help="the single node holds a topic of this many"
    )
    args = ap.parse_args()
    trees = trees_of(args)
    per_tree: dict[str, dict[str, list[float]]] = {t.label: {} for t in trees}
    for run in range(args.runs):
        for tree in trees:
            figures = per_tree[tree.label]
            if not args.skip_cluster:
                _cluster_figures(tree, args, run, figures)
            if not args.skip_single:
                one = single_run(tree, args)
                print(f"run {run} {tree.label}: single node ms/s {one:.2f}")
                figures.setdefault("single node", []).append(one)
            sys.stdout.flush()
    labels = [t.label for t in trees]
    print(f"\nCPU ms per second, idle, median of {args.runs} run(s), window {args.window:g} s")
    print("| case | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for case in per_tree[labels[0]]:
        cells = [f"{statistics.median(per_tree[label][case]):.2f}" for label in labels]
        print(f"| {case} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
