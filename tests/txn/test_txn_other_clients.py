"""Transactions with kafka-python and aiokafka (each with its own transaction manager and choice
of API versions): committed records reach read_committed consumers, aborted ones do not, and
read_uncommitted consumers see both."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from client_txn_helpers import create_topic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KPTopicPartition


def _kp_read(bootstrap: str, topic: str, isolation: str, count: int) -> list[str]:
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=2500,
    )
    try:
        tps = [KPTopicPartition(topic, i) for i in range(2)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        values: list[str] = []
        for m in c:
            values.append(m.value.decode())
            if len(values) > count:
                break
        return values
    finally:
        c.close()


def test_kafka_python_commits_and_aborts(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name, 2)
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=name)
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(6):
            p.send(name, value=f"kept{i}".encode(), partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(6):
            p.send(name, value=f"dropped{i}".encode(), partition=i % 2)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send(name, value=b"last", partition=0)
        p.commit_transaction()
    finally:
        p.close()
    committed = _kp_read(bootstrap, name, "read_committed", 7)
    assert sorted(committed) == sorted([f"kept{i}" for i in range(6)] + ["last"])
    everything = _kp_read(bootstrap, name, "read_uncommitted", 13)
    assert len(everything) == 13 and {f"dropped{i}" for i in range(6)} <= set(everything)


async def _aio_read(bootstrap: str, topic: str, isolation: str, count: int) -> list[str]:
    c = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await c.start()
    try:
        tps = [TopicPartition(topic, i) for i in range(2)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        values: list[str] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        quiet_until = None
        while loop.time() < deadline:
            got = await c.getmany(timeout_ms=200)
            for msgs in got.values():
                values += [m.value.decode() for m in msgs]
            if len(values) >= count and quiet_until is None:
                quiet_until = loop.time() + 1.5
            if quiet_until is not None and loop.time() >= quiet_until:
                break
        return values
    finally:
        await c.stop()


def test_aiokafka_commits_and_aborts(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name, 2)

    async def run() -> tuple[list[str], list[str]]:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=name)
        await p.start()
        try:
            async with p.transaction():
                for i in range(6):
                    await p.send(name, value=f"kept{i}".encode(), partition=i % 2)
            try:
                async with p.transaction():
                    for i in range(6):
                        await p.send_and_wait(name, value=f"dropped{i}".encode(), partition=i % 2)
                    raise RuntimeError("abort this one")
            except RuntimeError:
                pass
            async with p.transaction():
                await p.send(name, value=b"last", partition=1)
        finally:
            await p.stop()
        return (
            await _aio_read(bootstrap, name, "read_committed", 7),
            await _aio_read(bootstrap, name, "read_uncommitted", 13),
        )

    committed, everything = asyncio.run(run())
    assert sorted(committed) == sorted([f"kept{i}" for i in range(6)] + ["last"])
    assert len(everything) == 13 and {f"dropped{i}" for i in range(6)} <= set(everything)
