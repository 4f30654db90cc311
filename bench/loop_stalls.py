#!/usr/bin/env python
"""Where the event loop stalls: one broker with the stall monitor on (gregor.loop.stall.log.ms),
the end-to-end latency load of bench/broker_bench.py (1,000 msg/s, linger.ms=0,
fetch.wait.max.ms=100, 1 partition) on the fresh broker, then again right after a throughput run
of 1 KiB records into 8 partitions (~600 MB), and the stalls the monitor logged in each phase,
grouped by what held the loop.

    python bench/loop_stalls.py                       # 600 MB, 10 s latency runs, 1 ms
    python bench/loop_stalls.py --mb 100 --seconds 3  # a small check
    python bench/loop_stalls.py --threshold-ms 0.5 --set log.segment.bytes=104857600
    python bench/loop_stalls.py --tree ../main          # the same load on another checkout

Prints JSON: per phase, the client's latency percentiles and the monitor's stall lines (count,
total and worst ms per stack, and the gc pauses). Figures, never asserts.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
KCLIENT = os.path.join(HERE, "kclient.py")

from gregor.testing.broker import Broker  # noqa: E402

HELD = re.compile(
    r"event loop held ([\d.]+) ms(?: \((?:GIL held ([\d.]+) ms, then )?loop thread: ([\d.]+) ms "
    r"on a cpu, ([\d.]+) ms runnable, ([\d.]+) ms asleep\))?: (.*)$"
)
GC = re.compile(r"gc of generation (\d) took ([\d.]+) ms")


def run_json(cmd: list[str], timeout: float) -> dict[str, Any]:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": out.stderr[-2000:]}


def kclient(broker: Broker, *args: str, timeout: float = 600) -> dict[str, Any]:
    return run_json([sys.executable, KCLIENT, *args, "--bootstrap", broker.bootstrap], timeout)


def latency(
    broker: Broker, topic: str, seconds: float, py_spy: str | None = None
) -> dict[str, Any]:
    kclient(broker, "create", "--topic", topic, "--partitions", "1")
    common = ["--bootstrap", broker.bootstrap, "--topic", topic]
    expect = str(int(seconds * 1000))
    cons = subprocess.Popen(
        [sys.executable, KCLIENT, "latency-consumer", *common, "--expect", expect,
         "--timeout", str(seconds + 30)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert cons.stdout is not None
    if cons.stdout.readline().strip() != "ready":
        cons.kill()
        return {"error": "latency consumer did not start"}
    spy = None
    if py_spy and broker.process is not None:  # every thread of the broker, while it runs
        spy = subprocess.Popen(
            ["py-spy", "record", "--pid", str(broker.process.pid), "--rate", "1000",
             "--nonblocking", "--threads", "--idle", "--format", "raw", "--output",
             f"{py_spy}/{topic}.txt", "--duration", str(int(seconds + 2))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    prod = run_json(
        [sys.executable, KCLIENT, "latency-producer", *common, "--rate", "1000",
         "--seconds", str(seconds), "--warmup", "1"],
        seconds + 60,
    )  # fmt: skip
    rest, _ = cons.communicate(timeout=seconds + 40)
    if spy is not None:
        spy.wait(30)
    lines = [ln for ln in rest.splitlines() if ln.startswith("{")]
    out: dict[str, Any] = json.loads(lines[-1]) if lines else {"error": "no consumer result"}
    out["late_sends"] = prod.get("late_sends")
    return out


def stalls(log_text: str) -> dict[str, Any]:
    by_stack: dict[str, list[float]] = collections.defaultdict(list)
    gcs: dict[str, list[float]] = collections.defaultdict(list)
    split: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in log_text.splitlines():
        if m := HELD.search(line):
            top = m[6].split("; ")[0].split("x ", 1)[-1]
            by_stack[top].append(float(m[1]))
            for k, v in zip(
                ("gil", "on_cpu", "runnable", "asleep"), m.group(2, 3, 4, 5), strict=True
            ):
                split[top][k] += float(v or 0)
        elif m := GC.search(line):
            gcs[f"gen{m[1]}"].append(float(m[2]))
    rows = sorted(by_stack.items(), key=lambda kv: -sum(kv[1]))
    return {
        "stalls": sum(len(v) for v in by_stack.values()),
        "worst_ms": max((max(v) for v in by_stack.values()), default=0.0),
        "by_stack": [
            {
                "n": len(v),
                "total_ms": round(sum(v), 1),
                "worst_ms": max(v),
                **{f"{w}_ms": round(t, 1) for w, t in split[k].items()},
                "stack": k,
            }
            for k, v in rows[:15]
        ],
        "gc": {k: {"n": len(v), "worst_ms": max(v)} for k, v in gcs.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=int, default=600, help="MB of 1 KiB records before phase 2")
    ap.add_argument("--seconds", type=float, default=10.0, help="each latency run")
    ap.add_argument("--threshold-ms", type=float, default=1.0)
    ap.add_argument("--dir", default=None, help="where the broker's data goes")
    ap.add_argument("--set", action="append", default=[], help="extra broker config k=v")
    ap.add_argument("--py-spy", metavar="DIR", help="py-spy raw profiles of each latency run")
    ap.add_argument("--tree", help="run the broker from this checkout (another branch, main)")
    args = ap.parse_args()
    if args.tree:  # the broker process imports gregor from there (a tree without the monitor
        # warns of the unknown key and gives client figures only)
        os.environ["PYTHONPATH"] = os.path.abspath(args.tree)
        if args.dir:
            args.dir = os.path.abspath(args.dir)
        os.chdir(args.tree)  # `python -m gregor` imports from the working directory first
    config = dict(kv.split("=", 1) for kv in args.set)
    config["gregor.loop.stall.log.ms"] = str(args.threshold_ms)
    data = tempfile.mkdtemp(prefix="gregor-stalls-", dir=args.dir)
    broker = Broker(config, data_dir=data, log_level="INFO").start()
    print(f"broker pid {broker.process.pid if broker.process else '?'}, data {data}",
          file=sys.stderr, flush=True)  # fmt: skip
    report: dict[str, Any] = {}
    try:
        mark = len(broker.read_log())
        report["fresh"] = {"latency": latency(broker, "latency-fresh", args.seconds, args.py_spy)}
        report["fresh"].update(stalls(broker.read_log()[mark:]))
        kclient(broker, "create", "--topic", "bulk", "--partitions", "8")
        mark = len(broker.read_log())
        report["bulk"] = kclient(
            broker, "produce", "--topic", "bulk", "--partitions", "8", "--size", "1024",
            "--count", str(args.mb * 1000), "--max-seconds", "300",
        )  # fmt: skip
        report["bulk"].update(stalls(broker.read_log()[mark:]))
        mark = len(broker.read_log())
        report["after_bulk"] = {
            "latency": latency(broker, "latency-after", args.seconds, args.py_spy)
        }
        report["after_bulk"].update(stalls(broker.read_log()[mark:]))
    finally:
        broker.stop()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
