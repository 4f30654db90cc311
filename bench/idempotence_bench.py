#!/usr/bin/env python
"""What idempotence costs: produce throughput with enable.idempotence on and off, same run.

    python bench/idempotence_bench.py            # 300,000 records of 100 B per run, 3 runs each
    python bench/idempotence_bench.py --quick    # a smoke run (seconds)
    python bench/idempotence_bench.py --records 1000000 --size 1000 --runs 5

Prints figures; asserts nothing about time.

1. Broker: one gregor.Broker (a child process, data in a temp dir), a topic of `--partitions`
   partitions, and a confluent-kafka producer per run sending `--records` records of `--size`
   bytes round-robin over the partitions, acks=all in every mode (idempotence requires it),
   linger.ms 5, compression none. Modes: off; off-5 (off, with librdkafka's in-flight cap for
   idempotent producers, 5 requests per connection); on. Runs rotate off, off-5, on, off, ...
   on fresh topics, so drift (page cache, CPU frequency) falls on all alike. Time is from the
   first produce() to the end of flush().
2. Storage: `Log.append` of one prebuilt batch per call (10 records of 100 B, and 100 of 1 KiB)
   into a temp dir, plain batches against idempotent ones (producer id, epoch, sequence; the
   checks, the state update and a snapshot at each roll), alternating, best of `--runs`: the
   per-append cost of the checks, without the network and the client.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from gregor import Broker  # noqa: E402
from gregor.protocol.records.records import build_batch  # noqa: E402
from gregor.storage.config import LogConfig  # noqa: E402
from gregor.storage.log import Log  # noqa: E402

POOL_BUDGET = 256 << 20


# mode -> producer settings. librdkafka caps an idempotent producer at 5 requests in flight
# per connection (its default is 1,000,000): "off-5" isolates that from the broker's checks.
MODES = {
    "off": {"enable.idempotence": False},
    "off-5": {"enable.idempotence": False, "max.in.flight.requests.per.connection": 5},
    "on": {"enable.idempotence": True},
}


def produce_run(
    bootstrap: str, topic: str, records: int, size: int, partitions: int, mode: str
) -> float:
    """Seconds to produce and flush `records` records."""
    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "none",
            "queue.buffering.max.messages": 1_000_000,
            **MODES[mode],
        }
    )
    p.list_topics(topic, timeout=10)  # connect and learn the leaders before timing
    payload = b"x" * size
    errors: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, payload, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.001)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(300)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise RuntimeError(f"{left} undelivered, {len(errors)} errors: {errors[:3]}")
    return elapsed


def broker_bench(args: argparse.Namespace) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    with Broker(config={"num.partitions": str(args.partitions)}, log_level="WARNING") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        # A warm-up run of each, not counted (connections, code paths, page cache).
        warm = max(args.records // 10, 1000)
        for i in range(args.runs + 1):
            for mode in MODES:
                topic = f"bench-{mode}-{i}"
                admin.create_topics([NewTopic(topic, args.partitions, 1)], request_timeout=30)[
                    topic
                ].result()
                n = warm if i == 0 else args.records
                secs = produce_run(broker.bootstrap, topic, n, args.size, args.partitions, mode)
                if i == 0:
                    continue
                rates[mode].append(n / secs)
                print(
                    f"  run {i} idempotence {mode:5}: {n / secs:>10,.0f} records/s  {n * args.size / secs / 1e6:7.1f} MB/s"
                )
    return rates


def storage_bench(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Best of `--runs` alternating runs per mode (the machine may be shared: the best run is
    the one least disturbed)."""
    out: dict[str, dict[str, float]] = {}
    cases = [("10 x 100 B", 10, 100), ("100 x 1 KiB", 100, 1024)]
    for label, count, size in cases:
        records = [(b"key", b"v" * size)] * count
        # Idempotent batches need a new sequence each, so every batch is built ahead (as many
        # as fit in POOL_BUDGET), plain ones too: the same memory traffic.
        n = max(100, min(args.appends, POOL_BUDGET // len(build_batch(records))))
        pools = {
            "plain": [build_batch(records, base_timestamp=1) for _ in range(n)],
            "idempotent": [
                build_batch(
                    records,
                    base_timestamp=1,
                    producer_id=1000,
                    producer_epoch=0,
                    base_sequence=i * count,
                )
                for i in range(n)
            ],
        }
        best = dict.fromkeys(pools, 0.0)
        for _run in range(max(args.runs, 1)):
            for mode, pool in pools.items():
                d = tempfile.mkdtemp(prefix="gregor-idem-bench-")
                try:
                    log = Log.open(
                        os.path.join(d, "t-0"), LogConfig(segment_bytes=64 << 20), now_ms=0
                    )
                    start = time.perf_counter()
                    for batch in pool:
                        log.append(batch, now_ms=1)
                    secs = time.perf_counter() - start
                    log.close()
                finally:
                    shutil.rmtree(d, ignore_errors=True)
                best[mode] = max(best[mode], n / secs)
        out[label] = best
        for mode, rate in best.items():
            print(f"  {label:12} {mode:10}: {rate:>10,.0f} appends/s  ({1e6 / rate:5.1f} us each)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--appends", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.records, args.runs, args.appends = 20_000, 1, 5_000
    print(
        f"gregor idempotence bench: python {platform.python_version()}, confluent-kafka "
        f"{ck.version()[0]} / librdkafka {ck.libversion()[0]}, {os.cpu_count()} CPUs"
    )
    print(
        f"broker: {args.records:,} records of {args.size} B over {args.partitions} partitions, acks=all"
    )
    rates = broker_bench(args)
    med = {mode: statistics.median(r) for mode, r in rates.items()}
    print("  median: " + ", ".join(f"{mode} {r:,.0f} records/s" for mode, r in med.items()))
    print(
        f"  on / off = {med['on'] / med['off']:.3f}x (the client's in-flight cap and the checks); "
        f"on / off-5 = {med['on'] / med['off-5']:.3f}x (the broker's checks)"
    )
    print(f"storage: Log.append, up to {args.appends:,} appends per case, best of {args.runs}")
    st = storage_bench(args)
    for label, r in st.items():
        print(f"  {label}: idempotent appends at {r['idempotent'] / r['plain']:.3f}x of plain")


if __name__ == "__main__":
    main()
