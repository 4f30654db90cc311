#!/usr/bin/env python
"""Transactional throughput, and what idempotence costs, in one run against one broker.

    python bench/txn_bench.py              # full run (a minute or two)
    python bench/txn_bench.py --quick      # a smoke run (seconds)
    python bench/txn_bench.py --out bench/results/txn-DATE   # also write .md and .json

Prints figures; asserts nothing about time.

1. Transactions: a confluent-kafka transactional producer runs begin / produce N records of
   `--size` bytes over `--partitions` partitions / commit, for N = 10 and N = 1,000, timed from
   the first begin_transaction() to the last commit_transaction(). Each commit is a round trip
   to the coordinator, which appends PrepareCommit, writes a marker to every partition of the
   transaction and appends CompleteCommit before the next transaction can start.
2. Idempotence: `--records` records of `--size` bytes, acks=all, linger.ms 5, idempotence off
   and on, alternating `--runs` times on fresh topics so drift falls on both alike; each
   producer sends and flushes one record before the clock starts (librdkafka's first
   InitProducerId otherwise adds a fixed ~0.5 s to the idempotent runs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from gregor import Broker  # noqa: E402


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(30)


def txn_run(
    bootstrap: str, topic: str, per_txn: int, txns: int, size: int, partitions: int
) -> dict[str, float]:
    p = ck.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "linger.ms": 5}
    )
    p.init_transactions(30)
    value = b"x" * size
    start = time.perf_counter()
    for t in range(txns):
        p.begin_transaction()
        for i in range(per_txn):
            p.produce(topic, value=value, partition=(t * per_txn + i) % partitions)
            if i % 10_000 == 9_999:
                p.poll(0)
        p.commit_transaction(60)
    elapsed = time.perf_counter() - start
    return {
        "records_per_txn": per_txn,
        "transactions": txns,
        "seconds": elapsed,
        "txn_per_s": txns / elapsed,
        "records_per_s": txns * per_txn / elapsed,
        "mb_per_s": txns * per_txn * size / elapsed / 1e6,
    }


def produce_run(
    bootstrap: str, topic: str, records: int, size: int, partitions: int, idempotent: bool
) -> float:
    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "enable.idempotence": idempotent,
        }
    )
    value = b"x" * size
    # Warm up: an idempotent producer's first InitProducerId waits for a broker connection
    # (librdkafka retries it after 500 ms), a fixed cost that is not throughput.
    p.produce(topic, value=value, partition=0)
    p.flush(30)
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    return records / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", help="write <out>.md and <out>.json")
    args = ap.parse_args()
    plans = [(10, 500), (1000, 50)]
    if args.quick:
        plans = [(10, 50), (1000, 5)]
        args.records, args.runs = 20_000, 1

    results: dict[str, object] = {
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
        "librdkafka": ck.libversion()[0],
        "size": args.size,
        "partitions": args.partitions,
    }
    with Broker(
        config={"transaction.state.log.num.partitions": "5", "offsets.topic.num.partitions": "5"}
    ) as broker:
        bs = broker.bootstrap
        txn_rows = []
        for per_txn, txns in plans:
            topic = f"txn-{per_txn}"
            create(bs, topic, args.partitions)
            txn_run(bs, topic, per_txn, max(2, txns // 10), args.size, args.partitions)  # warm up
            row = txn_run(bs, topic, per_txn, txns, args.size, args.partitions)
            txn_rows.append(row)
            print(
                f"transactions of {per_txn:>5} records: {row['txn_per_s']:8.1f} txn/s "
                f"{row['records_per_s']:10.0f} records/s {row['mb_per_s']:6.2f} MB/s"
            )
        results["transactions"] = txn_rows

        figures: dict[str, list[float]] = {"off": [], "on": []}
        for run in range(args.runs):
            for mode in ("off", "on"):
                topic = f"idem-{mode}-{run}"
                create(bs, topic, args.partitions)
                figures[mode].append(
                    produce_run(bs, topic, args.records, args.size, args.partitions, mode == "on")
                )
        off, on = statistics.median(figures["off"]), statistics.median(figures["on"])
        results["idempotence"] = {
            "records": args.records,
            "off": figures["off"],
            "on": figures["on"],
            "on_vs_off": on / off,
        }
        print(
            f"produce {args.records} x {args.size} B, idempotence off: {off:10.0f} records/s (median of {args.runs})"
        )
        print(
            f"produce {args.records} x {args.size} B, idempotence on:  {on:10.0f} records/s ({on / off:.2f}x of off)"
        )

    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump(results, f, indent=2)
        with open(args.out + ".md", "w") as f:
            f.write(
                f"# Transactions and idempotence ({results['machine']}, librdkafka {results['librdkafka']})\n\n"
            )
            f.write(
                f"{args.size} B records over {args.partitions} partitions, one gregor broker.\n\n"
            )
            f.write(
                "| records per transaction | transactions | txn/s | records/s | MB/s |\n|---|---|---|---|---|\n"
            )
            for r in txn_rows:
                f.write(
                    f"| {r['records_per_txn']} | {r['transactions']} | {r['txn_per_s']:.1f} | "
                    f"{r['records_per_s']:.0f} | {r['mb_per_s']:.2f} |\n"
                )
            f.write(f"\n| produce, acks=all | records/s (median of {args.runs}) |\n|---|---|\n")
            f.write(
                f"| idempotence off | {off:.0f} |\n| idempotence on | {on:.0f} ({on / off:.2f}x) |\n"
            )


if __name__ == "__main__":
    main()
