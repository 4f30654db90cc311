#!/usr/bin/env python
"""`gregor mirror` throughput and latency between two single-node gregor brokers.

    nice -n 10 python bench/mirror_bench.py               # 50,000 records of 1 KiB, 8 partitions
    nice -n 10 python bench/mirror_bench.py --records 20000 --latency-seconds 5

1. Baseline: a plain confluent-kafka loop, consumer on A (assigned every partition from the
   start) and an idempotent acks=all producer on B writing each record to the same partition,
   until B acknowledged them all.
2. `python -m gregor mirror` (A->B), 1 process then 2 processes with the same config, then 1 in
   exactly-once mode (B counted by the last stable offset, as read_committed sees it): from the
   mirror's start until B holds every record (total, start-up included: the process, the
   consumer group's first join, which brokers hold for `group.initial.rebalance.delay.ms`, 3 s
   by default) and from the first record seen on B (steady; not for exactly once, whose
   records become visible a transaction at a time).
3. Replication latency at 1,000 records/s for N seconds with one mirror running and caught up:
   a record's CreateTime on A to its arrival at a consumer of B (p50, p99).

With `--tree LABEL=DIR` (repeatable) the mirror cases also run the `gregor` of another source
tree (e.g. `git archive main | tar -x -C /tmp/old`), alternating with this one in each run, so
old and new are compared under the same load; `--cases` picks cases by number (1, 2, 3 as
above).

`--broker KEY=VALUE` configures both brokers (say `group.initial.rebalance.delay.ms=0`, as
Apache Kafka's sample server.properties has it, to see start-up without the group's delay).

Prints the figures; nothing is asserted. The machine is shared: run it when it is quiet.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor import Broker

PARTITIONS = 8
VALUE = b"x" * 1024


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(timeout=30)


def fill(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(60)


_COUNTERS: dict[str, Consumer] = {}
_LATENCY_RUNS: list[str] = []


def count(bootstrap: str, topic: str) -> int:
    """Records in `topic` (sum of high watermarks), with one long-lived consumer per cluster and
    no metadata request once the topic is known, so that watching B costs B little."""
    c = _COUNTERS.get(bootstrap)
    if c is None:
        c = _COUNTERS[bootstrap] = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "bench-counter"}
        )
    if topic not in _KNOWN:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None or len(md.partitions) < PARTITIONS:
            return 0
        _KNOWN.add(topic)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    return sum(c.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps)


_KNOWN: set[str] = set()


def baseline(a: str, b: str, topic: str, n: int) -> float:
    copy = f"copy-{topic}"
    create(b, copy)
    c = Consumer({"bootstrap.servers": a, "group.id": "bench-base", "enable.auto.commit": False})
    p = Producer({"bootstrap.servers": b, "enable.idempotence": True, "acks": "all"})
    c.assign([TopicPartition(topic, i, 0) for i in range(PARTITIONS)])
    start = time.monotonic()
    copied = 0
    while copied < n:
        for m in c.consume(500, timeout=0.5):
            if m.error() is not None:
                continue
            while True:
                try:
                    p.produce(
                        copy,
                        m.value(),
                        m.key(),
                        partition=m.partition(),
                        timestamp=m.timestamp()[1],
                        headers=m.headers(),
                    )
                    break
                except BufferError:
                    p.poll(0.01)
            copied += 1
        p.poll(0)
    p.flush(60)
    elapsed = time.monotonic() - start
    c.close()
    return elapsed


def start_mirror(
    config: str, log: str, tree: str | None = None, *args: str
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(([tree] if tree else []) + sys.path))
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "gregor", "mirror", "--config", config, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def mirrored(
    a: str,
    b: str,
    workdir: str,
    topic: str,
    n: int,
    processes: int,
    extra: str = "",
    tree: str | None = None,
    args: tuple[str, ...] = (),
) -> tuple[float, float, float]:
    """(seconds from start, steady records/s, mirror CPU microseconds per record copied after
    the first)"""
    config = os.path.join(workdir, f"mm2-{topic}.properties")
    with open(config, "w") as f:
        f.write(
            f"clusters = A, B\nA.bootstrap.servers = {a}\nB.bootstrap.servers = {b}\n"
            "A->B.enabled = true\nA->B.topics = " + topic + "\nreplication.factor = 1\n"
            "offset-syncs.topic.replication.factor = 1\ncheckpoints.topic.replication.factor = 1\n"
            "heartbeats.topic.replication.factor = 1\nemit.heartbeats.enabled = false\n"
            "emit.checkpoints.enabled = false\nA.consumer.session.timeout.ms = 6000\n" + extra
        )
    start = time.monotonic()
    procs = [
        start_mirror(config, os.path.join(workdir, f"mirror-{topic}-{i}.log"), tree, *args)
        for i in range(processes)
    ]
    first = None
    remote = f"A.{topic}"
    cpu_first = 0.0
    while (seen := count(b, remote)) < n:
        if first is None and seen > 0:
            first = (time.monotonic(), seen)
            cpu_first = sum(cpu_seconds(p.pid) for p in procs)
        time.sleep(0.025)
    end = time.monotonic()
    cpu_copy = sum(cpu_seconds(p.pid) for p in procs) - cpu_first
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(60)
    f_t, f_n = first or (start, 0)
    steady = (n - f_n) / max(end - f_t, 1e-9)
    return end - start, steady, cpu_copy * 1e6 / max(n - f_n, 1)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux), steadier than wall time on a busy
    machine."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def latency(
    a: str, b: str, workdir: str, seconds: int, tree: str | None = None
) -> tuple[float, float]:
    topic = f"lat-{len(_LATENCY_RUNS)}"
    _LATENCY_RUNS.append(topic)
    create(a, topic)
    config = os.path.join(workdir, f"mm2-{topic}.properties")
    with open(config, "w") as f:
        f.write(
            f"clusters = A, B\nA.bootstrap.servers = {a}\nB.bootstrap.servers = {b}\n"
            f"A->B.enabled = true\nA->B.topics = {topic}\nreplication.factor = 1\n"
            "offset-syncs.topic.replication.factor = 1\nemit.heartbeats.enabled = false\n"
            "emit.checkpoints.enabled = false\n"
        )
    proc = start_mirror(config, os.path.join(workdir, f"mirror-{topic}.log"), tree)
    while f"A.{topic}" not in AdminClient({"bootstrap.servers": b}).list_topics(timeout=10).topics:
        time.sleep(0.1)
    c = Consumer(
        {
            "bootstrap.servers": b,
            "group.id": "bench-lat",
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 10,
        }
    )
    c.subscribe([f"A.{topic}"])
    while not c.assignment():
        c.poll(0.1)
    p = Producer({"bootstrap.servers": a, "linger.ms": 0})
    delays: list[float] = []
    total = seconds * 1000
    start = time.monotonic()
    sent = 0
    while len(delays) < total and time.monotonic() < start + seconds + 30:
        due = min(total, int((time.monotonic() - start) * 1000))
        while sent < due:
            p.produce(topic, b"l", partition=sent % PARTITIONS)
            sent += 1
        p.poll(0)
        for m in c.consume(1000, timeout=0.001):
            if m.error() is None:
                delays.append(time.time() * 1000 - m.timestamp()[1])
    c.close()
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    delays.sort()
    return statistics.median(delays), delays[int(len(delays) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3, help="runs alternate; medians reported")
    parser.add_argument("--latency-seconds", type=int, default=10, help="0: no latency run")
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also run the mirror cases with the gregor of source tree DIR",
    )
    parser.add_argument("--cases", default="1,2,3", help="mirror cases to run (1,2,3)")
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="also one process serving --metrics (what measuring costs), in the same runs",
    )
    parser.add_argument(
        "--broker",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config of both brokers (e.g. group.initial.rebalance.delay.ms=0)",
    )
    args = parser.parse_args()
    n = args.records
    eos = "B.exactly.once.source.support = enabled\n"
    all_cases = [
        ("gregor mirror, 1 process", 1, ""),
        ("gregor mirror, 2 processes", 2, ""),
        ("gregor mirror, exactly once, 1 process", 1, eos),
    ]
    trees: list[tuple[str, str | None]] = [("", None)]
    for item in args.tree:
        label, _, path = item.partition("=")
        trees.append((f"{label}: ", os.path.abspath(path)))
    cases: dict[str, tuple[int, str, str | None, tuple[str, ...]]] = {}
    for number in args.cases.split(","):
        name, processes, extra = all_cases[int(number) - 1]
        for label, tree in trees:
            cases[label + name] = (processes, extra, tree, ())
    if args.metrics:
        for label, tree in trees:
            cases[f"{label}gregor mirror, 1 process, --metrics"] = (
                1, "", tree, ("--metrics", "127.0.0.1:0")
            )  # fmt: skip
    base: list[float] = []
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
    brokers = dict(item.split("=", 1) for item in args.broker)
    with (
        tempfile.TemporaryDirectory() as workdir,
        Broker(config=brokers) as a,
        Broker(config=brokers) as b,
    ):
        for run in range(args.runs):
            create(a.bootstrap, f"base{run}")
            fill(a.bootstrap, f"base{run}", n)
            base.append(n / baseline(a.bootstrap, b.bootstrap, f"base{run}", n))
            for i, (name, (processes, extra, tree, mirror_args)) in enumerate(cases.items()):
                topic = f"data{run}-{i}"
                create(a.bootstrap, topic)
                fill(a.bootstrap, topic, n)
                total, steady, cpu = mirrored(
                    a.bootstrap, b.bootstrap, workdir, topic, n, processes, extra, tree, mirror_args
                )
                figures[name].append((n / total, steady, cpu))
        kib = len(VALUE) / 1e6
        b_rate = statistics.median(base)
        print(f"{n:,} records of 1 KiB, {PARTITIONS} partitions, medians of {args.runs} runs")
        print(f"baseline consume-produce loop: {b_rate:,.0f} records/s ({b_rate * kib:.1f} MB/s)")
        for name, runs in figures.items():
            total = statistics.median(r[0] for r in runs)
            steady = statistics.median(r[1] for r in runs)
            cpu = statistics.median(r[2] for r in runs)
            if "exactly once" in name:  # B's stable offset moves a transaction at a time
                print(
                    f"{name}: {total:,.0f} records/s ({total * kib:.1f} MB/s) start-up "
                    f"included: {total / b_rate:.2f}x the baseline"
                )
                continue
            print(
                f"{name}: {total:,.0f} records/s ({total * kib:.1f} MB/s) start-up included, "
                f"steady {steady:,.0f} records/s ({steady * kib:.1f} MB/s): "
                f"{total / b_rate:.2f}x / {steady / b_rate:.2f}x the baseline; "
                f"mirror CPU {cpu:.2f} us per record"
            )
        for label, tree in trees if args.latency_seconds else []:
            p50, p99 = latency(a.bootstrap, b.bootstrap, workdir, args.latency_seconds, tree)
            print(
                f"{label}replication latency at 1,000 records/s: p50 {p50:.1f} ms, p99 {p99:.1f} ms"
            )


if __name__ == "__main__":
    main()
