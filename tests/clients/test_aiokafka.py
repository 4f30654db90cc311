"""aiokafka against a real gregor broker: round trips with every codec, cross-client with
confluent-kafka, ListOffsets. Consumers `assign` + `seek` (no consumer groups yet)."""

from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from client_helpers import SHARED_PARTITIONS, Rec, check_exact, consume_confluent, ensure_topic

BASE_TS = 1_650_000_000_000
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def records(n: int, tag: str) -> list[dict]:
    out = []
    for i in range(n):
        out.append(
            {
                "key": None if i % 17 == 0 else f"key-{tag}-{i}".encode(),
                "value": (f"{tag}:{i}:" * (1 + i % 9)).encode(),
                "headers": []
                if i % 7 == 0
                else [("n", str(i).encode()), ("t", tag.encode()), ("n", b"again")],
                "partition": i % SHARED_PARTITIONS,
                "timestamp_ms": BASE_TS + 2 * i,
            }
        )
    return out


def expected_of(recs: list[dict]) -> dict[int, list]:
    exp: dict[int, list] = {p: [] for p in range(SHARED_PARTITIONS)}
    for r in recs:
        exp[r["partition"]].append((r["key"], r["value"], r["headers"], r["timestamp_ms"]))
    return exp


async def produce(bootstrap: str, topic: str, recs: list[dict], **conf) -> list:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **conf)
    await p.start()
    try:
        futures = [await p.send(topic, **r) for r in recs]
        return list(await asyncio.gather(*futures))
    finally:
        await p.stop()


async def consume(
    bootstrap: str, topic: str, partitions, count: int, timeout: float = 60.0
) -> list[Rec]:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, 0)
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            assert time.monotonic() < deadline, f"read {len(out)} of {count} in {timeout}s"
            batch = await c.getmany(timeout_ms=200, max_records=10_000)
            for msgs in batch.values():
                for m in msgs:
                    assert m.timestamp_type == 0
                    out.append(
                        Rec(m.partition, m.offset, m.key, m.value, list(m.headers), m.timestamp)
                    )
        extra = await c.getmany(timeout_ms=300)
        assert not any(extra.values()), f"unexpected extra records: {extra}"
        return out
    finally:
        await c.stop()


@pytest.mark.parametrize("codec", CODECS, ids=[str(c) for c in CODECS])
def test_roundtrip(bootstrap: str, topic: str, codec: str | None) -> None:
    ensure_topic(bootstrap, topic)
    recs = records(3000, f"aio-{codec}")

    async def run() -> tuple[list, list[Rec]]:
        metas = await produce(bootstrap, topic, recs, compression_type=codec)
        return metas, await consume(bootstrap, topic, range(SHARED_PARTITIONS), len(recs))

    metas, got = asyncio.run(run())
    exp = expected_of(recs)
    assert sorted((m.partition, m.offset) for m in metas) == sorted(
        (p, o) for p in exp for o in range(len(exp[p]))
    )
    check_exact(got, exp)


def test_aiokafka_to_confluent(bootstrap: str, topic: str) -> None:
    ensure_topic(bootstrap, topic)
    recs = records(1500, "aio2ck")
    asyncio.run(produce(bootstrap, topic, recs, compression_type="snappy", acks="all"))
    check_exact(
        consume_confluent(bootstrap, topic, range(SHARED_PARTITIONS), len(recs)), expected_of(recs)
    )


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_confluent_to_aiokafka(bootstrap: str, topic: str, codec: str) -> None:
    ensure_topic(bootstrap, topic)
    recs = records(1500, f"ck2aio-{codec}")
    p = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
    for r in recs:
        p.produce(
            topic,
            key=r["key"],
            value=r["value"],
            headers=r["headers"],
            partition=r["partition"],
            timestamp=r["timestamp_ms"],
        )
    assert p.flush(30) == 0
    got = asyncio.run(consume(bootstrap, topic, range(SHARED_PARTITIONS), len(recs)))
    check_exact(got, expected_of(recs))


def test_offsets(bootstrap: str, topic: str) -> None:
    ensure_topic(bootstrap, topic)
    recs = [
        {"value": b"o%d" % i, "partition": 3, "timestamp_ms": BASE_TS + 100 * i} for i in range(30)
    ]

    async def run() -> None:
        await produce(bootstrap, topic, recs)
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
        await c.start()
        try:
            tp3, tp0 = TopicPartition(topic, 3), TopicPartition(topic, 0)
            assert await c.beginning_offsets([tp3, tp0]) == {tp3: 0, tp0: 0}
            assert await c.end_offsets([tp3, tp0]) == {tp3: 30, tp0: 0}
            res = await c.offsets_for_times({tp3: BASE_TS + 1001})
            assert (res[tp3].offset, res[tp3].timestamp) == (11, BASE_TS + 1100)
            res = await c.offsets_for_times({tp3: BASE_TS + 2901, tp0: BASE_TS})
            assert res == {tp3: None, tp0: None}
        finally:
            await c.stop()

    asyncio.run(run())
