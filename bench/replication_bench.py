"""Produce throughput on a 3-process gregor cluster: replication factor 1 vs 3, acks=1 vs
acks=all, side by side in one run (one cluster, one topic per replication factor, one
partition each, led by the same broker).

    PYTHONPATH=. python3 bench/replication_bench.py --records 200000 --size 100 --batch-size 16384

Each case produces `--records` records of `--size` bytes with one confluent-kafka producer
(linger.ms 5, batch.size `--batch-size`: 16 KiB as Java's default, so the broker sees many
requests; idempotence off) and waits for every delivery report; the figures are records/s
and MB/s from the first produce to the last report. The cluster shares this machine's cores
with the client, so the figures compare the cases; they are not absolute.
"""

from __future__ import annotations

import argparse
import sys
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.testing.cluster import LocalCluster


def create(bootstrap: str, name: str, replicas: list[int]) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
    for _ in range(5):
        try:
            spec = NewTopic(
                name,
                1,
                replica_assignment=[replicas],
                config={"min.insync.replicas": "2" if len(replicas) > 1 else "1"},
            )
            client.create_topics([spec], operation_timeout=10, request_timeout=10)[name].result(15)
            return
        except KafkaException:
            time.sleep(1)
    raise RuntimeError(f"could not create {name}")


def run(
    bootstrap: str, topic: str, acks: str, records: int, size: int, batch: int
) -> tuple[float, int]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": batch,
            "enable.idempotence": False,
        }
    )
    value = b"x" * size
    failed = 0

    def report(err: object, _msg: object) -> None:
        nonlocal failed
        failed += err is not None

    producer.produce(topic, value=value, partition=0)  # warm-up: metadata and connection
    producer.flush(30)
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=0, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    return time.perf_counter() - start, failed


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=20000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=16384)
    args = p.parse_args()
    with LocalCluster(3, log_level="WARNING") as cluster:
        cluster.active_controller()
        time.sleep(2)  # every broker registered and unfenced
        create(cluster.bootstrap, "rf1", [1])
        create(cluster.bootstrap, "rf3", [1, 2, 3])
        time.sleep(2)  # followers started
        print(
            f"{args.records} records of {args.size} bytes, batch.size {args.batch_size}, "
            "one partition led by broker 1"
        )
        print(f"{'case':<18}{'records/s':>12}{'MB/s':>8}{'failed':>8}")
        for topic in ("rf1", "rf3"):
            for acks in ("1", "all"):
                took, failed = run(
                    cluster.bootstrap, topic, acks, args.records, args.size, args.batch_size
                )
                rate = args.records / took
                mb = rate * args.size / 1e6
                print(
                    f"{topic + ' acks=' + acks:<18}{rate:>12.0f}{mb:>8.2f}{failed:>8}", flush=True
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
