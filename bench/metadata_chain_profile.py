#!/usr/bin/env python
"""Where each node of a 3-node cluster spends its Python on a topic creation: cProfile in
every node, switched on for the creations only. The attribution behind
`metadata_chain_bench.py`'s instruction counts (which callgrind cannot give by Python
function).

    python bench/metadata_chain_profile.py --out /tmp/prof            # 300 topics, 1 partition
    python bench/metadata_chain_profile.py --out /tmp/prof --internal --sort tottime

A `LocalCluster` of three nodes (every node broker and controller) from `--tree` (default this
checkout) starts, each node's Python under a small boot script that runs `gregor serve` with
cProfile switched on by SIGUSR1 and off (and dumped) by SIGUSR2. Once the quorum has a leader
and every broker is registered, 30 topics are created to warm up; with `--internal`
`__consumer_offsets` and `__transaction_state` are made; then profiling is switched on in all
three, `--topics` topics are created one per request on the active controller, and switched
off. The stats of each node are written to `--out` as `controller.prof`, `follower-N.prof`,
and the top of each printed, per creation. cProfile's own cost inflates functions that make
many calls: read the calls and the shape, and count instructions with metadata_chain_bench.py.
"""

from __future__ import annotations

import argparse
import os
import pstats
import signal
import sys
import tempfile
import time

from cluster_metadata_bench import one_per_request
from metadata_chain_bench import WARM_UP, _internal_topics
from scale_common import LocalCluster, Tree, broker_pid, spawning_from

_BOOT = """\
import cProfile, os, runpy, signal, sys
_prof = cProfile.Profile()
_out = {out!r}
def _on(sig, frame):
    _prof.enable()
def _off(sig, frame):
    _prof.disable()
    _prof.dump_stats(os.path.join(_out, "node.%d.prof" % os.getpid()))
signal.signal(signal.SIGUSR1, _on)
signal.signal(signal.SIGUSR2, _off)
assert sys.argv[1:3] == ["-m", "gregor"], sys.argv
sys.argv = ["gregor", *sys.argv[3:]]
runpy.run_module("gregor", run_name="__main__", alter_sys=True)
"""


def _launcher(tmp: str, out: str) -> str:
    boot = os.path.join(tmp, "boot.py")
    with open(boot, "w") as f:
        f.write(_BOOT.format(out=out))
    path = os.path.join(tmp, "python-cprofile")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" "{boot}" "$@"\n')
    os.chmod(path, 0o755)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--out", required=True, help="where the .prof files go")
    ap.add_argument("--topics", type=int, default=300)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--internal", action="store_true")
    ap.add_argument("--sort", default="tottime", help="pstats sort key of the printed tops")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument(
        "--idle", type=float, default=0.0, help="profile this many seconds of nothing asked instead"
    )
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gregor-chain-prof-") as tmp:
        cluster = LocalCluster(3, base_dir=os.path.join(tmp, "nodes"), log_level="WARNING")
        real, sys.executable = sys.executable, _launcher(tmp, args.out)
        try:
            with spawning_from(Tree("profiled", os.path.abspath(args.tree))):
                cluster.start()
        finally:
            sys.executable = real
        try:
            ctrl = cluster.active_controller(120)
            cluster.wait_for_brokers(120)
            pids = {i: broker_pid(cluster.nodes[i]) for i in cluster.ids}
            bootstrap = cluster.bootstrap_of(ctrl)
            one_per_request(bootstrap, "warm", WARM_UP, args.partitions)
            if args.internal:
                _internal_topics(bootstrap)
            for pid in pids.values():
                os.kill(pid, signal.SIGUSR1)
            time.sleep(0.2)
            if args.idle:
                time.sleep(args.idle)
                result = {"failed": 0}
            else:
                result = one_per_request(bootstrap, "p", args.topics, args.partitions)
            for pid in pids.values():
                os.kill(pid, signal.SIGUSR2)
            time.sleep(1.0)
        finally:
            cluster.stop()
    print(f"{args.topics} creations, {result['failed']} failed")
    for node, pid in pids.items():
        name = "controller" if node == ctrl else f"follower-{node}"
        src = os.path.join(args.out, f"node.{pid}.prof")
        dst = os.path.join(args.out, f"{name}.prof")
        os.replace(src, dst)
        print(f"\n==== {name} (node {node}): {dst}")
        pstats.Stats(dst).sort_stats(args.sort).print_stats(args.top)


if __name__ == "__main__":
    main()
