"""kcat (Debian's, linking the older librdkafka 2.0.2) against a real gregor broker: produce
lines with `-K:` keys and `-H` headers, consume with `-C -e -f`, metadata with `-L -J`,
offsets by time with `-Q`; and cross-client with confluent-kafka and aiokafka."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time

import confluent_kafka as ck
import pytest
from client_helpers import Rec, check_exact, consume_confluent, ensure_topic

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
# Fields separated by a byte no test value contains; %K/%S are key/value lengths (-1 = null).
FORMAT = "%p\x1f%o\x1f%K\x1f%k\x1f%S\x1f%s\x1f%h\x1f%T\x1e"
BASE_TS = 1_620_000_000_000


def kcat(*args: str, input: bytes | None = None, timeout: float = 60) -> str:
    assert KCAT, "kcat is not installed (apt-get install kcat)"
    r = subprocess.run([KCAT, *args], input=input, capture_output=True, timeout=timeout)
    assert r.returncode == 0, (
        f"kcat {' '.join(args)} exited {r.returncode}: {r.stderr.decode(errors='replace')}"
    )
    return r.stdout.decode()


def kcat_produce(
    bootstrap: str,
    topic: str,
    partition: int,
    lines: list[str],
    headers: list[tuple[str, str]],
    codec: str = "none",
) -> None:
    args = ["-b", bootstrap, "-P", "-t", topic, "-p", str(partition), "-K:", "-z", codec]
    for k, v in headers:
        args += ["-H", f"{k}={v}"]
    kcat(*args, input="".join(line + "\n" for line in lines).encode())


def parse_headers(text: str) -> list[tuple[str, bytes | None]]:
    if not text:
        return []
    out = []
    for item in text.split(","):
        k, _, v = item.partition("=")
        out.append((k, v.encode()))
    return out


def kcat_consume(bootstrap: str, topic: str, partitions: list[int], expect: int) -> list[Rec]:
    out: list[Rec] = []
    for p in partitions:
        # -e ends at the first empty fetch; a short fetch wait keeps that quick.
        text = kcat(
            "-b",
            bootstrap,
            "-C",
            "-t",
            topic,
            "-p",
            str(p),
            "-o",
            "beginning",
            "-e",
            "-f",
            FORMAT,
            "-X",
            "fetch.wait.max.ms=100",
        )
        for rec in text.split("\x1e"):
            if not rec.strip("\n"):
                continue
            part, off, klen, key, vlen, value, hdrs, ts = rec.split("\x1f")
            out.append(
                Rec(
                    int(part),
                    int(off),
                    None if int(klen) < 0 else key.encode(),
                    None if int(vlen) < 0 else value.encode(),
                    parse_headers(hdrs),
                    int(ts),
                )
            )
    assert len(out) == expect, f"kcat read {len(out)} records, expected {expect}"
    return out


def kcat_lines(n: int, tag: str) -> tuple[list[str], list[tuple[bytes | None, bytes]]]:
    """Lines for `-K:` and what each becomes: a key before the first ':', an empty key for a
    leading ':', no key without a ':'; the value may contain ':'."""
    lines, parsed = [], []
    for i in range(n):
        if i % 10 == 3:
            line, key, value = f"{tag}-nokey-{i}", None, f"{tag}-nokey-{i}"
        elif i % 10 == 7:
            line, key, value = f":{tag}-empty-key-{i}", b"", f"{tag}-empty-key-{i}"
        else:
            value = f"{tag}:value:{i}:" + "x" * (i % 50)
            line, key = f"k{i}:{value}", f"k{i}".encode()
        lines.append(line)
        parsed.append((key, value.encode()))
    return lines, parsed


@pytest.mark.parametrize("codec", ["none", "snappy", "gzip"])
def test_kcat_roundtrip(bootstrap: str, topic: str, codec: str) -> None:
    ensure_topic(bootstrap, topic)
    headers = [("source", "kcat"), ("codec", codec), ("source", "dup")]
    expected: dict[int, list] = {}
    t0 = int(time.time() * 1000)
    for p in (0, 2):
        lines, parsed = kcat_lines(300, f"p{p}")
        kcat_produce(bootstrap, topic, p, lines, headers, codec)
        expected[p] = [(k, v, [(h, v2.encode()) for h, v2 in headers]) for k, v in parsed]
    t1 = int(time.time() * 1000)
    got = kcat_consume(bootstrap, topic, [0, 1, 2, 3], 600)
    # kcat cannot set timestamps: they are librdkafka's CreateTime, within the produce window.
    assert all(t0 - 1000 <= r.timestamp <= t1 + 1000 for r in got)
    by_ts = {(r.partition, r.offset): r.timestamp for r in got}
    check_exact(
        got, {p: [(*e, by_ts[(p, i)]) for i, e in enumerate(exp)] for p, exp in expected.items()}
    )
    # The same bytes through another client.
    again = consume_confluent(bootstrap, topic, [0, 2], 600)
    assert sorted(again) == sorted(got)


def test_confluent_to_kcat(bootstrap: str, topic: str) -> None:
    ensure_topic(bootstrap, topic)
    p = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 5})
    expected: dict[int, list] = {0: [], 1: [], 2: [], 3: []}
    for i in range(800):
        part = i % 4
        key = None if i % 9 == 0 else b"ck%d" % i
        value = b"from-confluent-%d" % i
        hdrs = [] if i % 5 == 0 else [("i", b"%d" % i), ("z", b"zz")]
        p.produce(topic, key=key, value=value, headers=hdrs, partition=part, timestamp=BASE_TS + i)
        expected[part].append((key, value, hdrs, BASE_TS + i))
    assert p.flush(30) == 0
    check_exact(kcat_consume(bootstrap, topic, [0, 1, 2, 3], 800), expected)


def test_kcat_to_confluent(bootstrap: str, topic: str) -> None:
    ensure_topic(bootstrap, topic)
    lines, parsed = kcat_lines(500, "k2c")
    t0 = int(time.time() * 1000)
    kcat_produce(bootstrap, topic, 1, lines, [("from", "kcat")], "lz4")
    t1 = int(time.time() * 1000)
    got = consume_confluent(bootstrap, topic, [1], 500)
    assert all(t0 - 1000 <= r.timestamp <= t1 + 1000 for r in got)
    check_exact(
        got,
        {
            1: [
                (k, v, [("from", b"kcat")], r.timestamp)
                for (k, v), r in zip(parsed, got, strict=True)
            ]
        },
    )


def test_aiokafka_to_kcat(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    ensure_topic(bootstrap, topic)

    async def produce() -> None:
        prod = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="zstd")
        await prod.start()
        try:
            for i in range(200):
                await prod.send(
                    topic,
                    key=b"a%d" % i,
                    value=b"aio-%d" % i,
                    partition=3,
                    timestamp_ms=BASE_TS + i,
                    headers=[("h", b"%d" % i)],
                )
            await prod.flush()
        finally:
            await prod.stop()

    asyncio.run(produce())
    got = kcat_consume(bootstrap, topic, [3], 200)
    check_exact(
        got, {3: [(b"a%d" % i, b"aio-%d" % i, [("h", b"%d" % i)], BASE_TS + i) for i in range(200)]}
    )


def test_kcat_metadata_and_offset_query(bootstrap: str, topic: str) -> None:
    ensure_topic(bootstrap, topic)
    p = ck.Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        p.produce(topic, value=b"q%d" % i, partition=2, timestamp=BASE_TS + 1000 * i)
    assert p.flush(10) == 0

    md = json.loads(kcat("-b", bootstrap, "-L", "-J", "-t", topic))
    assert [b["id"] for b in md["brokers"]] == [1]
    [t] = md["topics"]
    assert t["topic"] == topic and "error" not in t
    assert sorted(pm["partition"] for pm in t["partitions"]) == [0, 1, 2, 3]
    assert all(pm["leader"] == 1 for pm in t["partitions"])

    for ts, want in {BASE_TS + 4500: 5, BASE_TS: 0, BASE_TS + 9000: 9, BASE_TS + 9001: -1}.items():
        out = kcat("-b", bootstrap, "-Q", "-t", f"{topic}:2:{ts}")
        assert f"{topic} [2] offset {want}" in out, out
