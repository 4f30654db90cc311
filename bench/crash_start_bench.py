#!/usr/bin/env python
"""Start after a crash, source trees side by side, from one crashed data dir.

    python bench/crash_start_bench.py --make /tmp/crashed --partitions 10000   # once
    python bench/crash_start_bench.py --state /tmp/crashed --partitions 10000 \\
        --tree /tmp/old --tree . --runs 3

`--make DIR`: a fresh `gregor serve` (this checkout, or the first `--tree`) gets one topic of
`--partitions` partitions, a record to every partition then 50,000 more (bench/kclient.py, as
partitions_bench.py's produce), a clean stop, a start, 3 s of produce over all partitions, and
a SIGKILL under it (partitions_bench.py's "restart after SIGKILL"); its data dir is then copied
to DIR (and the data dir after the clean stop to DIR-clean).

`--state DIR`: for each run, each tree in turn gets a fresh copy of DIR (`cp -a`, then `sync`,
not timed) and starts on it: ready_s until its ready file appeared, led_s until a Metadata
request names every partition with a leader (as partitions_bench.py times a restart), and the
broker's CPU time (user + system, all threads) by then, which other load on the machine changes
much less than the wall clock. Every tree starts from the same bytes. Medians printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

import partitions_bench as pb  # noqa: E402
from scale_common import Tree, restart_broker, spawning_from, start_broker  # noqa: E402

from gregor.testing.broker import Broker  # noqa: E402


def make_state(tree: Tree, target: str, partitions: int) -> None:
    case = str(partitions)
    work = tempfile.mkdtemp(prefix="crash-make-")
    broker = start_broker(tree, work)
    try:
        pb.create(broker.bootstrap, case)
        pb.wait_leaders(broker.bootstrap, partitions)
        pb.run_json(
            pb.produce_cmd(
                broker.bootstrap,
                case,
                ["--count", 50000, "--max-seconds", 60, "--warmup-each"],
            ),
            timeout=900,
        )
        assert broker.process is not None
        broker.process.send_signal(signal.SIGTERM)
        broker.process.wait(600)
        broker.process = None
        shutil.copytree(os.path.join(work, "logs"), target + "-clean", symlinks=True)
        restart_broker(tree, broker)
        pb.wait_leaders(broker.bootstrap, partitions)
        pb.kill_mid_produce(broker, case, argparse.Namespace(kill_after=3.0))
        shutil.copytree(os.path.join(work, "logs"), target, symlinks=True)
    finally:
        broker.stop(600)
        shutil.rmtree(work, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, all its threads (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_start(tree: Tree, state: str, partitions: int) -> tuple[float, float, float]:
    work = tempfile.mkdtemp(prefix="crash-start-")
    try:
        subprocess.run(["cp", "-a", state, os.path.join(work, "logs")], check=True)
        subprocess.run(["sync"], check=True)
        broker = Broker(data_dir=work, start_timeout_s=600)
        t0 = time.perf_counter()
        with spawning_from(tree):
            broker.start()
        ready = time.perf_counter() - t0
        pb.wait_leaders(broker.bootstrap, partitions)
        led = time.perf_counter() - t0
        assert broker.process is not None
        cpu = cpu_seconds(broker.process.pid)
        broker.stop(600)
        return ready, led, cpu
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--make", help="write a crashed data dir here")
    ap.add_argument("--state", help="start each tree on a copy of this data dir")
    ap.add_argument("--partitions", type=int, default=10000)
    ap.add_argument("--tree", action="append", default=[], help="a source tree (repeat)")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    trees = [Tree(os.path.basename(os.path.abspath(t)), os.path.abspath(t)) for t in args.tree]
    trees = trees or [Tree("this", os.path.dirname(HERE))]
    if args.make:
        make_state(trees[0], os.path.abspath(args.make), args.partitions)
    if not args.state:
        return 0
    print(f"load at start: {os.getloadavg()}", flush=True)
    figures: dict[str, list[tuple[float, float, float]]] = {t.path: [] for t in trees}
    for run in range(args.runs):
        for tree in trees:
            ready, led, cpu = timed_start(tree, args.state, args.partitions)
            figures[tree.path].append((ready, led, cpu))
            print(
                f"run {run + 1} {tree.path}: ready {ready:.2f} s, led {led:.2f} s, "
                f"broker CPU {cpu:.2f} s",
                flush=True,
            )
    print(f"load at end: {os.getloadavg()}")
    for path, runs in figures.items():
        ready, led, cpu = (statistics.median(r[i] for r in runs) for i in range(3))
        print(
            f"{path}: median ready {ready:.2f} s, led {led:.2f} s, broker CPU {cpu:.2f} s "
            f"over {len(runs)} runs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
