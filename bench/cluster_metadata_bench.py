#!/usr/bin/env python
"""Topic creations per second on one node and on a three-node cluster, side by side in one run,
through confluent-kafka's AdminClient as a user's program would send them.

    python bench/cluster_metadata_bench.py                 # 300 one per request, 1,000 in batches of 50
    python bench/cluster_metadata_bench.py --single 100 --batched 500

Cases:
1. one node (`gregor serve`, a one-voter quorum): one topic per CreateTopics, then batches;
2. three nodes (`LocalCluster`), the AdminClient bootstrapped on the active controller only:
   every creation is a Raft commit replicated to a majority (two fsyncs on two processes);
3. three nodes, the AdminClient bootstrapped on a node that is not the controller: each request
   is forwarded in an Envelope (KIP-590) and its answer forwarded back.
Prints topics/s and the p50 / p99 latency of one-per-request creations. Figures only.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from metadata_bench import batched, create_all, one_per_request  # noqa: E402

from gregor.testing.cluster import LocalCluster  # noqa: E402


def wait_brokers(admin: AdminClient, n: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(admin.list_topics(timeout=10).brokers) >= n:
            return
        time.sleep(0.2)
    raise SystemExit(f"fewer than {n} brokers registered within 60 s")


def cluster_single(
    cluster: LocalCluster, node: int, prefix: str, n: int, partitions: int
) -> dict[str, float]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_of(node)})
    create_all(admin, [NewTopic(f"{prefix}-warmup", partitions, 1)])
    latencies = []
    start = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        create_all(admin, [NewTopic(f"{prefix}-{i}", partitions, 1)])
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100)
    return {"topics_per_s": n / elapsed, "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000}


def cluster_batched(
    cluster: LocalCluster, node: int, prefix: str, n: int, batch: int, partitions: int
) -> float:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_of(node)})
    start = time.perf_counter()
    for first in range(0, n, batch):
        create_all(
            admin,
            [NewTopic(f"{prefix}-{i}", partitions, 1) for i in range(first, min(n, first + batch))],
        )
    return n / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--single", type=int, default=300, help="topics created one per request")
    ap.add_argument("--batched", type=int, default=1000, help="topics created in batches")
    ap.add_argument("--batch", type=int, default=50, help="topics per batched request")
    ap.add_argument("--partitions", type=int, default=1)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    rows = []
    s = one_per_request(args.single, args.partitions)
    b = batched(args.batched, args.batch, args.partitions)
    rows.append(("1 node", s["topics_per_s"], s["p50_ms"], s["p99_ms"], b["topics_per_s"]))
    with LocalCluster(3, log_level="WARNING") as cluster:
        ctrl = cluster.active_controller()
        other = next(i for i in cluster.ids if i != ctrl)
        wait_brokers(AdminClient({"bootstrap.servers": cluster.bootstrap}), 3)
        for label, node, prefix in (
            ("3 nodes, via the controller", ctrl, "c"),
            ("3 nodes, via another node (forwarded)", other, "f"),
        ):
            s3 = cluster_single(cluster, node, f"{prefix}s", args.single, args.partitions)
            b3 = cluster_batched(
                cluster, node, f"{prefix}b", args.batched, args.batch, args.partitions
            )
            rows.append((label, s3["topics_per_s"], s3["p50_ms"], s3["p99_ms"], b3))
    print()
    print(
        f"| case | one per request (topics/s) | p50 ms | p99 ms | {args.batch} per request (topics/s) |"
    )
    print("|---|---|---|---|---|")
    for label, single, p50, p99, batch_rate in rows:
        print(f"| {label} | {single:.0f} | {p50:.1f} | {p99:.1f} | {batch_rate:.0f} |")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
