"""The syscalls the hosting worker makes per new partition, counted by `strace -c -f`.

    python bench/new_partition_syscalls.py [N] [--tree DIR ...] [--cpu ROUNDS] [--instructions]

For each tree (default: this one) two children run under `strace -c -f`: one makes N new
partitions' logs as the broker's new-logs thread does (`LogManager.prepare`, then the job's
`open` on a thread of its own, then `adopt`: directory, segment file, leader-epoch checkpoint
holding the leader's epoch), the other makes none, with the same start-up. Their difference
over N is the cost of one partition, printed per syscall, trees side by side. Counts, not
times: the machine's load does not move them (Python's allocator may add a brk or mmap now and
then: fractions of a call per partition).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARM = 4  # partitions made first by both children (imports, first-time paths)


def child(n: int, d: str) -> None:
    """Make `n` partitions' logs in log dir `d` (left for the caller to remove: the removal,
    like closing the logs, is not what is counted)."""
    import gregor
    from gregor.storage.log_manager import LogManager

    tree = os.environ.get("PYTHONPATH", "")
    assert gregor.__file__.startswith(os.path.abspath(tree)), gregor.__file__
    logs = LogManager([d])

    def make(topic: str, count: int) -> float:
        """The worker thread's CPU seconds making `count` logs."""
        jobs = [logs.prepare(topic, i, None, 0) for i in range(count)]
        made: list[object] = []
        cpu: list[float] = []

        def work() -> None:
            t0 = time.thread_time()
            made.extend(op() for _d, op in jobs)
            cpu.append(time.thread_time() - t0)

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        for i, ((log_dir, _op), log_) in enumerate(zip(jobs, made, strict=True)):
            logs.adopt(topic, i, log_dir, log_)  # type: ignore[arg-type]
        return cpu[0]

    make("warm", WARM)
    print(f"cpu_us_per_partition {make('t', n) / max(n, 1) * 1e6:.1f}", flush=True)
    os._exit(0)  # nothing closed or flushed: not what is counted


def counts(tree: str, n: int) -> dict[str, int]:
    """syscall -> calls of a child making `n` partitions with `tree`'s gregor."""
    with (
        tempfile.NamedTemporaryFile("r", suffix=".strace") as out,
        tempfile.TemporaryDirectory(prefix="new-partitions-") as d,
    ):
        env = {**os.environ, "PYTHONPATH": tree}
        child_args = [sys.executable, __file__, "--child", str(n), "--dir", d]
        subprocess.run(
            ["strace", "-f", "-c", "-o", out.name, *child_args],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        got: dict[str, int] = {}
        for line in out.read().splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                got[parts[-1]] = int(parts[3])
        return got


def cpu_us(tree: str, n: int) -> float:
    """The worker's CPU microseconds per partition, one child making `n` with `tree`."""
    with tempfile.TemporaryDirectory(prefix="new-partitions-") as d:
        env = {**os.environ, "PYTHONPATH": tree}
        cmd = [sys.executable, __file__, "--child", str(n), "--dir", d]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def instructions(tree: str, n: int) -> int:
    """Instructions (callgrind) of a child making `n` partitions with `tree`'s gregor."""
    with tempfile.TemporaryDirectory(prefix="new-partitions-") as d:
        env = {**os.environ, "PYTHONPATH": tree}
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--child",
            str(n),
            "--dir",
            d,
        ]
        err = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stderr
    found = re.search(r"Collected : (\d+)", err)
    assert found, err[-500:]
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", type=int, nargs="?", default=500)
    parser.add_argument("--tree", action="append", default=[])
    parser.add_argument("--child", type=int)
    parser.add_argument("--dir")
    parser.add_argument("--cpu", type=int, default=0)
    parser.add_argument("--instructions", action="store_true")
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.dir)
        return
    trees = args.tree or [HERE]
    per: list[dict[str, float]] = []
    for tree in trees:
        busy, idle = counts(tree, args.n), counts(tree, 0)
        diff = collections.Counter(busy)
        diff.subtract(idle)
        per.append({k: v / args.n for k, v in diff.items() if abs(v) / args.n >= 0.05})
    names = sorted({k for p in per for k in p}, key=lambda k: -max(p.get(k, 0) for p in per))
    print(f"syscalls per new partition ({args.n} partitions, strace -c -f)")
    print(f"{'syscall':<16}" + "".join(f"{os.path.basename(t.rstrip('/')):>16}" for t in trees))
    for name in names:
        print(f"{name:<16}" + "".join(f"{p.get(name, 0):>16.2f}" for p in per))
    print(f"{'total':<16}" + "".join(f"{sum(p.values()):>16.2f}" for p in per))
    if args.instructions:
        print(f"user-space instructions per partition (callgrind, {args.n} less none)")
        for tree in trees:
            per_partition = (instructions(tree, args.n) - instructions(tree, 0)) / args.n
            print(f"  {tree}: {per_partition / 1000:.1f} k")
    if args.cpu:
        rounds: list[list[float]] = [[] for _ in trees]
        for _ in range(args.cpu):
            for i, tree in enumerate(trees):
                rounds[i].append(cpu_us(tree, args.n))
        print(f"worker CPU us per partition ({args.cpu} rounds, trees alternating)")
        for tree, figures in zip(trees, rounds, strict=True):
            shown = " ".join(f"{f:.0f}" for f in figures)
            print(f"  {tree}: median {statistics.median(figures):.0f} ({shown})")


if __name__ == "__main__":
    main()
