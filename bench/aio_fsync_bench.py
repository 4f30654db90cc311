#!/usr/bin/env python
"""What one metadata-log fsync costs in Python through runtime/aio_fsync.py: the submission
(`AioFsync.submit`, one io_submit) and the completion (the eventfd read, io_getevents, the
descriptor closed, `on_done` called), source trees side by side. Every voter pays one on every
metadata commit, on its critical path: a follower between its append and its acknowledging
Fetch, the leader between its append and its commit.

    python bench/aio_fsync_bench.py --tree /tmp/old --tree $PWD                   # CPU
    python bench/aio_fsync_bench.py --tree /tmp/old --tree $PWD --instructions    # callgrind

Each fsync: 100 bytes appended to a temp file, a duplicate of its descriptor submitted, the
completion awaited on an asyncio loop. Prints microseconds of process CPU per fsync (system
time included: the two system calls and the kernel's part of the fsync that runs in them), or
with `--instructions` the instructions per fsync counted by valgrind's callgrind (user space
only: the difference of two runs, `--fsyncs` and a tenth of it, so start-up is left out).
Needs Linux AIO (io_setup). Figures only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time

from tree_child import figure_in_tree


def fsync_cost(count: int) -> float:
    """Process CPU seconds of `count` AIO fsyncs, submitted and completed one at a time."""
    from gregor.runtime.aio_fsync import AioFsync

    async def run() -> float:
        loop = asyncio.get_running_loop()
        aio = AioFsync.open(loop)
        assert aio is not None, "no Linux AIO here"
        with tempfile.TemporaryDirectory() as d:
            fd = os.open(os.path.join(d, "log"), os.O_WRONLY | os.O_CREAT)
            start = time.process_time()
            for _ in range(count):
                os.write(fd, b"x" * 100)
                done = loop.create_future()
                assert aio.submit([os.dup(fd)], done.set_result)
                assert await done is None
            took = time.process_time() - start
            aio.stop()
            os.close(fd)
        return took

    return asyncio.run(run())


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", action="append", required=True, help="a source tree (repeat)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fsyncs", type=int, default=None)
    ap.add_argument("--instructions", action="store_true", help="count with callgrind")
    args = ap.parse_args()
    if args.instructions and not shutil.which("valgrind"):
        print("--instructions needs valgrind (apt-get install valgrind)")
        return 2
    if args.instructions:
        n = args.fsyncs or 2000
        for tree in args.tree:
            few = figure_in_tree(tree, "aio_fsync_bench", f"fsync_cost({n // 10})", True, "0")
            many = figure_in_tree(tree, "aio_fsync_bench", f"fsync_cost({n})", True, "0")
            per = (many - few) / (n - n // 10)
            print(f"{tree}: {per / 1000:.1f} k instructions per fsync", flush=True)
        return 0
    n = args.fsyncs or 3000
    print(f"load before: {os.getloadavg()[0]:.2f}")
    results: dict[str, list[float]] = {t: [] for t in args.tree}
    for _ in range(args.runs):
        for tree in args.tree:
            results[tree].append(
                figure_in_tree(tree, "aio_fsync_bench", f"fsync_cost({n})", False) / n * 1e6
            )
    for tree, runs in results.items():
        print(
            f"{tree}: {statistics.median(runs):.1f} us CPU per fsync "
            f"(runs: {', '.join(f'{r:.1f}' for r in runs)})"
        )
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
