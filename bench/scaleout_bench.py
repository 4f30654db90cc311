#!/usr/bin/env python
"""Scale-out on one machine: 1 node against 2 nodes (one per core), aggregate produce and
consume, source trees side by side.

    python bench/scaleout_bench.py                            # 1 and 2 nodes, 100 B and 1 KiB
    python bench/scaleout_bench.py --nodes 1,2,3 --producers 3
    python bench/scaleout_bench.py --tree /tmp/old --tree .   # old main against this tree
    python bench/scaleout_bench.py --quick

A Python process runs on one core, so a machine's cores are used by running one node per core.
For each layout (`--nodes`, default 1,2) and tree (alternating, `--runs` times): a fresh
`LocalCluster` (gregor.testing.cluster; every node broker and controller, data under `--dir`),
and for each record size (100 B, 1 KiB) one topic of 8 partitions, replication factor 1, spread
evenly over the nodes (partition i on node i mod n + 1, by replica assignment). Then:

- produce: `--producers` (2) bench/kclient.py produce processes at once (acks=1, linger.ms=5,
  round-robin over the 8 partitions, after one untimed warm-up record to each partition so
  that the client is connected to every node, `--start-at` a common wall-clock start): all their records
  over the span from the first start to the last flush;
- consume: as many kclient.py consume processes at once, each assigned an equal share of the
  partitions (no group), reading everything produced: records over the span likewise.
Also each node's CPU seconds over each phase (utime+stime from /proc) and the clients'.

The clients run on the same 2 cores as the nodes: the figures compare layouts, they are not
the nodes' ceiling. Printed and written to bench/results/scaleout-<date>[-quick].md and .json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # these benches, and this checkout's gregor

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from scale_common import (  # noqa: E402
    Figure,
    Report,
    Tree,
    add_common_args,
    aggregate_rate,
    kclient,
    proc_cpu_seconds,
    run_parallel,
    runs_of,
    say,
    start_cluster,
    trees_of,
)

from gregor.testing.cluster import LocalCluster  # noqa: E402

PARTITIONS = 8
SIZES = (100, 1024)


def create_spread(cluster: LocalCluster, topic: str) -> None:
    ids = cluster.broker_ids
    spec = NewTopic(
        topic, PARTITIONS, replica_assignment=[[ids[i % len(ids)]] for i in range(PARTITIONS)]
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([spec], operation_timeout=60, request_timeout=60)[topic].result(90)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        if t and t.error is None and len(t.partitions) == PARTITIONS:
            if all(p.leader >= 0 for p in t.partitions.values()):
                return
        time.sleep(0.1)
    raise RuntimeError(f"{topic}: not every partition led within 60 s")


def node_cpu(cluster: LocalCluster) -> dict[int, float]:
    out = {}
    for i, node in cluster.nodes.items():
        if node.process is not None:
            out[i] = proc_cpu_seconds(node.process.pid)
    return out


def phase(cluster: LocalCluster, cmds: list[list[str]], timeout: float) -> dict[str, Any]:
    c0 = node_cpu(cluster)
    out = aggregate_rate(run_parallel(cmds, timeout))
    c1 = node_cpu(cluster)
    out["node_cpu_s"] = {str(i): c1[i] - c0[i] for i in c0 if i in c1}
    return out


def shares(n: int) -> list[str]:
    """Partition lists for n consumers, as even as can be."""
    return [",".join(str(p) for p in range(PARTITIONS) if p % n == k) for k in range(n)]


def count_of(per_part: float, part: str, producers: int) -> int:
    """Records to read from these partitions: a producer cut short by --max-seconds may leave
    one partition a record short, so allow one per producer."""
    return max(1, int(per_part * len(part.split(","))) - producers)


def run_size(cluster: LocalCluster, size: int, cfg: argparse.Namespace) -> dict[str, Any]:
    topic = f"s{size}"
    create_spread(cluster, topic)
    count = cfg.records[size]
    b = cluster.bootstrap
    start = time.time() + cfg.start_delay
    prod = phase(
        cluster,
        [
            kclient(
                "produce",
                b,
                topic,
                "--partitions",
                PARTITIONS,
                "--size",
                size,
                "--count",
                count,
                "--max-seconds",
                cfg.max_seconds,
                "--start-at",
                start,
                "--warmup-each",
            )  # fmt: skip
            for _ in range(cfg.producers)
        ],
        cfg.max_seconds + 300,
    )
    out: dict[str, Any] = {"produce": prod}
    if "error" in prod or not prod.get("records"):
        return out
    # Round-robin by partition number: every partition holds records / 8 (the producers'
    # counts are multiples of 8 unless --max-seconds cut them short), and a warm-up record
    # from each producer.
    per_part = prod["records"] / PARTITIONS + cfg.producers
    start = time.time() + cfg.start_delay
    out["consume"] = phase(
        cluster,
        [
            kclient(
                "consume",
                b,
                topic,
                "--partitions",
                PARTITIONS,
                "--size",
                size,
                "--assign",
                part,
                "--count",
                count_of(per_part, part, cfg.producers),
                "--start-at",
                start,
            )  # fmt: skip
            for part in shares(cfg.producers)
        ],
        cfg.max_seconds + 300,
    )
    return out


def run_layout(tree: Tree, nodes: int, cfg: argparse.Namespace, base_dir: str) -> dict[str, Any]:
    d = tempfile.mkdtemp(prefix=f"scaleout-{nodes}-", dir=base_dir)
    out: dict[str, Any] = {"nodes": nodes}
    cluster: LocalCluster | None = None
    try:
        cluster = start_cluster(tree, nodes, d)
        for size in SIZES:
            out[str(size)] = run_size(cluster, size, cfg)
    except Exception as exc:  # one failed layout must not lose the others
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(d, ignore_errors=True)
    return out


def brief(nodes: int, tree: Tree, r: dict[str, Any]) -> str:
    bits = []
    for size in SIZES:
        s = r.get(str(size), {})
        for ph in ("produce", "consume"):
            v = s.get(ph, {}).get("records_per_s")
            bits.append(f"{size} B {ph} {v or 0:,.0f} rec/s")
    errs = [x.get("error") for x in [r, *(r.get(str(z), {}) for z in SIZES)] if x.get("error")]
    return (
        f"{nodes} node(s) {tree.label}: " + ", ".join(bits) + (f"  ERROR {errs[0]}" if errs else "")
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(ap)
    ap.add_argument("--nodes", default="1,2", help="layouts: node counts (default 1,2)")
    ap.add_argument("--producers", type=int, default=2, help="producer (and consumer) processes")
    ap.add_argument(
        "--records-100", type=int, help="records of 100 B per producer (default 1,000,000)"
    )
    ap.add_argument(
        "--records-1k", type=int, help="records of 1 KiB per producer (default 300,000)"
    )
    ap.add_argument("--max-seconds", type=float, default=60.0, help="cap per producer")
    ap.add_argument("--start-delay", type=float, default=5.0, help="clients' common start, s ahead")
    args = ap.parse_args()
    q = args.quick
    args.records = {
        100: args.records_100 or (40_000 if q else 1_000_000),
        1024: args.records_1k or (16_000 if q else 300_000),
    }
    layouts = [int(x) for x in args.nodes.split(",")]
    trees = trees_of(args)
    rep = Report("scaleout", args, trees)
    base_dir = tempfile.mkdtemp(prefix="scaleout-bench-", dir=args.dir)
    say(
        f"scale-out bench: layouts {layouts}, trees {[t.label for t in trees]}, {runs_of(args)} run(s)"
    )
    try:
        for _ in range(runs_of(args)):
            for nodes in layouts:
                for tree in trees:
                    r = run_layout(tree, nodes, args, base_dir)
                    rep.add(f"{nodes}n", tree, r)
                    say(brief(nodes, tree, r))
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)
    figs = [
        Figure(f"{n}n", f"{size}.{ph}.{key}", f"{n} node(s): {ph} {size} B, {what}", unit, ratio)
        for size in SIZES
        for ph in ("produce", "consume")
        for key, what, unit, ratio in (
            ("records_per_s", "rec/s", "rec/s", True),
            ("start_skew_s", "clients' start skew s", "", False),
        )
        for n in layouts
    ]
    gl: list[str] = []
    if 1 in layouts:
        for n in (x for x in layouts if x != 1):
            for size in SIZES:
                for ph in ("produce", "consume"):
                    gl += rep.ratio_goal(
                        f"{ph} {size} B, {n} nodes / 1 node (> 1 means scaling out pays)",
                        (f"{n}n", f"{size}.{ph}.records_per_s"),
                        ("1n", f"{size}.{ph}.records_per_s"),
                        1.0,
                        True,
                    )
    rep.write("Scale-out on one machine (bench/scaleout_bench.py)", __doc__ or "", figs, gl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
