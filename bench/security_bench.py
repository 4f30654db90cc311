#!/usr/bin/env python
"""Produce and fetch throughput, and the broker's CPU per MB, for PLAINTEXT, SSL and SASL_SSL
listeners side by side, through confluent-kafka.

    python bench/security_bench.py                    # 200,000 records of 1 KiB, 3 runs
    python bench/security_bench.py --records 50000 --runs 1

Each protocol gets a fresh broker (certificates made for the run, PLAIN users in its JAAS
config), a fresh topic of 1 partition, then: produce N records (acks=1, linger.ms=5) and flush;
consume them from the start with one consumer (no group). Figures: MB/s of payload, and the
broker's CPU seconds (utime+stime from /proc/<pid>/stat) per 100 MB of payload for each phase;
medians over runs. TLS fetches are copied through the SSL object (no kernel TLS in Python
3.11's ssl), plaintext ones go out with sendfile.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import confluent_kafka as ck

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "security"))
from security_certs import make_pki  # noqa: E402

from gregor import Broker  # noqa: E402

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="bench-secret";'


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_and_client(protocol: str, pki_dir: Path) -> tuple[dict[str, str], dict[str, object]]:
    pki = make_pki(pki_dir)
    server: dict[str, str] = {"listeners": f"{protocol}://127.0.0.1:0"}
    client: dict[str, object] = {"security.protocol": protocol}
    if protocol.endswith("SSL"):
        server["ssl.keystore.location"] = str(pki.server)
        client["ssl.ca.location"] = str(pki.ca)
    if protocol.startswith("SASL"):
        server.update({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS})
        client.update(
            {"sasl.mechanism": "PLAIN", "sasl.username": "bench", "sasl.password": "bench-secret"}
        )
    return server, client


def run_once(protocol: str, records: int, size: int, base: Path) -> dict[str, float]:
    server, client = broker_and_client(protocol, base / "pki")
    payload = os.urandom(size)
    mb = records * size / 1e6
    (base / "broker").mkdir(parents=True)
    with Broker(server, data_dir=str(base / "broker")) as broker:
        assert broker.process is not None
        pid = broker.process.pid
        conf = {**client, "bootstrap.servers": broker.bootstrap}
        producer = ck.Producer({**conf, "acks": 1, "linger.ms": 5})
        producer.produce("bench", b"warm-up", partition=0)
        producer.flush(30)
        cpu0, t0 = cpu_s(pid), time.perf_counter()
        for _ in range(records):
            while True:
                try:
                    producer.produce("bench", payload, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
        assert producer.flush(120) == 0
        produce_s, produce_cpu = time.perf_counter() - t0, cpu_s(pid) - cpu0
        consumer = ck.Consumer(
            {**conf, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800}
        )
        consumer.assign([ck.TopicPartition("bench", 0, ck.OFFSET_BEGINNING)])
        cpu0, t0, got = cpu_s(pid), time.perf_counter(), 0
        while got < records + 1:
            for msg in consumer.consume(10000, 1.0):
                if msg.error() is None:
                    got += 1
        fetch_s, fetch_cpu = time.perf_counter() - t0, cpu_s(pid) - cpu0
        consumer.close()
    return {
        "produce MB/s": mb / produce_s,
        "fetch MB/s": mb / fetch_s,
        "produce CPU s/100MB": produce_cpu / mb * 100,
        "fetch CPU s/100MB": fetch_cpu / mb * 100,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    protocols = ("PLAINTEXT", "SSL", "SASL_SSL")
    results: dict[str, list[dict[str, float]]] = {p: [] for p in protocols}
    with tempfile.TemporaryDirectory(prefix="gregor-security-bench-") as tmp:
        for run in range(args.runs):
            for protocol in protocols:
                base = Path(tmp) / f"run{run}-{protocol}"
                results[protocol].append(run_once(protocol, args.records, args.size, base))
    print(f"{args.records} records of {args.size} B, 1 partition, medians of {args.runs} run(s)")
    keys = list(results[protocols[0]][0])
    print(f"{'':12}" + "".join(f"{k:>22}" for k in keys))
    for protocol in protocols:
        row = [statistics.median(r[k] for r in results[protocol]) for k in keys]
        print(f"{protocol:12}" + "".join(f"{v:>22.2f}" for v in row))


if __name__ == "__main__":
    main()
