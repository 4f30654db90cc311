#!/usr/bin/env python
"""What the metrics cost the produce path: one `gregor serve` per case, side by side in one run,
the cases alternating run by run:

    off     this tree, no metrics listener (the produce and fetch counters still count)
    on      this tree, `--metrics 127.0.0.1:0`, scraped every second while the load runs
    main    another tree (the branch point: `git archive <commit> | tar -x -C DIR`), if given

    python bench/metrics_bench.py [--main DIR] [--runs 3] [--small-mb 64] [--records 500000]

Loads, each against a fresh broker and topic (1 partition, acks=1):
1. small produces (bench/rawload.py): Produce requests of one 1 KiB batch, 8 pipelined, for
   `--small-mb` MB: the per-request path, where the request metrics' fixed cost is largest.
   Figures: requests/s and the broker's CPU seconds (utime+stime) per request in microseconds,
   the figure load from other processes disturbs least.
2. confluent-kafka (bench/kclient.py): `--records` records of 100 B: records/s.

3. `--micro`, in this process: the nanoseconds the request metrics add to one request (the
   measuring dispatcher around a dispatcher that answers at once, against that dispatcher
   alone) and the produce path's counter increments for one partition.

Prints one line per run and the medians with each case's cost relative to `off`. Figures only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
sys.path.insert(0, TREE)

from gregor.testing.ports import free_ports  # noqa: E402


def serve(tree: str, metrics: bool) -> tuple[subprocess.Popen[bytes], str, str | None, str]:
    d = tempfile.mkdtemp(prefix="metrics-bench-")
    port = free_ports(1)[0]
    ready = os.path.join(d, "ready")
    cmd = [sys.executable, "-m", "gregor", "serve", "--listen", f"127.0.0.1:{port}"]
    cmd += ["--data-dir", os.path.join(d, "logs"), "--ready-file", ready, "--log-level", "WARNING"]
    if metrics:
        cmd += ["--metrics", "127.0.0.1:0"]
    env = dict(os.environ, PYTHONPATH=tree)
    proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL)
    while not os.path.exists(ready):
        if proc.poll() is not None:
            raise SystemExit(f"broker of {tree} exited with {proc.returncode}")
        time.sleep(0.05)
    url = None
    if metrics:
        with open(ready + ".metrics") as f:
            url = f.read().strip()
    return proc, f"127.0.0.1:{port}", url, d


def scraper(url: str, stop: threading.Event, counts: list[int]) -> None:
    while not stop.wait(1.0):
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            r.read()
        counts[0] += 1


def tool(*args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=TREE)
    r = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def one(tree: str, metrics: bool, load: str, a: argparse.Namespace) -> dict:
    proc, bootstrap, url, d = serve(tree, metrics)
    stop, scrapes = threading.Event(), [0]
    try:
        k = os.path.join(HERE, "kclient.py")
        tool(k, "create", "--bootstrap", bootstrap, "--topic", "t", "--partitions", "1")
        if url:
            threading.Thread(target=scraper, args=(url, stop, scrapes), daemon=True).start()
        if load == "small":
            out = tool(
                os.path.join(HERE, "rawload.py"), "produce", "--bootstrap", bootstrap,
                "--topic", "t", "--bytes", f"{a.small_mb}MiB", "--batch-bytes", "1KiB",
                "--broker-pid", str(proc.pid),
            )  # fmt: skip
            requests = a.small_mb * 1024
            fig = {
                "req_per_s": requests / out["seconds"],
                "cpu_us_per_req": out["broker_cpu_s"] / requests * 1e6,
            }
        else:
            out = tool(
                k, "produce", "--bootstrap", bootstrap, "--topic", "t", "--partitions", "1",
                "--size", "100", "--count", str(a.records),
            )  # fmt: skip
            fig = {"records_per_s": out["records_per_s"]}
        fig["scrapes"] = scrapes[0]
        return fig
    finally:
        stop.set()
        proc.terminate()
        proc.wait(30)
        subprocess.run(["rm", "-rf", d])


def micro() -> None:
    import timeit
    from types import SimpleNamespace

    from gregor.metrics.stats import SAMPLE_EVERY, BrokerTopicStats, RequestStats
    from gregor.runtime.request_metrics import MeasuredDispatcher
    from gregor.runtime.response_timing import ResponseTimer

    frame = memoryview(bytes([0, 0, 0, 9]) + bytes(1100))
    answer = [b"x" * 40, memoryview(b"y" * 60)]

    def bare(conn: object, f: memoryview) -> list:
        return answer

    measured = MeasuredDispatcher(bare, RequestStats())  # type: ignore[arg-type]
    conn = SimpleNamespace(timer=None, received_s=0.0, bytes_out=0, timing=None)
    measured(conn, frame)  # type: ignore[arg-type]  (its timer made)
    timer = ResponseTimer()
    clock = time.perf_counter

    def stamp() -> None:
        """The connection's part for every read: the time it ended."""
        conn.received_s = clock()

    def departure() -> None:
        """The connection's part for a sampled request: its response queued, then its bytes
        taken by the socket."""
        timer.queued(conn.timing, answer, clock())
        timer.sent(0, clock(), None)

    stats, records = BrokerTopicStats(), bytes(1024)

    def counters() -> None:
        c = stats.topic("t")
        c.total_produce += 1
        c.messages_in += 10
        c.bytes_in += len(records)

    n = 100_000
    best = {}
    for name, fn in (
        ("bare dispatcher", lambda: bare(None, frame)),
        ("measured dispatcher", lambda: measured(conn, frame)),  # type: ignore[arg-type]
        ("read stamp", stamp),
        ("sampled response departure", departure),
        ("produce counters", counters),
    ):
        # CPU time of this thread, not wall time: waiting for a core on a shared machine is
        # left out; the best of 15
        runs = timeit.repeat(fn, number=n, repeat=15, timer=time.thread_time)
        best[name] = min(runs) / n * 1e9
    added = (
        best["measured dispatcher"]  # one request in SAMPLE_EVERY timed, as in the broker
        - best["bare dispatcher"]
        + best["read stamp"]  # a read per request at worst
        + best["sampled response departure"] / SAMPLE_EVERY
    )
    for name, ns in best.items():
        print(f"{name}: {ns:.0f} ns")
    print(f"request metrics: +{added:.0f} ns per request (listener on)")
    print(f"produce counters: {best['produce counters']:.0f} ns per partition (always)")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--main", help="a tree to compare with (metrics off there)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--small-mb", type=int, default=64)
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--loads", default="small,client")
    ap.add_argument("--micro", action="store_true", help="only the in-process figures")
    a = ap.parse_args()
    if a.micro:
        micro()
        return
    cases = {"off": (TREE, False), "on": (TREE, True)}
    if a.main:
        cases["main"] = (os.path.abspath(a.main), False)
    print("load average", os.getloadavg(), flush=True)
    results: dict[tuple[str, str], list[dict]] = {}
    for load in a.loads.split(","):
        for run in range(a.runs):
            for name, (tree, metrics) in cases.items():
                fig = one(tree, metrics, load, a)
                results.setdefault((load, name), []).append(fig)
                print(load, run + 1, name, {k: round(v, 2) for k, v in fig.items()}, flush=True)
    print("load average", os.getloadavg())
    print("\nmedians (cost relative to off: + is slower / more CPU)")
    for load in a.loads.split(","):
        base = {
            k: statistics.median(f[k] for f in results[(load, "off")])
            for k in results[(load, "off")][0]
        }
        for name in cases:
            med = {k: statistics.median(f[k] for f in results[(load, name)]) for k in base}
            rel = []
            for k, v in med.items():
                if k == "scrapes" or not base[k]:
                    continue
                worse = (base[k] / v - 1) if k.endswith("per_s") else (v / base[k] - 1)
                rel.append(f"{k} {v:,.1f} ({worse:+.1%})")
            print(f"{load:6} {name:5}", "; ".join(rel))


if __name__ == "__main__":
    main()
