"""How many Fetch requests the RF 3 leader answers per second at 1,000 records/s, and its CPU
per record, per source tree (a diagnostic beside bench/replication_latency_bench.py: a leader
whose followers turn around faster answers more, smaller Fetches for the same records).

    python bench/replication_fetch_count.py --tree /tmp/base --tree . [--runs 2] [--seconds 8]

Each run: a fresh 3-node cluster with metrics listeners, topic rf3 (replicas 1, 2, 3), the
latency pair of replication_latency_bench.py for `--seconds`; the leader's
kafka_network_requestmetrics_requests_total{request="Fetch"} before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from replication_bench import create  # noqa: E402
from replication_latency_bench import e2e, wait_isr  # noqa: E402
from scale_common import Tree, broker_pid, start_cluster  # noqa: E402


def fetches(url: str) -> float:
    n = 0.0
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("kafka_network_requestmetrics_requests_total") and (
                'request="Fetch"' in line
            ):
                n += float(line.split()[-1])
    return n


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", action="append", default=[])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    trees = [Tree(os.path.basename(p.rstrip("/")) or p, p) for p in args.tree or ["."]]
    for _ in range(args.runs):
        for tree in trees:
            d = tempfile.mkdtemp(prefix="fetch-count-")
            c = start_cluster(tree, 3, d, {"metrics.listener": "http://127.0.0.1:0"})
            try:
                create(c.bootstrap, "rf3", [1, 2, 3])
                wait_isr(c.bootstrap, "rf3", 3)
                url = c.nodes[1].metrics_url
                assert url is not None
                before = fetches(url)
                r = e2e(
                    c.bootstrap,
                    "rf3",
                    argparse.Namespace(seconds=args.seconds),
                    broker_pid(c.nodes[1]),
                    [broker_pid(c.nodes[n]) for n in (2, 3)],
                )
                sent = (r.get("producer") or {}).get("sent") or 1
                per_record = (fetches(url) - before) / sent
                cpu = r.get("leader_cpu_ms_per_record", 0.0)
                print(
                    f"{tree.label}: leader Fetches per record {per_record:.2f}, CPU per record {cpu:.3f} ms, "
                    f"CPU per Fetch {cpu / per_record * 1000:.0f} us (all its work / its Fetches), "
                    f"e2e p50 {r.get('p50_ms', 0):.2f} p99 {r.get('p99_ms', 0):.2f} ms",
                    flush=True,
                )
            finally:
                c.stop()
                shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
