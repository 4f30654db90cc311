#!/usr/bin/env python
"""Topic creations per second on one node and on a three-node cluster, through confluent-kafka's
AdminClient as users' programs send them; source trees side by side in one run.

    python bench/cluster_metadata_bench.py                        # this checkout, 3 runs
    python bench/cluster_metadata_bench.py --tree /tmp/old --tree .   # old and new, alternating
    python bench/cluster_metadata_bench.py --quick                # a smoke run

Cases, each on one node (`gregor serve`, a one-voter quorum) and on three (`LocalCluster`, every
node broker and controller), the AdminClient bootstrapped on the active controller, then on a
node that is not. Metadata names the active controller as `controller_id` when it is a broker,
so the client sends its CreateTopics there either way; a tree before that change had the other
node forward every request in an Envelope (KIP-590):
1. one topic per request, each awaited before the next (p50 / p99 latency too);
2. `--batch` topics per request;
3. `--threads` AdminClients at once, each creating one topic per request (many users at once);
4. one AdminClient, one topic per request, every request sent before any answer is awaited
   (`create_topics` called per topic, the futures collected afterwards: pipelined).
Every figure is the median over `--runs` runs; the trees alternate run by run. Figures only.
With each case, the CPU time (user + system, /proc) the nodes used per topic created: the
active controller's, and the other nodes' together; on a machine other work shares, it moves
far less than the rates do.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from scale_common import (  # noqa: E402
    Figure,
    Report,
    Tree,
    add_common_args,
    broker_pid,
    latency_summary_ms,
    runs_of,
    say,
    start_broker,
    start_cluster,
    trees_of,
)

GOAL = 500  # topics/s on three nodes (the performance issue's goal)


def create(admin: AdminClient, topics: list[NewTopic]) -> int:
    """Create `topics` in one request; how many failed (reported, not raised: a bench)."""
    failed = 0
    for name, f in admin.create_topics(topics, request_timeout=60).items():
        try:
            f.result()
        except Exception as exc:
            failed += 1
            print(f"  {name}: {exc}", file=sys.stderr)
    return failed


def admin_of(bootstrap: str) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every broker registered: the topics can be placed
        if admin.list_topics(timeout=10).brokers:
            return admin
        time.sleep(0.2)
    raise SystemExit(f"no broker registered at {bootstrap} within 60 s")


def one_per_request(bootstrap: str, prefix: str, n: int, partitions: int) -> dict[str, Any]:
    admin = admin_of(bootstrap)
    create(admin, [NewTopic(f"{prefix}-warmup", partitions, 1)])
    latencies, failed = [], 0
    start = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        failed += create(admin, [NewTopic(f"{prefix}-{i}", partitions, 1)])
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    return {"topics_per_s": n / elapsed, "failed": failed, **latency_summary_ms(latencies)}


def batched(bootstrap: str, prefix: str, n: int, batch: int, partitions: int) -> dict[str, Any]:
    admin = admin_of(bootstrap)
    failed = 0
    start = time.perf_counter()
    for first in range(0, n, batch):
        names = range(first, min(n, first + batch))
        failed += create(admin, [NewTopic(f"{prefix}-{i}", partitions, 1) for i in names])
    return {"topics_per_s": n / (time.perf_counter() - start), "failed": failed}


def pipelined(bootstrap: str, prefix: str, n: int, partitions: int) -> dict[str, Any]:
    """One request per topic from one AdminClient, all sent before the first answer is awaited."""
    admin = admin_of(bootstrap)
    create(admin, [NewTopic(f"{prefix}-warmup", partitions, 1)])
    start = time.perf_counter()
    futures = []
    for i in range(n):
        topic = NewTopic(f"{prefix}-{i}", partitions, 1)
        futures += admin.create_topics([topic], request_timeout=60).values()
    failed = 0
    for f in futures:
        try:
            f.result()
        except Exception as exc:
            failed += 1
            print(f"  {exc}", file=sys.stderr)
    return {"topics_per_s": n / (time.perf_counter() - start), "failed": failed}


def concurrent(
    bootstrap: str, prefix: str, n: int, threads: int, partitions: int
) -> dict[str, Any]:
    """`threads` AdminClients at once, each creating its share one topic per request."""
    admins = [admin_of(bootstrap) for _ in range(threads)]
    for t, admin in enumerate(admins):
        create(admin, [NewTopic(f"{prefix}-warmup-{t}", partitions, 1)])
    latencies: list[list[float]] = [[] for _ in range(threads)]
    failures = [0] * threads
    go = threading.Barrier(threads + 1)

    def worker(t: int) -> None:
        go.wait()
        for i in range(t, n, threads):
            t0 = time.perf_counter()
            failures[t] += create(admins[t], [NewTopic(f"{prefix}-{i}", partitions, 1)])
            latencies[t].append(time.perf_counter() - t0)

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    go.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    every = [x for lat in latencies for x in lat]
    return {
        "topics_per_s": n / elapsed,
        "threads": threads,
        "failed": sum(failures),
        **latency_summary_ms(every),
    }


def cpu_s(pid: int) -> float:
    """CPU time (user + system) a process has used, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_cpu(case: Any, n: int, controller: int, others: list[int], *args: Any) -> dict[str, Any]:
    """`case(*args)`, with the CPU ms per topic of the controller and of the other nodes."""
    before = {pid: cpu_s(pid) for pid in (controller, *others)}
    result: dict[str, Any] = case(*args)
    used = {pid: cpu_s(pid) - t for pid, t in before.items()}
    result["controller_cpu_ms"] = 1000 * used[controller] / n
    result["others_cpu_ms"] = 1000 * sum(used[p] for p in others) / n
    return result


def all_cases(
    bootstrap: str, prefix: str, args: argparse.Namespace, controller: int, others: list[int]
) -> dict[str, Any]:
    p = args.partitions
    pids = (controller, others)
    return {
        "single": with_cpu(
            one_per_request, args.single, *pids, bootstrap, f"{prefix}s", args.single, p
        ),
        "batched": with_cpu(
            batched, args.batched, *pids, bootstrap, f"{prefix}b", args.batched, args.batch, p
        ),
        "pipelined": with_cpu(
            pipelined, args.single, *pids, bootstrap, f"{prefix}p", args.single, p
        ),
        "concurrent": with_cpu(
            concurrent,
            args.concurrent,
            *pids,
            bootstrap,
            f"{prefix}c",
            args.concurrent,
            args.threads,
            p,
        ),
    }


def run_tree(tree: Tree, args: argparse.Namespace, report: Report) -> None:
    with tempfile.TemporaryDirectory(prefix="gregor-cmbench-", dir=args.dir) as tmp:
        if not args.three_only:
            os.makedirs(os.path.join(tmp, "one"))
            broker = start_broker(tree, os.path.join(tmp, "one"))
            try:
                report.add(
                    "1 node", tree, all_cases(broker.bootstrap, "n", args, broker_pid(broker), [])
                )
            finally:
                broker.stop()
        cluster = start_cluster(tree, 3, os.path.join(tmp, "three"))
        try:
            ctrl = cluster.active_controller()
            other = next(i for i in cluster.ids if i != ctrl)
            if args.existing:  # the cost per topic must not grow with the topics already there
                batched(cluster.bootstrap_of(ctrl), "e", args.existing, args.batch, args.partitions)
            pids = (
                broker_pid(cluster.nodes[ctrl]),
                [broker_pid(cluster.nodes[i]) for i in cluster.ids if i != ctrl],
            )
            report.add(
                "via controller", tree, all_cases(cluster.bootstrap_of(ctrl), "c", args, *pids)
            )
            if not args.three_only:
                forwarded = all_cases(cluster.bootstrap_of(other), "f", args, *pids)
                report.add("other bootstrap", tree, forwarded)
        finally:
            cluster.stop()


def figures(args: argparse.Namespace) -> list[Figure]:
    out = []
    for case, label in (
        ("1 node", "1 node"),
        ("via controller", "3 nodes, via the controller"),
        ("other bootstrap", "3 nodes, bootstrapped at another node"),
    ):
        out += [
            Figure(case, "single.topics_per_s", f"{label}: one per request, topics/s"),
            Figure(case, "single.p50_ms", f"{label}: one per request, p50 ms"),
            Figure(case, "single.p99_ms", f"{label}: one per request, p99 ms"),
            Figure(case, "batched.topics_per_s", f"{label}: {args.batch} per request, topics/s"),
            Figure(
                case, "pipelined.topics_per_s", f"{label}: one per request, pipelined, topics/s"
            ),
            Figure(
                case,
                "concurrent.topics_per_s",
                f"{label}: {args.threads} clients at once, one per request, topics/s",
            ),
            Figure(case, "concurrent.p50_ms", f"{label}: {args.threads} clients at once, p50 ms"),
            Figure(case, "concurrent.p99_ms", f"{label}: {args.threads} clients at once, p99 ms"),
        ]
        for path, how in (
            ("single", "one per request"),
            ("batched", f"{args.batch} per request"),
            ("pipelined", "one per request, pipelined"),
            ("concurrent", f"{args.threads} clients at once"),
        ):
            out.append(
                Figure(
                    case, f"{path}.controller_cpu_ms", f"{label}: {how}, CPU ms/topic, controller"
                )
            )
            if case != "1 node":
                out.append(
                    Figure(case, f"{path}.others_cpu_ms", f"{label}: {how}, CPU ms/topic, others")
                )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(ap)
    ap.add_argument("--single", type=int, help="topics created one per request (300)")
    ap.add_argument("--batched", type=int, help="topics created in batches (1,000)")
    ap.add_argument("--batch", type=int, default=50, help="topics per batched request")
    ap.add_argument("--concurrent", type=int, help="topics created by the clients at once (800)")
    ap.add_argument("--threads", type=int, default=8, help="clients creating at once")
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument(
        "--existing",
        type=int,
        default=0,
        help="topics created on the 3-node cluster (--batch per request) before its cases",
    )
    ap.add_argument(
        "--three-only",
        action="store_true",
        help="only the 3-node cluster via its active controller (no 1-node, no other bootstrap)",
    )
    args = ap.parse_args()
    small = args.quick
    args.single = args.single or (30 if small else 300)
    args.batched = args.batched or (100 if small else 1000)
    args.concurrent = args.concurrent or (80 if small else 800)
    trees = trees_of(args)
    report = Report("cluster-metadata", args, trees)
    for run in range(runs_of(args)):
        for tree in trees if run % 2 == 0 else trees[::-1]:
            say(f"run {run + 1}: {tree.label}")
            run_tree(tree, args, report)
    goals = []
    for case, what in (
        ("via controller", "3 nodes"),
        ("other bootstrap", "3 nodes, other bootstrap"),
    ):
        for path, how in (
            ("single.topics_per_s", "one per request"),
            ("batched.topics_per_s", f"{args.batch} per request"),
            ("pipelined.topics_per_s", "one per request, pipelined"),
            ("concurrent.topics_per_s", f"{args.threads} clients at once"),
        ):
            goals += report.value_goal(
                f"{what}, {how}: >= {GOAL} topics/s", case, path, GOAL, above=True
            )
    report.write(
        "Topic creations on one node and on three (bench/cluster_metadata_bench.py)",
        __doc__.split("\n\n")[2] if __doc__ else "",
        figures(args),
        goals,
    )


if __name__ == "__main__":
    main()
