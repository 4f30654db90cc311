#!/usr/bin/env python
"""Topic creations per second on one `gregor serve` (a one-voter KRaft quorum), through
CreateTopics from confluent-kafka's AdminClient, as a user's program would send them.

    python bench/metadata_bench.py                     # 500 topics one per request, 1,000 in batches of 50
    python bench/metadata_bench.py --single 200 --batched 2000 --batch 50 --partitions 3

Cases, each on a fresh broker in a temp dir:
1. one topic per CreateTopics request, each awaited before the next (the latency-bound case:
   every request is one Raft commit, one fsync of `__cluster_metadata-0`);
2. `--batch` topics per request (one commit for all of them).
Then the broker with everything from case 2 is restarted: the time to ready is the metadata log's
replay (no snapshots yet) plus opening the partitions.

Prints topics/s, the request latency (p50 / p99 of case 1), the metadata log's size and the
restart time. Figures only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from gregor import Broker  # noqa: E402


def create_all(admin: AdminClient, topics: list[NewTopic]) -> None:
    for name, f in admin.create_topics(topics, request_timeout=60).items():
        try:
            f.result()
        except Exception as exc:  # report and go on: a bench, not a test
            print(f"  {name}: {exc}", file=sys.stderr)


def metadata_log_bytes(data_dir: str) -> int:
    d = os.path.join(data_dir, "logs", "__cluster_metadata-0")
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if n.endswith(".log"))


def one_per_request(n: int, partitions: int) -> dict[str, float]:
    with (
        tempfile.TemporaryDirectory(prefix="gregor-mdbench-") as tmp,
        Broker(data_dir=tmp) as broker,
    ):
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        create_all(admin, [NewTopic("warmup", partitions, 1)])
        latencies = []
        start = time.perf_counter()
        for i in range(n):
            t0 = time.perf_counter()
            create_all(admin, [NewTopic(f"single-{i}", partitions, 1)])
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
        q = statistics.quantiles(latencies, n=100)
        return {
            "topics": n,
            "seconds": elapsed,
            "topics_per_s": n / elapsed,
            "p50_ms": q[49] * 1000,
            "p99_ms": q[98] * 1000,
        }


def batched(n: int, batch: int, partitions: int) -> dict[str, float]:
    with (
        tempfile.TemporaryDirectory(prefix="gregor-mdbench-") as tmp,
        Broker(data_dir=tmp) as broker,
    ):
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        create_all(admin, [NewTopic("warmup", partitions, 1)])
        start = time.perf_counter()
        for first in range(0, n, batch):
            create_all(
                admin,
                [
                    NewTopic(f"batched-{i}", partitions, 1)
                    for i in range(first, min(n, first + batch))
                ],
            )
        elapsed = time.perf_counter() - start
        broker.stop()
        log_bytes = metadata_log_bytes(tmp)
        t0 = time.perf_counter()
        broker.start()
        restart_s = time.perf_counter() - t0
        listed = len(
            AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=60).topics
        )
        return {
            "topics": n,
            "batch": batch,
            "seconds": elapsed,
            "topics_per_s": n / elapsed,
            "metadata_log_bytes": log_bytes,
            "restart_s": restart_s,
            "topics_after_restart": listed,
        }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--single", type=int, default=500, help="topics created one per request")
    ap.add_argument("--batched", type=int, default=1000, help="topics created in batches")
    ap.add_argument("--batch", type=int, default=50, help="topics per batched request")
    ap.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    s = one_per_request(args.single, args.partitions)
    print(
        f"one topic per CreateTopics: {s['topics']:.0f} topics in {s['seconds']:.2f} s = "
        f"{s['topics_per_s']:.0f} topics/s (latency p50 {s['p50_ms']:.1f} ms, p99 {s['p99_ms']:.1f} ms)"
    )
    b = batched(args.batched, args.batch, args.partitions)
    print(
        f"{b['batch']:.0f} topics per CreateTopics: {b['topics']:.0f} topics in {b['seconds']:.2f} s = "
        f"{b['topics_per_s']:.0f} topics/s"
    )
    print(
        f"metadata log after {b['topics']:.0f} topics: {b['metadata_log_bytes'] / 1024:.0f} KiB; "
        f"restart to ready {b['restart_s']:.2f} s, {b['topics_after_restart']:.0f} topics listed"
    )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
