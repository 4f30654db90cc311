#!/usr/bin/env python
"""confluent-kafka workloads for bench/broker_bench.py, each run as its own process.

    python bench/kclient.py create   --bootstrap H:P --topic T --partitions N
    python bench/kclient.py produce  --bootstrap H:P --topic T --partitions N --size B --count N [--max-seconds S]
                                     [--acks A] [--batch-size B] [--topic-count K] [--warmup-each] [--start-at EPOCH]
    python bench/kclient.py consume  --bootstrap H:P --topic T --partitions N --count N [--assign 0,1]
    python bench/kclient.py latency-consumer --bootstrap H:P --topic T --expect N
    python bench/kclient.py latency-producer --bootstrap H:P --topic T --rate R --seconds S [--warmup S]

Each prints one JSON object on stdout (the latency consumer prints "ready" first, once it has
its assignment, and its JSON when done).

produce: acks=1, linger.ms=5, no compression, no idempotence (librdkafka's default), records
of `--size` bytes (`--vary`: 0.5 to 1.5 times that, cycling through 1,009 sizes) with no key,
sent round-robin over the partitions by explicit partition number (so every partition gets an
equal share whatever the partitioner), `produce()` in a
tight loop with `poll(0)` every 1,000 records (and on BufferError until there is room).
Delivery reports only for errors (`delivery.report.only.error`), counted by a callback. The
clock starts at the first produce() (after a metadata round trip, so the connection is up) and
stops when flush() returns: every record acknowledged. `--acks` (default 1) sets acks,
`--batch-size` batch.size.
`--topic-count K`: the records go round-robin over every partition of K topics named T-0 ..
T-(K-1), `--partitions` each. `--warmup-each`: before the clock, one record to every partition,
flushed (each partition's first append and the client's per-partition state are not the figure).
`--start-at EPOCH`: after the warm-up, wait until that wall-clock time (time.time()) to start,
so that several producer processes run at once; the output carries the wall-clock start and end
(`wall_start`, `wall_end`) for an aggregate rate over all of them.

consume: assign() every partition at offset 0 (no group membership, no commits), consume(10000,
1.0) until `--count` records arrived (each checked for an error, nothing else done with it);
the clock starts at assign() (after a metadata round trip); `--assign 0,2` takes only those
partitions (and `--start-at` as for produce). fetch.queue.backoff.ms=10 (see
below); librdkafka defaults otherwise (fetch.max.bytes 50 MB, max.partition.fetch.bytes 1 MiB,
queued.min.messages 100,000).

latency: the producer sends `--rate` records/s (100-byte values that carry
time.monotonic_ns() of the send, a sequence number and a warm-up flag) with linger.ms=0,
acks=1 (`--acks`), on a fixed schedule; after `--warmup` seconds of records the consumer ignores, it sends
`--seconds` worth of measured ones. The consumer (another process) starts at the partition's
end (records written before it, say by a throughput run on the same topic, would otherwise be
read first and delay the first measured ones), calls poll(1.0) with
fetch.wait.max.ms=100 and records monotonic_ns() - sent for each measured record
(CLOCK_MONOTONIC is one clock for the whole machine). The producer also reports its
acknowledgement latency (send to delivery callback; the callback is served by poll()).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import struct
import sys
import time
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def create(args: argparse.Namespace) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    futures = admin.create_topics(
        [NewTopic(args.topic, num_partitions=args.partitions, replication_factor=1)],
        operation_timeout=30,
    )
    for _, f in futures.items():
        f.result(30)
    # Wait until the topic's metadata shows every partition with a leader.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(args.topic, timeout=10)
        t = md.topics.get(args.topic)
        if (
            t is not None
            and t.error is None
            and len(t.partitions) == args.partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        ):
            return {"kind": "create", "topic": args.topic, "partitions": args.partitions}
        time.sleep(0.05)
    raise RuntimeError(f"topic {args.topic} not ready after 30 s")


def produce(args: argparse.Namespace) -> dict[str, Any]:
    errors = [0]
    first_error: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1
            if not first_error:
                first_error.append(str(err))

    p = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "acks": args.acks,
            "linger.ms": 5,
            "compression.type": "none",
            "enable.idempotence": False,
            "delivery.report.only.error": True,
            "on_delivery": on_delivery,
            **({"batch.size": args.batch_size} if args.batch_size else {}),
        }
    )
    value = b"x" * args.size
    sizes = random.Random(0).choices(range(args.size // 2, args.size * 3 // 2 + 1), k=1009)
    values = [value[:1] * n for n in sizes] if args.vary else [value]
    parts, count = args.partitions, args.count
    topics = (
        [f"{args.topic}-{i}" for i in range(args.topic_count)] if args.topic_count else [args.topic]
    )
    if len(topics) == 1:
        p.list_topics(topics[0], timeout=10)
    else:
        p.list_topics(timeout=30)
    targets = [(t, i) for i in range(parts) for t in topics]  # partition 0 of every topic first
    warmup_s, warmup_left = 0.0, 0
    if args.warmup_each:
        w0 = time.perf_counter()
        for t, i in targets:
            _produce_retrying(p, t, value, i)
        warmup_left = p.flush(max(120.0, args.max_seconds))
        warmup_s = time.perf_counter() - w0
    if args.start_at:
        time.sleep(max(0.0, args.start_at - time.time()))
    wall_start = time.time()
    deadline = time.perf_counter() + args.max_seconds
    c0 = cpu_self()
    t0 = time.perf_counter()
    sent = 0
    produce_ = p.produce
    poll = p.poll
    n_targets = len(targets)
    while sent < count:
        topic, part = targets[sent % n_targets]
        try:
            produce_(topic, values[sent % len(values)], partition=part)
        except BufferError:
            poll(0.0005)
            continue
        sent += 1
        if sent % 1000 == 0:
            poll(0)
            if time.perf_counter() > deadline:
                break
    t_enqueued = time.perf_counter() - t0
    left = p.flush(120)
    seconds = time.perf_counter() - t0
    out = {
        "kind": "client-produce",
        "records": sent,
        "size": args.size,
        "partitions": parts * len(topics),
        "wall_start": wall_start,
        "wall_end": wall_start + seconds,
        "seconds": seconds,
        "enqueue_seconds": t_enqueued,
        "records_per_s": sent / seconds,
        "mb_per_s": sent * args.size / seconds / 1e6,
        "errors": errors[0],
        "client_cpu_s": cpu_self() - c0,
    }
    if args.warmup_each:
        out.update(warmup_seconds=warmup_s, warmup_unflushed=warmup_left)
    if left or errors[0]:
        out["error"] = (
            f"{left} records not flushed, {errors[0]} delivery errors ({first_error[:1]})"
        )
    return out


def _produce_retrying(p: Any, topic: str, value: bytes, partition: int) -> None:
    while True:
        try:
            p.produce(topic, value, partition=partition)
            return
        except BufferError:
            p.poll(0.01)


def consume(args: argparse.Namespace) -> dict[str, Any]:
    c = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"bench-{args.topic}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            # librdkafka >= 2.x waits fetch.queue.backoff.ms (1000 ms by default) before fetching
            # again once queued.min.messages (100,000) are queued: with a fast broker the
            # consumer then idles for most of a second at a time, and the figure measures that
            # timer, not the broker. 10 ms keeps the consumer fed (its documented remedy).
            "fetch.queue.backoff.ms": 10,
        }
    )
    c.list_topics(args.topic, timeout=10)
    assigned = (
        [int(x) for x in args.assign.split(",")] if args.assign else list(range(args.partitions))
    )
    if args.start_at:
        time.sleep(max(0.0, args.start_at - time.time()))
    wall_start = time.time()
    c0 = cpu_self()
    t0 = time.perf_counter()
    c.assign([TopicPartition(args.topic, i, 0) for i in assigned])
    n = 0
    last_progress = time.perf_counter()
    t_last = t0
    first_error = None
    while n < args.count:
        # consume(n, timeout) waits for n messages or the timeout: never ask for more than are
        # left, or the last call idles its whole second inside the clock
        msgs = c.consume(min(10000, args.count - n), 1.0)
        now = time.perf_counter()
        if msgs:
            last_progress = now
        elif now - last_progress > args.stall_seconds:
            break
        for m in msgs:
            if m.error() is None:
                n += 1
            elif first_error is None:
                first_error = str(m.error())
        if msgs:
            t_last = now
    seconds = t_last - t0
    c.close()
    out = {
        "kind": "client-consume",
        "records": n,
        "partitions": len(assigned),
        "wall_start": wall_start,
        "wall_end": wall_start + seconds,
        "seconds": seconds,
        "records_per_s": n / seconds if seconds > 0 else None,
        "mb_per_s": n * args.size / seconds / 1e6 if seconds > 0 else None,
        "client_cpu_s": cpu_self() - c0,
    }
    if n < args.count:
        out["error"] = f"consumed {n} of {args.count} records ({first_error})"
    return out


_LAT = struct.Struct(">qqb")  # sent monotonic_ns, sequence, warm-up flag


def pct(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    i = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[i]


def latency_consumer(args: argparse.Namespace) -> dict[str, Any]:
    c = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"bench-lat-{args.topic}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": 100,
            "auto.offset.reset": "earliest",
        }
    )
    c.list_topics(args.topic, timeout=10)
    c.assign([TopicPartition(args.topic, 0, OFFSET_END)])
    print("ready", flush=True)
    lat_ns: list[int] = []
    seen = 0
    deadline = time.monotonic() + args.timeout
    while len(lat_ns) < args.expect and time.monotonic() < deadline:
        m = c.poll(1.0)
        now = time.monotonic_ns()
        if m is None or m.error() is not None:
            continue
        seen += 1
        sent, _seq, warm = _LAT.unpack_from(m.value(), 0)
        if not warm:
            lat_ns.append(now - sent)
    c.close()
    ms = sorted(x / 1e6 for x in lat_ns)
    out = {
        "kind": "client-latency",
        "received": len(ms),
        "expected": args.expect,
        "p50_ms": pct(ms, 0.50),
        "p99_ms": pct(ms, 0.99),
        "p999_ms": pct(ms, 0.999),
        "max_ms": ms[-1] if ms else float("nan"),
        "mean_ms": sum(ms) / len(ms) if ms else float("nan"),
    }
    if len(ms) < args.expect:
        out["error"] = f"received {len(ms)} of {args.expect} measured records"
    return out


def latency_producer(args: argparse.Namespace) -> dict[str, Any]:
    acks: list[int] = []
    errors = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1
            return
        _sent, _seq, warm = _LAT.unpack_from(msg.value(), 0)
        if not warm:  # produce() to the broker's answer, as librdkafka timed it (not our poll)
            acks.append(int(msg.latency() * 1e9))

    p = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "acks": args.acks,
            "linger.ms": 0,
            "compression.type": "none",
            "enable.idempotence": False,
            "on_delivery": on_delivery,
        }
    )
    p.list_topics(args.topic, timeout=10)
    pad = bytearray(max(args.size, _LAT.size))
    interval = 1.0 / args.rate
    n_warm = int(args.warmup * args.rate)
    n_total = n_warm + int(args.seconds * args.rate)
    t0 = time.monotonic() + 0.01
    late = 0
    for i in range(n_total):
        due = t0 + i * interval
        while True:
            left = due - time.monotonic()
            if left <= 0:
                break
            if left >= 0.001:
                p.poll(left)  # serves delivery callbacks while waiting
            else:  # poll() truncates a timeout to whole ms: 0 would spin, taking a core
                time.sleep(left)
        if -left > interval:
            late += 1
        _LAT.pack_into(pad, 0, time.monotonic_ns(), i, 1 if i < n_warm else 0)
        p.produce(args.topic, bytes(pad), partition=0)
        p.poll(0)
    elapsed = time.monotonic() - t0
    p.flush(30)
    ms = sorted(x / 1e6 for x in acks)
    return {
        "kind": "client-latency-producer",
        "sent": n_total,
        "measured": n_total - n_warm,
        "rate_achieved": n_total / elapsed,
        "late_sends": late,
        "ack_p50_ms": pct(ms, 0.50),
        "ack_p99_ms": pct(ms, 0.99),
        "ack_max_ms": ms[-1] if ms else float("nan"),
        "errors": errors[0],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("create")
    p.add_argument("--partitions", type=int, default=1)
    p = sub.add_parser("produce")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--max-seconds", type=float, default=60.0)
    p.add_argument("--vary", action="store_true", help="values of 0.5 to 1.5 times --size")
    p.add_argument("--acks", default="1")
    p.add_argument("--batch-size", type=int, default=0, help="batch.size (default librdkafka's)")
    p.add_argument("--topic-count", type=int, default=0, help="K topics named T-0 .. T-(K-1)")
    p.add_argument("--warmup-each", action="store_true", help="one record per partition first")
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock time to start at")
    p = sub.add_parser("consume")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--size", type=int, default=100, help="record value size (for MB/s)")
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--stall-seconds", type=float, default=15.0)
    p.add_argument("--assign", default="", help="only these partitions (comma-separated)")
    p.add_argument("--start-at", type=float, default=0.0, help="wall-clock time to start at")
    p = sub.add_parser("latency-consumer")
    p.add_argument("--expect", type=int, required=True)
    p.add_argument("--timeout", type=float, default=60.0)
    p = sub.add_parser("latency-producer")
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--acks", default="1")
    for sp in sub.choices.values():
        sp.add_argument("--bootstrap", required=True)
        sp.add_argument("--topic", required=True)
    args = ap.parse_args(argv)
    fn = {
        "create": create,
        "produce": produce,
        "consume": consume,
        "latency-consumer": latency_consumer,
        "latency-producer": latency_producer,
    }[args.cmd]
    try:
        out = fn(args)
    except (KafkaException, RuntimeError, OSError) as exc:
        out = {"kind": args.cmd, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out), flush=True)
    return 0 if "error" not in out else 1


if __name__ == "__main__":
    sys.exit(main())
