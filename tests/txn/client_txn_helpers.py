"""Helpers for the transaction tests: topics, transactional producers and reading a topic to its
end as a read_committed or read_uncommitted consumer (assigned, no group), with confluent-kafka.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

T = TypeVar("T")

# The raw-protocol tests' broker: small internal topics, timed-out transactions looked for twice
# a second.
TXN_BROKER_CONFIG = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "num.partitions": "2",
}
# The real-client tests' broker, tuned as Kafka's own integration tests tune theirs.
BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "num.partitions": "3",
}
FAST = {
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "retry.backoff.ms": 50,
}


def create_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(15)


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> ck.Producer:
    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **FAST,
            **extra,
        }
    )
    p.init_transactions(30)
    return p


def wait_until(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = pred()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Reader:
    """A consumer assigned every partition of `topic` from the beginning, at one isolation
    level; `poll_for(seconds)` gathers what arrives."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, read_committed: bool) -> None:
        self.consumer = ck.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "unused",
                "enable.auto.commit": False,
                "isolation.level": "read_committed" if read_committed else "read_uncommitted",
                "fetch.wait.max.ms": 50,
                **FAST,
            }
        )
        self.consumer.assign(
            [ck.TopicPartition(topic, i, ck.OFFSET_BEGINNING) for i in range(partitions)]
        )
        self.values: list[str] = []

    def poll_for(self, seconds: float) -> list[str]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for m in self.consumer.consume(500, 0.1):
                if m.error() is None:
                    self.values.append(m.value().decode())
        return self.values

    def poll_until(self, count: int, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        while len(self.values) < count and time.monotonic() < deadline:
            for m in self.consumer.consume(500, 0.1):
                if m.error() is None:
                    self.values.append(m.value().decode())
        return self.values

    def close(self) -> None:
        self.consumer.close()


def read_all(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    read_committed: bool,
    count: int,
    timeout: float = 20,
    settle: float = 1.0,
) -> list[str]:
    """The values a fresh consumer reads: waits for `count`, then `settle` s more for extras."""
    r = Reader(bootstrap, topic, partitions, read_committed)
    try:
        r.poll_until(count, timeout)
        r.poll_for(settle)
        return list(r.values)
    finally:
        r.close()
