#!/usr/bin/env python
"""Replication on a 3-node local cluster: produce throughput RF 3 acks=all against RF 1, and the
end-to-end latency with RF 3, source trees side by side.

    python bench/replication_latency_bench.py                            # 3 runs
    python bench/replication_latency_bench.py --tree /tmp/old --tree .   # old main against this tree
    python bench/replication_latency_bench.py --quick

For each tree (alternating, `--runs` times): a fresh `LocalCluster(3)` (every node broker and
controller, gregor.testing.cluster) and two topics of one partition, both led by broker 1:
`rf1` (replicas [1]) and `rf3` (replicas [1, 2, 3], min.insync.replicas=2), made as
bench/replication_bench.py makes them, and the bench waits until rf3's ISR holds all three.

- produce: bench/kclient.py produce, `--records` of 100 B, acks=all, linger.ms=5, batch.size
  16 KiB (as bench/replication_bench.py: many requests, Java's default), one partition, after
  one untimed record (acknowledged by the ISR, so the followers are fetching): records/s, rf1
  then rf3. The ratio rf3/rf1 is the issue's "RF 3 at >= 0.7x RF 1".
- end-to-end latency: kclient.py latency-producer at 1,000 records/s of 100 B, linger.ms=0,
  acks=all, for `--seconds` after 1 s of warm-up, and a latency-consumer (poll(), fetch.wait.max.ms
  100) on the same partition: send to receipt, p50 / p99 / p99.9 / max, on rf1 and rf3 (a
  consumer sees a record once the high watermark passed it: with RF 3 after a follower fetched
  it). Also the producer's acknowledgement p99, the leader's and the other two nodes' CPU per
  record sent in that phase (/proc/PID/stat), the machine's busy CPU per record (/proc/stat:
  the clients and the nodes, on 2 cores at most 2 ms per record at 1,000/s), and how long the
  leader's threads waited for a CPU per second (schedstat: what the machine's load cost it;
  each wait delays whatever record is on its way through it).

Topic creations per second on three nodes are measured by bench/cluster_metadata_bench.py.
Printed and written to bench/results/replication-latency-<date>[-quick].md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # these benches, and this checkout's gregor

from confluent_kafka.admin import AdminClient  # noqa: E402
from replication_bench import create  # noqa: E402
from scale_common import (  # noqa: E402
    Figure,
    Report,
    Tree,
    add_common_args,
    broker_pid,
    kclient,
    proc_cpu_seconds,
    run_json,
    runs_of,
    say,
    start_cluster,
    trees_of,
)

TOPICS = {"rf1": [1], "rf3": [1, 2, 3]}


def wait_isr(bootstrap: str, topic: str, size: int, timeout: float = 60) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        if t and t.error is None and 0 in t.partitions:
            p = t.partitions[0]
            if p.leader >= 0 and len(p.isrs) >= size:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{topic}: ISR not {size} within {timeout} s")


def runqueue_wait_s(pid: int) -> float:
    """Seconds the threads of `pid` spent runnable but waiting for a CPU (schedstat)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def machine_busy_s() -> float:
    """CPU seconds the machine's CPUs have spent on anything but idling, since boot."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def e2e(
    bootstrap: str, topic: str, cfg: argparse.Namespace, leader: int, followers: list[int]
) -> dict[str, Any]:
    """The latency pair on `topic`; with the CPU the leader (pid `leader`) and the other two
    nodes spent per record sent, the machine's busy CPU time per record (the clients and the
    nodes, all of it), and the time the leader waited for a CPU, per second (how loaded the
    machine was)."""
    expect = int(cfg.seconds * 1000)
    cpu0, wait0, t0 = proc_cpu_seconds(leader), runqueue_wait_s(leader), time.monotonic()
    others0, busy0 = sum(proc_cpu_seconds(p) for p in followers), machine_busy_s()
    cons = subprocess.Popen(
        kclient(
            "latency-consumer", bootstrap, topic, "--expect", expect, "--timeout", cfg.seconds + 30
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cons.stdout is not None
    first = cons.stdout.readline().strip()
    if first != "ready":
        cons.kill()
        return {"error": f"latency consumer did not start: {first}"}
    prod = run_json(
        kclient(
            "latency-producer",
            bootstrap,
            topic,
            "--acks",
            "all",
            "--rate",
            1000,
            "--seconds",
            cfg.seconds,
            "--warmup",
            1.0,
        ),  # fmt: skip
        cfg.seconds + 60,
    )
    try:
        rest, err = cons.communicate(timeout=cfg.seconds + 40)
    except subprocess.TimeoutExpired:
        cons.kill()
        rest, err = cons.communicate()
    lines = [ln for ln in rest.splitlines() if ln.startswith("{")]
    out = json.loads(lines[-1]) if lines else {"error": f"no result: {err[-800:]}"}
    out["producer"] = prod
    cpu, wait = proc_cpu_seconds(leader) - cpu0, runqueue_wait_s(leader) - wait0
    others = sum(proc_cpu_seconds(p) for p in followers) - others0
    busy = machine_busy_s() - busy0
    sent = prod.get("sent") or 0
    if sent:
        out["leader_cpu_ms_per_record"] = cpu * 1000 / sent
        out["other_nodes_cpu_ms_per_record"] = others * 1000 / sent
        out["machine_cpu_ms_per_record"] = busy * 1000 / sent
    out["leader_runqueue_wait_ms_per_s"] = wait * 1000 / (time.monotonic() - t0)
    return out


def run_tree(tree: Tree, cfg: argparse.Namespace, base_dir: str) -> dict[str, Any]:
    d = tempfile.mkdtemp(prefix="replication-", dir=base_dir)
    out: dict[str, Any] = {}
    cluster = None
    try:
        cluster = start_cluster(tree, 3, d)
        b = cluster.bootstrap
        for topic, replicas in TOPICS.items():
            create(b, topic, replicas)
            wait_isr(b, topic, len(replicas))
        for topic in TOPICS:
            out[f"produce_{topic}"] = run_json(
                kclient(
                    "produce",
                    b,
                    topic,
                    "--partitions",
                    1,
                    "--size",
                    100,
                    "--acks",
                    "all",
                    "--batch-size",
                    16384,
                    "--count",
                    cfg.records,
                    "--max-seconds",
                    cfg.max_seconds,
                    "--warmup-each",
                ),  # fmt: skip
                cfg.max_seconds + 120,
            )
        for topic in TOPICS:
            pids = [broker_pid(n) for n in cluster.nodes.values()]
            leader = broker_pid(cluster.nodes[1])
            others = [p for p in pids if p != leader]
            out[f"e2e_{topic}"] = e2e(b, topic, cfg, leader, others)
    except Exception as exc:  # one failed run must not lose the others
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(d, ignore_errors=True)
    a, r = (
        out.get("produce_rf1", {}).get("records_per_s"),
        out.get("produce_rf3", {}).get("records_per_s"),
    )
    if a and r:
        out["rf3_over_rf1"] = r / a
    return out


def brief(tree: Tree, r: dict[str, Any]) -> str:
    bits = [f"rf3/rf1 {r.get('rf3_over_rf1') or 0:.2f}"]
    for t in TOPICS:
        bits.append(f"{t} {r.get(f'produce_{t}', {}).get('records_per_s') or 0:,.0f} rec/s")
        e = r.get(f"e2e_{t}", {})
        bits.append(
            f"{t} e2e p50 {e.get('p50_ms') or 0:.2f} p99 {e.get('p99_ms') or 0:.2f} max {e.get('max_ms') or 0:.1f} ms"
        )
    err = r.get("error") or next(
        (v["error"] for v in r.values() if isinstance(v, dict) and "error" in v), None
    )
    return f"{tree.label}: " + ", ".join(bits) + (f"  ERROR {err}" if err else "")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(ap)
    ap.add_argument("--records", type=int, help="records per produce (default 300,000)")
    ap.add_argument("--max-seconds", type=float, default=60.0)
    ap.add_argument("--seconds", type=float, help="measured seconds of latency (default 10)")
    args = ap.parse_args()
    q = args.quick
    args.records = args.records or (100_000 if q else 300_000)
    args.seconds = args.seconds or (2.0 if q else 10.0)
    trees = trees_of(args)
    rep = Report("replication-latency", args, trees)
    base_dir = tempfile.mkdtemp(prefix="replication-bench-", dir=args.dir)
    say(f"replication bench: trees {[t.label for t in trees]}, {runs_of(args)} run(s)")
    try:
        for _ in range(runs_of(args)):
            for tree in trees:
                r = run_tree(tree, args, base_dir)
                rep.add("rf", tree, r)
                say(brief(tree, r))
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)
    figs = [Figure("rf", "produce_rf1.records_per_s", "RF 1 acks=all produce, rec/s", "rec/s")]
    figs += [Figure("rf", "produce_rf3.records_per_s", "RF 3 acks=all produce, rec/s", "rec/s")]
    figs += [Figure("rf", "rf3_over_rf1", "RF 3 / RF 1 (same run)")]
    for t in TOPICS:
        for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms"):
            figs.append(
                Figure("rf", f"e2e_{t}.{k}", f"{t} end-to-end at 1,000/s acks=all, {k[:-3]} ms")
            )
        figs.append(Figure("rf", f"e2e_{t}.producer.ack_p99_ms", f"{t} producer ack p99 ms"))
        figs.append(
            Figure(
                "rf",
                f"e2e_{t}.leader_cpu_ms_per_record",
                f"{t} leader CPU per record at 1,000/s, ms",
            )
        )
        figs.append(
            Figure(
                "rf",
                f"e2e_{t}.other_nodes_cpu_ms_per_record",
                f"{t} the other two nodes' CPU per record, ms",
            )
        )
        figs.append(
            Figure(
                "rf",
                f"e2e_{t}.machine_cpu_ms_per_record",
                f"{t} the machine's busy CPU per record (clients too), ms",
            )
        )
        figs.append(
            Figure(
                "rf",
                f"e2e_{t}.leader_runqueue_wait_ms_per_s",
                f"{t} leader waiting for a CPU, ms per s (machine load)",
            )
        )
    gl = rep.value_goal("RF 3 / RF 1 >= 0.7", "rf", "rf3_over_rf1", 0.7, True)
    gl += rep.value_goal("RF 3 end-to-end p99 <= 5 ms", "rf", "e2e_rf3.p99_ms", 5.0, False)
    rep.write(
        "Replication: RF 3 against RF 1 on 3 nodes (bench/replication_latency_bench.py)",
        __doc__ or "",
        figs,
        gl,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
