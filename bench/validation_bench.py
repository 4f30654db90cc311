#!/usr/bin/env python
"""What the leader's record walk (records/validate.py) costs `Log.append`: two source trees side
by side in one run, the trees alternating case by case, each case in a child process importing
gregor from its tree.

    git archive 5431022 | tar -x -C /tmp/before      # the tree without the walk
    python bench/validation_bench.py /tmp/before .
    python bench/validation_bench.py /tmp/before . --rounds 1 --seconds 1   # a smoke run

1. `Log.append` (the default): a Log in a temporary directory (default LogConfig: no fsync,
1 GiB segments), a pool of copies of one prebuilt client batch (records of 100 B or 1 KiB values
with null keys, all alike or, marked `~`, of 0.5 to 1.5 times the size; batches of about 16 KiB
or 1 MiB; uncompressed, or zstd/lz4 of compressible values), appended as a client's produce for
`--seconds`; records/s and MB/s (batch bytes as sent). Prints a markdown table of the medians
over `--rounds`, and the JSON of every run.

2. End to end (`--e2e-rounds N`): `gregor serve` from each tree, confluent-kafka producing
`--e2e-count` records of 100 B and a quarter as many of 1 KiB into one partition
(bench/kclient.py: acks=1, linger.ms=5; values all alike, or `~`: 0.5 to 1.5 times the size),
the trees alternating; records/s, and the broker process's CPU time (user + system, /proc)
over the produce, per record. Figures only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

KiB = 1024
MiB = 1024 * KiB
CASES = [  # (value bytes, batch bytes, codec, varied: values of 0.5 to 1.5 times the size)
    (100, 16 * KiB, 0, 0),
    (100, 1 * MiB, 0, 0),
    (100, 1 * MiB, 0, 1),
    (1 * KiB, 16 * KiB, 0, 0),
    (1 * KiB, 1 * MiB, 0, 0),
    (1 * KiB, 1 * MiB, 0, 1),
    (100, 1 * MiB, 4, 0),
    (1 * KiB, 1 * MiB, 3, 1),
]
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
HERE = os.path.dirname(os.path.abspath(__file__))
KCLIENT = os.path.join(HERE, "kclient.py")


def worker(value_bytes: int, batch_bytes: int, codec: int, varied: int, seconds: float) -> dict:
    """Runs in the child, with the tree under test first on sys.path."""
    import random

    from gregor.protocol.records.records import build_batch
    from gregor.storage.log import Log

    rnd = random.Random(value_bytes)
    count = max(1, int(batch_bytes * 0.97) // (value_bytes + 11))  # under max.message.bytes
    sizes = [rnd.randint(value_bytes // 2, value_bytes * 3 // 2) if varied else value_bytes
             for _ in range(count)]  # fmt: skip
    if codec:  # compressible values: a counter and a few words, as logs and JSON are
        words = [rnd.randbytes(6).hex().encode() for _ in range(32)]
        values = [
            (b"%09d " % i + b" ".join(rnd.choice(words) for _ in range(n // 12 + 1)))[:n]
            for i, n in enumerate(sizes)
        ]
    else:
        values = [rnd.randbytes(n) for n in sizes]
    proto = build_batch(
        [(None, v) for v in values], base_timestamp=1_700_000_000_000, compression_type=codec
    )
    pool = [bytearray(proto) for _ in range(max(4, min(64, 4 * MiB // len(proto))))]
    directory = tempfile.mkdtemp(prefix="validation-bench-")
    log = Log.open(os.path.join(directory, "t-0"))
    try:
        appends = 0
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            for batch in pool:
                log.append(batch)
            appends += len(pool)
        elapsed = time.perf_counter() - start
    finally:
        log.close()
        shutil.rmtree(directory)
    return {
        "records_per_s": appends * count / elapsed,
        "mb_per_s": appends * len(proto) / elapsed / 1e6,
        "records_per_batch": count,
        "batch_bytes": len(proto),
        "appends": appends,
    }


def run_case(tree: str, case: tuple[int, int, int, int], seconds: float) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", *map(str, case), str(seconds)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def label(case: tuple[int, int, int, int]) -> str:
    value, batch, codec, varied = case
    size = f"{batch // MiB} MiB" if batch >= MiB else f"{batch // KiB} KiB"
    record = f"{value} B" if value < KiB else f"{value // KiB} KiB"
    return f"{'~' if varied else ''}{record} in {size}, {CODEC_NAMES[codec]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def e2e(tree: str, size: int, vary: bool, count: int) -> dict:
    """One broker from `tree`, one produce of `count` records of `size` bytes (or about)."""
    data, port = tempfile.mkdtemp(prefix="validation-e2e-"), _free_port()
    bootstrap = f"127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "gregor", "serve", "--listen", bootstrap, "--data-dir", data],
        env=dict(os.environ, PYTHONPATH=tree),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tree,  # `-m` puts the working directory first on sys.path, before PYTHONPATH
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        common = ["--bootstrap", bootstrap, "--topic", "t", "--partitions", "1"]
        subprocess.run([sys.executable, KCLIENT, "create", *common], capture_output=True)
        produce = [*common, "--size", str(size), "--count", str(count)] + ["--vary"] * vary
        cpu = _cpu_s(server.pid)
        out = subprocess.run(
            [sys.executable, KCLIENT, "produce", *produce],
            capture_output=True,
            text=True,
            check=True,
        )
        cpu = _cpu_s(server.pid) - cpu
        result = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(data, ignore_errors=True)
    return {
        "records_per_s": result["records_per_s"],
        "mb_per_s": result["mb_per_s"],
        "broker_cpu_us_per_record": cpu / count * 1e6,
        "errors": result.get("error"),
    }


def e2e_table(trees: dict[str, str], rounds: int, count: int) -> dict:
    runs: dict[str, dict[str, list[dict]]] = {}
    for r in range(rounds):
        for size, vary in ((100, False), (100, True), (1024, False), (1024, True)):
            by_tree = runs.setdefault(f"{'~' if vary else ''}{size} B", {"before": [], "after": []})
            for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                result = e2e(trees[name], size, vary, count if size < KiB else count // 4)
                by_tree[name].append(result)
                print(r, size, name, result, file=sys.stderr, flush=True)
    print("| records | before rec/s | after rec/s | before broker CPU/record | after |")
    print("|---|---|---|---|---|")
    for name, by_tree in runs.items():
        rate = [statistics.median(x["records_per_s"] for x in by_tree[t]) for t in by_tree]
        cpu = [
            statistics.median(x["broker_cpu_us_per_record"] for x in by_tree[t]) for t in by_tree
        ]
        print(f"| {name} | {rate[0]:,.0f} | {rate[1]:,.0f} | {cpu[0]:.2f} us | {cpu[1]:.2f} us |")
    print()
    return runs


def main() -> None:
    if "--worker" in sys.argv:
        *case, seconds = sys.argv[sys.argv.index("--worker") + 1 :]
        print(json.dumps(worker(*map(int, case), float(seconds))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--e2e-rounds", type=int, default=0)
    parser.add_argument("--e2e-count", type=int, default=1_000_000)
    args = parser.parse_args()
    trees = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    runs: dict[str, dict[str, list[dict]]] = {label(c): {"before": [], "after": []} for c in CASES}
    print("load", os.getloadavg(), file=sys.stderr)
    for r in range(args.rounds):
        for case in CASES:
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for name in order:
                result = run_case(trees[name], case, args.seconds)
                runs[label(case)][name].append(result)
                print(r, label(case), name, f"{result['records_per_s']:,.0f} rec/s",
                      f"{result['mb_per_s']:,.1f} MB/s", file=sys.stderr, flush=True)  # fmt: skip
    print("load", os.getloadavg(), file=sys.stderr)
    print(
        "| records, batch, codec | before rec/s | after rec/s | before MB/s | after MB/s | after/before |"
    )
    print("|---|---|---|---|---|---|")
    for name, by_tree in runs.items() if args.rounds else ():
        b = statistics.median(x["records_per_s"] for x in by_tree["before"])
        a = statistics.median(x["records_per_s"] for x in by_tree["after"])
        bm = statistics.median(x["mb_per_s"] for x in by_tree["before"])
        am = statistics.median(x["mb_per_s"] for x in by_tree["after"])
        print(f"| {name} | {b:,.0f} | {a:,.0f} | {bm:,.1f} | {am:,.1f} | {a / b:.2f} |")
    print()
    e2e_runs = e2e_table(trees, args.e2e_rounds, args.e2e_count) if args.e2e_rounds else {}
    print(json.dumps({"trees": trees, "seconds": args.seconds, "runs": runs, "e2e": e2e_runs}))


if __name__ == "__main__":
    main()
