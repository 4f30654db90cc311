"""python -m gregor.sim --seed N [--nodes 3] [--observers 0] [--steps 3000] [--scenario mixed]
python -m gregor.sim --seeds A-B [...]      (every seed in A..B; exit status 1 if any fails)

Scenarios: the Raft quorum alone (cluster.py: mixed, quiet, isolate-leader, crash, slow,
partition) and the data plane (replication.py: replication, replication-quiet), where --nodes
is the number of brokers.

The same seed and options replay the same run, event for event (the trace digest shows it).
On an invariant violation it prints the seed, the invariant, and the last events before it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from gregor.sim import replication
from gregor.sim.cluster import SCENARIOS, SimConfig, run_seed


def _seed_range(text: str) -> range:
    first, sep, last = text.partition("-")
    if not sep:
        return range(int(first), int(first) + 1)
    return range(int(first), int(last) + 1)


def _scenarios_help() -> str:
    lines = ["scenarios (the faults each injects):"]
    for name, sc in sorted(SCENARIOS.items()):
        lines.append(f"  {name:18} Raft quorum: {', '.join(sc.faults) or 'no faults'}")
    for name, data in sorted(replication.SCENARIOS.items()):
        lines.append(f"  {name:18} data plane: {', '.join(data.faults) or 'no faults'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gregor.sim",
        description=__doc__.splitlines()[0],
        epilog=_scenarios_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--seed", type=int, help="run one seed")
    which.add_argument("--seeds", type=_seed_range, help="run seeds A-B")
    parser.add_argument(
        "--nodes", type=int, default=3, help="voters, or brokers for the data plane (default 3)"
    )
    parser.add_argument("--observers", type=int, default=0, help="non-voting replicas (default 0)")
    parser.add_argument(
        "--steps", type=int, help="events in the fault phase (default 3000; data plane 6000)"
    )
    parser.add_argument(
        "--settle-ms", type=int, help="simulated time to settle (default 15000; data plane 12000)"
    )
    parser.add_argument(
        "--scenario", choices=sorted(SCENARIOS) + sorted(replication.SCENARIOS), default="mixed"
    )
    parser.add_argument(
        "--quiet", action="store_true", help="with --seeds: print failures and the total only"
    )
    args = parser.parse_args(argv)
    run: Callable[[int], Any]
    if args.scenario in replication.SCENARIOS:
        data = replication.ReplicationConfig(scenario=args.scenario, brokers=args.nodes)
        data = replace(
            data, steps=args.steps or data.steps, settle_ms=args.settle_ms or data.settle_ms
        )
        run = partial(replication.run_seed, config=data)
    else:
        config = SimConfig(
            nodes=args.nodes,
            observers=args.observers,
            steps=args.steps or 3000,
            settle_ms=args.settle_ms or 15_000,
            scenario=args.scenario,
        )
        run = partial(run_seed, config=config)
    seeds = range(args.seed, args.seed + 1) if args.seed is not None else args.seeds
    failed = []
    started = time.monotonic()
    for seed in seeds:
        result = run(seed)
        if not result.ok:
            failed.append(seed)
        if not result.ok or not args.quiet or args.seed is not None:
            print(result.summary(), flush=True)
        done = seed - seeds.start + 1
        if args.quiet and done % 500 == 0 and done < len(seeds):  # a long soak shows progress
            took = time.monotonic() - started
            print(f"  ... {done} seeds, {len(failed)} failed ({took:.0f} s)", flush=True)
    if args.seeds is not None:
        took = time.monotonic() - started
        print(
            f"{len(seeds)} seeds, {len(failed)} failed{': ' + str(failed) if failed else ''} "
            f"({took:.1f} s, {len(seeds) / max(took, 1e-9):.1f} seeds/s)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
