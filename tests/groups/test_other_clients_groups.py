"""Consumer groups with kafka-python and aiokafka (each with its own coordinator code and its
own choice of API versions): members share partitions and each record is consumed once; a
member that leaves hands its partitions over; committed offsets survive a broker restart (clean
and SIGKILL)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from group_helpers import create_topic, produce, wait_until
from kafka import KafkaConsumer

from gregor import Broker

KP_FAST: dict[str, Any] = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 300,
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
    "metadata_max_age_ms": 2000,
    "retry_backoff_ms": 50,
    "fetch_max_wait_ms": 100,
}


# -- kafka-python ---------------------------------------------------------------------------------


class KPMember:
    """A kafka-python consumer in a group, polled by its own thread (its heartbeat thread needs
    the consumer to keep polling, as in an application).

    Each poll may block up to a second. kafka-python 3.0 loses a rejoin that completes after a
    poll gave up waiting for it, when that rejoin was started by the leader itself because the
    topic metadata changed (the task's result is never consumed, so no heartbeat, no fetch); a
    50 ms poll hit that window about once in seven runs, a 1 s poll outlasts the whole join."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, **KP_FAST)
        self.records: list[int] = []
        self.partitions: set[int] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.commit_now = threading.Event()
        self.committed = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                batches = self.consumer.poll(timeout_ms=1000)
                with self.lock:
                    for msgs in batches.values():
                        self.records += [int(m.value) for m in msgs]
                    self.partitions = {tp.partition for tp in self.consumer.assignment()}
                if self.commit_now.is_set():
                    self.consumer.commit()
                    self.commit_now.clear()
                    self.committed.set()
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
        finally:
            self.consumer.close()

    def commit(self) -> None:
        self.committed.clear()
        self.commit_now.set()
        assert self.committed.wait(15), "commit did not complete"

    def close(self) -> None:
        self.stop.set()
        self.thread.join(20)


def _kp_balanced(members: list[KPMember], partitions: int) -> bool:
    seen: list[int] = []
    for m in members:
        with m.lock:
            if not m.partitions:
                return False
            seen += m.partitions
    return sorted(seen) == list(range(partitions))


def _all(members: list[Any]) -> list[int]:
    return sorted(n for m in members for n in m.records)


def test_kafka_python_group_shares_partitions_and_reassigns(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name, 6)
    members = [KPMember(bootstrap, name, name) for _ in range(3)]
    try:
        wait_until(
            lambda: _kp_balanced(members, 6), 40, "3 kafka-python members to split 6 partitions"
        )
        produce(bootstrap, name, 0, 600, 6)
        wait_until(lambda: len(_all(members)) >= 600, 30, "600 records")
        time.sleep(0.5)
        assert _all(members) == list(range(600)), "every record exactly once"
        for m in members:
            m.commit()
        leaving = members.pop()
        leaving.close()
        wait_until(lambda: _kp_balanced(members, 6), 40, "2 members to take over 6 partitions")
        before = [len(m.records) for m in members]
        produce(bootstrap, name, 600, 300, 6)
        wait_until(
            lambda: sum(len(m.records) for m in members) - sum(before) >= 300,
            30,
            "300 more records",
        )
        time.sleep(0.5)
        later = sorted(n for m, b in zip(members, before, strict=True) for n in m.records[b:])
        assert later == list(range(600, 900))
        assert not any(m.errors for m in members + [leaving])
    finally:
        for m in members:
            m.close()


@pytest.mark.parametrize("clean", [True, False], ids=["sigterm", "sigkill"])
def test_kafka_python_resumes_from_committed_offsets_after_restart(
    make_broker: Any, name: str, clean: bool
) -> None:
    broker: Broker = make_broker()
    create_topic(broker.bootstrap, name, 3)
    produce(broker.bootstrap, name, 0, 300, 3)
    m = KPMember(broker.bootstrap, name, name)
    try:
        wait_until(lambda: len(m.records) >= 100, 30, "100 records")
        m.commit()
        with m.lock:
            first = list(m.records)
    finally:
        m.close()
    broker.restart(clean=clean)
    again = KPMember(broker.bootstrap, name, name)
    try:
        wait_until(lambda: len(again.records) >= 300 - len(first), 40, "the rest")
        time.sleep(0.5)
        assert not set(first) & set(again.records)
        assert sorted(first + again.records) == list(range(300))
    finally:
        again.close()


# -- aiokafka -------------------------------------------------------------------------------------


def _aio(bootstrap: str, group: str, topic: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        metadata_max_age_ms=2000,
        retry_backoff_ms=50,
        fetch_max_wait_ms=100,
    )


async def _aio_wait(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


class AioMember:
    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer
        self.records: list[int] = []
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> AioMember:
        await self.consumer.start()
        self.task = asyncio.ensure_future(self._run())
        return self

    async def _run(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=50)
            for msgs in batches.values():
                self.records += [int(m.value) for m in msgs]

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        await self.consumer.stop()


def test_aiokafka_group_shares_partitions_and_reassigns(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name, 6)

    async def scenario() -> None:
        members = [await AioMember(_aio(bootstrap, name, name)).start() for _ in range(3)]
        try:

            def balanced() -> bool:
                ps = [m.partitions() for m in members]
                return all(ps) and sorted(p for s in ps for p in s) == list(range(6))

            await _aio_wait(balanced, 40, "3 aiokafka members to split 6 partitions")
            await asyncio.get_running_loop().run_in_executor(
                None, produce, bootstrap, name, 0, 600, 6
            )
            await _aio_wait(lambda: len(_all(members)) >= 600, 30, "600 records")
            await asyncio.sleep(0.5)
            assert _all(members) == list(range(600))
            for m in members:
                await m.consumer.commit()
            leaving = members.pop()
            await leaving.stop()
            await _aio_wait(balanced, 40, "2 members to take over 6 partitions")
            before = [len(m.records) for m in members]
            await asyncio.get_running_loop().run_in_executor(
                None, produce, bootstrap, name, 600, 300, 6
            )
            await _aio_wait(
                lambda: sum(len(m.records) for m in members) - sum(before) >= 300, 30, "300 more"
            )
            await asyncio.sleep(0.5)
            later = sorted(n for m, b in zip(members, before, strict=True) for n in m.records[b:])
            assert later == list(range(600, 900))
        finally:
            for m in members:
                await m.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("clean", [True, False], ids=["sigterm", "sigkill"])
def test_aiokafka_resumes_from_committed_offsets_after_restart(
    make_broker: Any, name: str, clean: bool
) -> None:
    broker: Broker = make_broker()
    create_topic(broker.bootstrap, name, 3)
    produce(broker.bootstrap, name, 0, 300, 3)

    async def consume(at_least: int) -> list[int]:
        m = await AioMember(_aio(broker.bootstrap, name, name)).start()
        try:
            await _aio_wait(lambda: len(m.records) >= at_least, 40, f"{at_least} records")
            m.task.cancel()  # type: ignore[union-attr]
            await asyncio.sleep(0.3)
            await m.consumer.commit()
            return list(m.records)
        finally:
            await m.stop()

    first = asyncio.run(consume(100))
    broker.restart(clean=clean)
    second = asyncio.run(consume(300 - len(first)))
    assert not set(first) & set(second)
    assert sorted(first + second) == list(range(300))
