#!/usr/bin/env python
"""Costs per partition on one node: 1 to 10,000 partitions, source trees side by side.

    python bench/partitions_bench.py                                  # 1, 8, 100, 1000, 10000
    python bench/partitions_bench.py --cases 8,1000,10000,1000x10     # 1000x10: 1,000 topics of 10
    python bench/partitions_bench.py --tree /tmp/old --tree .         # old main against this tree
    python bench/partitions_bench.py --quick                          # 1, 8, 100, 10x10; small

A case "N" is one topic of N partitions; "TxP" is T topics of P partitions. Each case, for each
tree in turn (`--tree`, alternating, `--runs` times; a case of 5,000 partitions or more
`--large-runs` times, 1 by default: it takes minutes), gets a fresh `gregor serve` (one node,
gregor.testing.Broker, data under `--dir`) and measures, in order:

- create_s: CreateTopics (confluent-kafka AdminClient; up to 100 topics and 5,000 partitions
  per request; a topic of more than 5,000 grown by CreatePartitions 5,000 at a time, as Kafka
  refuses an operation of over 10,000 records) until a raw Metadata request names every
  partition with a leader. Also partitions/s.
- produce records/s: bench/kclient.py produce in its own process, 100 B records, acks=1,
  linger.ms=5, sent round-robin over all the partitions by partition number; one warm-up record
  to every partition first (flushed, not timed), then `--records` (50,000) timed from the first
  produce() to the end of flush(). `--max-seconds` caps the timed part (the rate stays valid).
- memory and files per partition: the broker's VmRSS (/proc/<pid>/status), open descriptors
  (entries of /proc/<pid>/fd) and mappings (lines of /proc/<pid>/maps), read after `--settle`
  seconds idle: on the fresh broker (no topic), after the create, after the produce. "per
  partition" is (idle after produce - fresh) / partitions.
- Metadata latency: 20 Metadata v12 requests for all topics over one raw socket (this tree's
  codec builds the frame once), each timed from send to the last byte of its response (the
  client decodes nothing in the clock): p50 and p99.
- stop_s: SIGTERM until the process exited (a clean stop).
- restart (clean): start again on the same data; ready_s until the ready file appeared,
  leaders_s until Metadata names every partition with a leader.
- restart after SIGKILL: a producer (as above, no warm-up, unbounded count) runs for
  `--kill-after` seconds, the broker is SIGKILLed under it, the producer stopped, and the broker
  started again: ready_s and leaders_s as above. (A restart that finds its port taken by
  another process's connection meanwhile is tried again; `port_taken_tries` counts those.)

`--null-broker` adds a column measured against bench/null_broker.py (a Kafka-protocol server
that does no broker work: no validation, no disk), the same produce with the same warm-up: the
client's own limit on this machine, against which the trees' figures are read (only the
produce rate and the server's CPU seconds, `server_cpu_s`, are measured there).

Printed and written to bench/results/partitions-<date>[-quick].md and .json. Goals (issue 14):
produce over 1,000 partitions >= 0.7x produce over 8 (same tree, same run); memory per idle
partition < 20 KiB at the largest case; start < 10 s at the largest case, clean and after a kill.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # these benches, and this checkout's gregor

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # noqa: E402
from scale_common import (  # noqa: E402
    Figure,
    Report,
    Tree,
    add_common_args,
    broker_pid,
    fd_limit,
    kclient,
    latency_summary_ms,
    proc_snapshot,
    restart_broker,
    run_json,
    runs_of,
    say,
    start_broker,
    trees_of,
)

from gregor.protocol import api_keys  # noqa: E402
from gregor.protocol.messages import MetadataRequest  # noqa: E402
from gregor.testing.broker import Broker  # noqa: E402
from gregor.testing.raw_client import RawClient  # noqa: E402

METADATA_VERSION = 12


def parse_case(case: str) -> tuple[int, int]:
    """ "N" -> (1 topic, N partitions); "TxP" -> (T topics, P partitions each)."""
    if "x" in case:
        t, _, p = case.partition("x")
        return int(t), int(p)
    return 1, int(case)


def topic_names(case: str) -> list[str]:
    topics, _ = parse_case(case)
    return ["p"] if topics == 1 else [f"p-{i}" for i in range(topics)]


# -- create and wait --------------------------------------------------------------------------


# Kafka's controller refuses an operation of more than 10,000 records (POLICY_VIOLATION,
# "excessively large batch operation"): a topic of 10,000 partitions is one record more.
PER_REQUEST = 5000


def create(bootstrap: str, case: str) -> None:
    """The topics of `case`, at most PER_REQUEST partitions per request: topics in groups,
    and a bigger topic created with PER_REQUEST partitions then grown by CreatePartitions."""
    _, parts = parse_case(case)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = topic_names(case)
    step = max(1, min(100, PER_REQUEST // parts))
    first_parts = min(parts, PER_REQUEST)
    for first in range(0, len(names), step):
        batch = [NewTopic(n, first_parts, 1) for n in names[first : first + step]]
        futures = admin.create_topics(batch, operation_timeout=300, request_timeout=300)
        for f in futures.values():
            f.result(600)
    for name in names:
        for total in range(first_parts + PER_REQUEST, parts + PER_REQUEST, PER_REQUEST):
            grow = NewPartitions(name, min(total, parts))
            admin.create_partitions([grow], operation_timeout=300, request_timeout=300)[
                name
            ].result(600)


def metadata_all(raw: RawClient) -> Any:
    return raw.call(api_keys.METADATA, METADATA_VERSION, MetadataRequest(topics=None))


def led_partitions(md: Any) -> int:
    return sum(
        1
        for t in md.topics
        if t.error_code == 0
        for p in t.partitions
        if p.error_code == 0 and p.leader_id >= 0
    )


def wait_leaders(bootstrap: str, partitions: int, timeout_s: float = 600) -> float:
    """Seconds until Metadata names `partitions` partitions with a leader (new connections
    while the broker is not listening yet)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        try:
            with RawClient(bootstrap, timeout_s=60) as raw:
                while time.perf_counter() - t0 < timeout_s:
                    if led_partitions(metadata_all(raw)) >= partitions:
                        return time.perf_counter() - t0
                    time.sleep(0.05)
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{partitions} partitions not led within {timeout_s} s")


# -- Metadata latency -------------------------------------------------------------------------


def _read_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("the broker closed the connection")
        got += k
    return buf


def metadata_latency(bootstrap: str, count: int = 20) -> dict[str, Any]:
    with RawClient(bootstrap, timeout_s=60) as raw:
        md = metadata_all(raw)  # warm: the connection and the broker's first answer
        frame = raw.encode(api_keys.METADATA, METADATA_VERSION, MetadataRequest(topics=None))
        sock = raw.sock
        times, size = [], 0
        for _ in range(count):
            t0 = time.perf_counter()
            sock.sendall(frame)
            (size,) = struct.unpack(">i", _read_exact(sock, 4))
            _read_exact(sock, size)
            times.append(time.perf_counter() - t0)
    out = latency_summary_ms(times)
    out.update(response_bytes=size + 4, partitions=led_partitions(md))
    return out


# -- one case on one tree ---------------------------------------------------------------------


def idle(pid: int, settle: float) -> dict[str, int]:
    time.sleep(settle)
    return proc_snapshot(pid)


def per_partition(out: dict[str, Any], n: int) -> None:
    fresh, after = out["fresh"], out["idle_after_produce"]
    out["per_partition"] = {
        "rss_kib": (after["rss_kib"] - fresh["rss_kib"]) / n,
        "fds": (after["fds"] - fresh["fds"]) / n,
        "maps": (after["maps"] - fresh["maps"]) / n,
        "rss_kib_created": (out["idle_after_create"]["rss_kib"] - fresh["rss_kib"]) / n,
    }


def produce_cmd(bootstrap: str, case: str, extra: list[object]) -> list[str]:
    topics, parts = parse_case(case)
    args: list[object] = ["--partitions", parts, "--size", 100, *extra]
    if topics > 1:
        return kclient("produce", bootstrap, "p", "--topic-count", topics, *args)
    return kclient("produce", bootstrap, "p", *args)


def kill_mid_produce(broker: Broker, case: str, cfg: argparse.Namespace) -> bool:
    prod = subprocess.Popen(
        produce_cmd(broker.bootstrap, case, ["--count", 10**9, "--max-seconds", 600]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(cfg.kill_after)
        producing = prod.poll() is None
        broker.kill()
    finally:
        prod.kill()
        prod.wait()
    return producing


def run_case(tree: Tree, case: str, cfg: argparse.Namespace, base_dir: str) -> dict[str, Any]:
    topics, parts = parse_case(case)
    n = topics * parts
    data_dir = tempfile.mkdtemp(prefix="partitions-", dir=base_dir)
    out: dict[str, Any] = {"topics": topics, "partitions": n}
    t0 = time.perf_counter()
    broker = start_broker(tree, data_dir)
    try:
        out["fresh_start_s"] = time.perf_counter() - t0
        pid = broker_pid(broker)
        out["fd_limit"] = fd_limit(pid)
        out["fresh"] = idle(pid, cfg.settle)
        t0 = time.perf_counter()
        create(broker.bootstrap, case)
        wait_leaders(broker.bootstrap, n)
        out["create_s"] = time.perf_counter() - t0
        out["partitions_created_per_s"] = n / out["create_s"]
        out["idle_after_create"] = idle(pid, cfg.settle)
        out["produce"] = run_json(
            produce_cmd(
                broker.bootstrap,
                case,
                ["--count", cfg.records, "--max-seconds", cfg.max_seconds, "--warmup-each"],
            ),
            timeout=cfg.max_seconds + 900,
        )
        out["idle_after_produce"] = idle(pid, cfg.settle)
        per_partition(out, n)
        out["metadata"] = metadata_latency(broker.bootstrap)
        t0 = time.perf_counter()
        assert broker.process is not None
        broker.process.send_signal(signal.SIGTERM)
        out["stop_exit_code"] = broker.process.wait(600)
        out["stop_s"] = time.perf_counter() - t0
        broker.process = None
        out["restart_clean"] = timed_restart(tree, broker, n)
        out["killed_while_producing"] = kill_mid_produce(broker, case, cfg)
        out["restart_after_kill"] = timed_restart(tree, broker, n)
    except Exception as exc:  # one failed case must not lose the others
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        broker.stop(600)
        shutil.rmtree(data_dir, ignore_errors=True)
    return out


NULL_BROKER = Tree("null-broker", os.path.join(HERE, "null_broker.py"))


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_null_case(case: str, cfg: argparse.Namespace) -> dict[str, Any]:
    """The produce of `run_case` against bench/null_broker.py: the client's own limit."""
    topics, parts = parse_case(case)
    out: dict[str, Any] = {"topics": topics, "partitions": topics * parts}
    null = subprocess.Popen(
        [sys.executable, NULL_BROKER.path, "--port", "0", "--partitions", str(parts)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert null.stdout is not None
        line = null.stdout.readline().strip()
        if not line.startswith("listening "):
            raise RuntimeError(f"the null broker did not start: {line!r}")
        c0 = cpu_seconds(null.pid)
        out["produce"] = run_json(
            produce_cmd(
                line.split()[1],
                case,
                ["--count", cfg.records, "--max-seconds", cfg.max_seconds, "--warmup-each"],
            ),
            timeout=cfg.max_seconds + 900,
        )
        out["server_cpu_s"] = cpu_seconds(null.pid) - c0
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        null.terminate()
        null.wait(30)
    return out


def timed_restart(tree: Tree, broker: Broker, n: int) -> dict[str, float]:
    ready, failed = restart_broker(tree, broker)
    t0 = time.perf_counter() - ready  # the start of the attempt that succeeded
    wait_leaders(broker.bootstrap, n)
    return {"ready_s": ready, "leaders_s": time.perf_counter() - t0, "port_taken_tries": failed}


def brief(case: str, tree: Tree, r: dict[str, Any]) -> str:
    if "error" in r and "produce" not in r:
        return f"{case:>8} {tree.label}: ERROR {r['error']}"
    if tree is NULL_BROKER:
        produce = r.get("produce", {})
        err = r.get("error") or produce.get("error")
        return (
            f"{case:>8} {tree.label}: produce {produce.get('records_per_s', 0):,.0f} rec/s, "
            f"server CPU {r.get('server_cpu_s', 0):.2f} s" + (f"  ERROR {err}" if err else "")
        )
    pp = r.get("per_partition", {})
    bits = [
        f"create {r.get('create_s', 0):.2f}s",
        f"produce {r.get('produce', {}).get('records_per_s', 0):,.0f} rec/s",
        f"rss/p {pp.get('rss_kib', 0):.1f} KiB",
        f"fds/p {pp.get('fds', 0):.2f}",
        f"md p50 {r.get('metadata', {}).get('p50_ms', 0):.1f} ms",
        f"stop {r.get('stop_s', 0):.2f}s",
        f"restart {r.get('restart_clean', {}).get('leaders_s', 0):.2f}s",
        f"after kill {r.get('restart_after_kill', {}).get('leaders_s', 0):.2f}s",
    ]
    err = r.get("error") or r.get("produce", {}).get("error")
    fds, limit = r.get("idle_after_produce", {}).get("fds"), r.get("fd_limit")
    if fds and limit and fds >= limit - 16:
        err = f"the broker's descriptors reached its limit ({fds} of {limit}); {err or ''}"
    return f"{case:>8} {tree.label}: " + ", ".join(bits) + (f"  ERROR {err}" if err else "")


def figures(cases: list[str]) -> list[Figure]:
    rows = []
    for c in cases:
        rows += [
            Figure(c, "create_s", f"{c}: create, s"),
            Figure(c, "partitions_created_per_s", f"{c}: partitions created/s"),
            Figure(c, "produce.records_per_s", f"{c}: produce 100 B, rec/s", "rec/s"),
            Figure(c, "produce.warmup_seconds", f"{c}: warm-up, a record to each partition, s"),
            Figure(c, "per_partition.rss_kib", f"{c}: RSS per idle partition, KiB"),
            Figure(c, "per_partition.fds", f"{c}: open fds per partition"),
            Figure(c, "per_partition.maps", f"{c}: mappings per partition"),
            Figure(c, "idle_after_produce.rss_kib", f"{c}: RSS idle after produce, KiB"),
            Figure(c, "metadata.p50_ms", f"{c}: Metadata (all topics) p50, ms"),
            Figure(c, "metadata.p99_ms", f"{c}: Metadata (all topics) p99, ms"),
            Figure(c, "stop_s", f"{c}: clean stop, s"),
            Figure(c, "restart_clean.ready_s", f"{c}: restart after clean stop, to ready, s"),
            Figure(c, "restart_clean.leaders_s", f"{c}: restart after clean stop, to led, s"),
            Figure(c, "restart_after_kill.ready_s", f"{c}: restart after SIGKILL, to ready, s"),
            Figure(c, "restart_after_kill.leaders_s", f"{c}: restart after SIGKILL, to led, s"),
        ]
    return rows


def goals(rep: Report, cases: list[str]) -> list[str]:
    out = []
    many = (
        "1000" if "1000" in cases else max(cases, key=lambda c: parse_case(c)[0] * parse_case(c)[1])
    )
    if "8" in cases and many != "8":
        out += rep.ratio_goal(
            f"produce over {many} partitions / over 8 >= 0.7",
            (many, "produce.records_per_s"),
            ("8", "produce.records_per_s"),
            0.7,
            True,
        )
    largest = max(cases, key=lambda c: parse_case(c)[0] * parse_case(c)[1])
    out += rep.value_goal(
        f"RSS per idle partition at {largest} < 20 KiB",
        largest,
        "per_partition.rss_kib",
        20,
        False,
    )
    for key, what in (("restart_clean", "a clean stop"), ("restart_after_kill", "a SIGKILL")):
        out += rep.value_goal(
            f"start after {what} at {largest} < 10 s (to every partition led)",
            largest,
            f"{key}.leaders_s",
            10,
            False,
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(ap)
    ap.add_argument(
        "--cases", help="comma-separated: N (one topic) or TxP (default 1,8,100,1000,10000)"
    )
    ap.add_argument(
        "--large-runs",
        type=int,
        default=1,
        help="runs of a case of 5,000 partitions or more, unless --runs is given (default 1)",
    )
    ap.add_argument(
        "--null-broker",
        action="store_true",
        help="also produce to bench/null_broker.py (no broker work): the client's own limit",
    )
    ap.add_argument("--records", type=int, help="timed records per produce (default 50,000)")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="cap on the timed produce")
    ap.add_argument("--settle", type=float, help="idle seconds before reading memory (default 3)")
    ap.add_argument(
        "--kill-after", type=float, help="seconds of produce before the SIGKILL (default 3)"
    )
    args = ap.parse_args()
    q = args.quick
    cases = (args.cases or ("1,8,100,10x10" if q else "1,8,100,1000,10000")).split(",")
    args.records = args.records or (5_000 if q else 50_000)
    args.settle = args.settle if args.settle is not None else (1.0 if q else 3.0)
    args.kill_after = args.kill_after if args.kill_after is not None else (1.5 if q else 3.0)
    trees = trees_of(args)
    rep = Report("partitions", args, trees, [NULL_BROKER] if args.null_broker else [])
    base_dir = tempfile.mkdtemp(prefix="partitions-bench-", dir=args.dir)
    say(
        f"partitions bench: cases {cases}, trees {[t.label for t in trees]}, {runs_of(args)} run(s)"
    )
    try:
        for case in cases:
            big = parse_case(case)[0] * parse_case(case)[1] >= 5000
            runs = args.large_runs if big and not args.runs else runs_of(args)
            for _ in range(runs):
                for tree in trees:
                    r = run_case(tree, case, args, base_dir)
                    rep.add(case, tree, r)
                    say(brief(case, tree, r))
                if args.null_broker:
                    r = run_null_case(case, args)
                    rep.add(case, NULL_BROKER, r)
                    say(brief(case, NULL_BROKER, r))
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)
    rep.write(
        "Costs per partition on one node (bench/partitions_bench.py)",
        __doc__ or "",
        figures(cases),
        goals(rep, cases),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
