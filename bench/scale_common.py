"""What the scale benches share (partitions_bench, connections_bench, group_scale_bench,
scaleout_bench, replication_latency_bench): source trees measured side by side, brokers started
from a given tree, /proc readings of a broker, and the report (markdown + JSON in bench/results/).

Trees: every bench takes `--tree PATH` (repeatable; default this checkout). A broker "from a
tree" is `python -m gregor serve` started with PYTHONPATH=<tree> and the working directory
<tree> (`-m` puts the working directory first on sys.path), so an old checkout
(`git worktree add /tmp/old main`, or `git archive main | tar -x -C /tmp/old`) and the new one
run in one bench, alternating run by run. The clients (confluent-kafka in bench/kclient.py, and
the raw-socket clients built on this checkout's codec) are the same for every tree.

Report: `Report.add(case, tree, run)` keeps every run's figures; `Report.write()` prints and
writes bench/results/<name>-<date>[-quick].md and .json: one table of medians over runs with a
column per tree (and new/old when there are two), the goals the bench states, the commands, the
load average at start and end, then every run as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (ROOT, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from broker_bench import dig, fmt, run_json, uptime_line  # noqa: E402
from rawload import loadavg, proc_cpu_seconds  # noqa: E402

from gregor.testing.broker import Broker, BrokerStartError  # noqa: E402
from gregor.testing.cluster import LocalCluster  # noqa: E402

KCLIENT = os.path.join(HERE, "kclient.py")
RESULTS = os.path.join(HERE, "results")
__all__ = ["proc_cpu_seconds", "run_json", "loadavg", "KCLIENT"]


# -- trees ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    label: str
    path: str


def add_common_args(ap: argparse.ArgumentParser, runs: int = 3) -> None:
    ap.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="PATH",
        help="a source tree to start brokers from (repeatable; default: this checkout)",
    )
    ap.add_argument("--quick", action="store_true", help="small sizes and 1 run: a smoke test")
    ap.add_argument("--runs", type=int, help=f"runs per figure (default {runs}; 1 with --quick)")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where broker data goes")
    ap.add_argument("--results", default=RESULTS, help="where the report goes")


def runs_of(args: argparse.Namespace, default: int = 3) -> int:
    return args.runs or (1 if args.quick else default)


def trees_of(args: argparse.Namespace) -> list[Tree]:
    paths = [os.path.abspath(p) for p in (args.tree or [ROOT])]
    out: list[Tree] = []
    for path in paths:
        if not os.path.isfile(os.path.join(path, "gregor", "__init__.py")):
            raise SystemExit(f"--tree {path}: no gregor/ package there")
        head = subprocess.run(
            ["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        label = f"{os.path.basename(path)}@{head}" if head else os.path.basename(path)
        while label in {t.label for t in out}:
            label += "'"
        out.append(Tree(label, path))
    return out


@contextlib.contextmanager
def spawning_from(tree: Tree) -> Iterator[None]:
    """Children started inside run the gregor of `tree` (PYTHONPATH and working directory)."""
    old_env, old_cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = tree.path
    os.chdir(tree.path)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        if old_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_env


def start_broker(
    tree: Tree, data_dir: str, config: dict[str, str] | None = None, timeout_s: float = 600
) -> Broker:
    broker = Broker(config=config, data_dir=data_dir, start_timeout_s=timeout_s)
    with spawning_from(tree):
        broker.start()
    check_tree(broker, tree)
    return broker


def restart_broker(tree: Tree, broker: Broker) -> tuple[float, int]:
    """Start a stopped broker again from `tree`, on its port: (seconds until its ready file
    appeared, failed attempts before).

    The port came from bind(0), in the ephemeral range: while the broker was down, a
    connection of any process on this shared machine may have taken it as its local port.
    Then the start fails with EADDRINUSE; it is tried again a few times, then on a new port.
    The seconds are those of the attempt that succeeded."""
    for attempt in range(8):
        if attempt == 7:
            broker.port = 0
        t0 = time.perf_counter()
        try:
            with spawning_from(tree):
                broker.start()
        except BrokerStartError as exc:
            if "Address already in use" not in str(exc) or attempt == 7:
                raise
            time.sleep(0.5)
            continue
        took = time.perf_counter() - t0
        check_tree(broker, tree)
        return took, attempt
    raise AssertionError("unreachable")


def start_cluster(
    tree: Tree, nodes: int, base_dir: str, config: dict[str, str] | None = None
) -> LocalCluster:
    cluster = LocalCluster(nodes, base_dir=base_dir, config=config, log_level="WARNING")
    with spawning_from(tree):
        cluster.start()
    for node in cluster.nodes.values():
        check_tree(node, tree)
    cluster.active_controller(60)
    cluster.wait_for_brokers(60)
    return cluster


def check_tree(broker: Broker, tree: Tree) -> None:
    """The broker process runs from `tree`: its working directory and PYTHONPATH say so."""
    pid = broker_pid(broker)
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    cwd = os.readlink(f"/proc/{pid}/cwd")
    if cwd != tree.path or env.get(b"PYTHONPATH", b"").decode() != tree.path:
        raise RuntimeError(
            f"broker {pid} runs from {cwd} (PYTHONPATH {env.get(b'PYTHONPATH')}), not {tree.path}"
        )


def broker_pid(broker: Broker) -> int:
    assert broker.process is not None, "the broker is not running"
    return broker.process.pid


# -- /proc ------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    """Resident memory of a process (VmRSS), KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def map_count(pid: int) -> int:
    """Memory mappings of a process (each mmapped index is one)."""
    with open(f"/proc/{pid}/maps") as f:
        return sum(1 for _ in f)


def fd_limit(pid: int) -> int | None:
    """The soft limit on open files of a process (from /proc/<pid>/limits)."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft = line.split()[3]
                return int(soft) if soft.isdigit() else None
    return None


def proc_snapshot(pid: int) -> dict[str, int]:
    return {"rss_kib": rss_kib(pid), "fds": fd_count(pid), "maps": map_count(pid)}


def raise_nofile(wanted: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE towards `wanted` (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard == resource.RLIM_INFINITY else min(max(soft, wanted), hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- figures ----------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of `values`; None if empty."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def latency_summary_ms(seconds: list[float]) -> dict[str, Any]:
    ms = [x * 1000 for x in seconds]
    return {
        "n": len(ms),
        "p50_ms": pct(ms, 0.5),
        "p99_ms": pct(ms, 0.99),
        "max_ms": max(ms) if ms else None,
    }


def aggregate_rate(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Records/s of clients that ran at once: all their records over the span from the first
    one's start to the last one's end (their `wall_start` / `wall_end`)."""
    ok = [p for p in parts if "error" not in p and p.get("wall_start")]
    out: dict[str, Any] = {"clients": len(parts), "clients_ok": len(ok)}
    errors = [p["error"] for p in parts if "error" in p]
    if errors:
        out["error"] = f"{len(errors)} client(s) failed: {errors[0]}"
    if ok:
        span = max(p["wall_end"] for p in ok) - min(p["wall_start"] for p in ok)
        records = sum(p["records"] for p in ok)
        out.update(records=records, seconds=span, records_per_s=records / span if span else None)
        # how far apart the clients started: near 0 means they really ran at once
        out["start_skew_s"] = max(p["wall_start"] for p in ok) - min(p["wall_start"] for p in ok)
        out["client_cpu_s"] = sum(p.get("client_cpu_s") or 0.0 for p in ok)
    return out


def kclient(mode: str, bootstrap: str, topic: str, *extra: object) -> list[str]:
    return [
        sys.executable,
        KCLIENT,
        mode,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        *(str(x) for x in extra),
    ]


def run_parallel(cmds: list[list[str]], timeout: float = 600) -> list[dict[str, Any]]:
    """Run worker processes at once; each one's last JSON line (or an error)."""
    procs = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds
    ]
    out = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            so, se = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
        lines = [ln for ln in so.splitlines() if ln.startswith("{")]
        out.append(
            json.loads(lines[-1])
            if lines
            else {"error": f"no output (exit {p.returncode}): {se[-800:]}"}
        )
    return out


# -- the report -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One row of the table: the median over runs of `path` in the runs of `case`."""

    case: str
    path: str
    label: str
    unit: str = ""
    ratio: bool = True  # False: no new/old column (a figure near 0, such as a skew)


class Report:
    def __init__(
        self,
        name: str,
        args: argparse.Namespace,
        trees: list[Tree],
        extra: list[Tree] | None = None,
    ) -> None:
        """`extra`: columns after the trees' (a reference such as a null server), left out of
        their new/old ratio."""
        self.name, self.quick, self.results_dir = name, args.quick, args.results
        self.trees, self.compared = trees + (extra or []), len(trees)
        self.runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.meta: dict[str, Any] = {
            "date": dt.date.today().isoformat(),
            "started": dt.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join(["python", *sys.argv]),
            "args": {k: v for k, v in vars(args).items() if k not in ("results",)},
            "trees": {t.label: t.path for t in trees},
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}, Python {platform.python_version()}",
            "uptime_start": uptime_line(),
        }

    def add(self, case: str, tree: Tree, run: dict[str, Any]) -> None:
        self.runs.setdefault(case, {}).setdefault(tree.label, []).append(run)

    def median(self, case: str, tree: Tree, path: str) -> float | None:
        vals = [dig(r, path) for r in self.runs.get(case, {}).get(tree.label, [])]
        nums = [v for v in vals if isinstance(v, int | float)]
        return statistics.median(nums) if nums else None

    def table(self, figures: list[Figure]) -> list[str]:
        heads = [t.label for t in self.trees]
        two = self.compared == 2
        lines = [
            "| figure | " + " | ".join(heads) + (" | new/old |" if two else " |"),
            "|---|" + "---:|" * (len(heads) + (1 if two else 0)),
        ]
        for f in figures:
            vals = [self.median(f.case, t, f.path) for t in self.trees]
            if all(v is None for v in vals):
                continue
            cells = [fmt(v, f.unit) if v is not None else "-" for v in vals]
            if two:
                a, b = vals[:2]
                cells.append(f"{b / a:.2f}x" if f.ratio and a and b is not None else "-")
            lines.append(f"| {f.label} | " + " | ".join(cells) + " |")
        return lines

    def errors(self) -> list[str]:
        out = []
        for case, by_tree in self.runs.items():
            for label, runs in by_tree.items():
                for i, r in enumerate(runs):
                    for e in _errors(r):
                        out.append(f"{case} {label} run {i + 1}: {e}")
        return out

    def write(self, title: str, about: str, figures: list[Figure], goals: list[str]) -> str:
        self.meta["uptime_end"] = uptime_line()
        self.meta["finished"] = dt.datetime.now().isoformat(timespec="seconds")
        errs = self.errors()
        body = [
            f"# {title}",
            "",
            about.strip(),
            "",
            f"    {self.meta['command']}",
            "",
            f"{self.meta['machine']}. Medians of {max((len(v) for c in self.runs.values() for v in c.values()), default=0)} run(s), trees alternating.",
            f"Load at start: `{self.meta['uptime_start']}`; at end: `{self.meta['uptime_end']}`.",
            "",
            *(f"- `{t.label}`: {t.path}" for t in self.trees),
            "",
            *self.table(figures),
            "",
        ]
        if self.quick:
            body += [
                "**--quick: a smoke run of the script (small sizes, one run): not figures to quote.**",
                "",
            ]
        if goals:
            body += ["Goals (reported, not asserted):", "", *(f"- {g}" for g in goals), ""]
        if errs:
            body += ["Errors:", "", *(f"- {e}" for e in errs[:30]), ""]
        text = "\n".join(body)
        print("\n" + text, flush=True)
        os.makedirs(self.results_dir, exist_ok=True)
        stem = os.path.join(
            self.results_dir, f"{self.name}-{self.meta['date']}{'-quick' if self.quick else ''}"
        )
        data = {"meta": self.meta, "runs": self.runs}
        with open(stem + ".md", "w") as f:
            f.write(text + "\n## Every run\n\n```json\n" + json.dumps(data, indent=1) + "\n```\n")
        with open(stem + ".json", "w") as f:
            json.dump(data, f, indent=1)
        print(f"wrote {stem}.md and {stem}.json")
        return stem

    def ratio_goal(
        self, text: str, num: tuple[str, str], den: tuple[str, str], goal: float, above: bool
    ) -> list[str]:
        """One goal line per tree: median(num) / median(den) against `goal`."""
        out = []
        for t in self.trees:
            a, b = self.median(num[0], t, num[1]), self.median(den[0], t, den[1])
            if a is None or not b:
                out.append(f"{text} [{t.label}]: not measured")
                continue
            r = a / b
            ok = r >= goal if above else r <= goal
            out.append(f"{text} [{t.label}]: {r:.2f} ({'met' if ok else 'NOT met'})")
        return out

    def value_goal(
        self, text: str, case: str, path: str, goal: float, above: bool, unit: str = ""
    ) -> list[str]:
        out = []
        for t in self.trees[: self.compared]:  # a reference column (`extra`) measures less
            v = self.median(case, t, path)
            if v is None:
                out.append(f"{text} [{t.label}]: not measured")
                continue
            ok = v >= goal if above else v <= goal
            out.append(f"{text} [{t.label}]: {fmt(v, unit)} ({'met' if ok else 'NOT met'})")
        return out


def _errors(d: Any) -> list[str]:
    if isinstance(d, dict):
        out = []
        for k, v in d.items():
            if k == "error" and isinstance(v, str):
                out.append(v)
            else:
                out += _errors(v)
        return out
    if isinstance(d, list):
        return [e for x in d for e in _errors(x)]
    return []


def alternate(
    report: Report,
    trees: list[Tree],
    runs: int,
    case: str,
    measure: Callable[[Tree], dict[str, Any]],
) -> None:
    """`measure(tree)` for each tree in turn, `runs` times (trees alternating), each run's
    figures said and kept in `report` under `case`."""
    for run in range(runs):
        for tree in trees:
            say(f"run {run + 1}: {tree.label}")
            result = measure(tree)
            say(f"  {result}")
            report.add(case, tree, result)


def say(*parts: object) -> None:
    print(time.strftime("%H:%M:%S"), *parts, flush=True)
