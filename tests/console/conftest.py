"""A broker for the module, consoles of it (Starlette's TestClient, the app in this process),
and small helpers: topics with records, a group with committed offsets, a form's token."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from starlette.testclient import TestClient

from gregor import Broker
from gregor.console.app import create_app
from gregor.console.settings import ConsoleSettings


@pytest.fixture(scope="module")
def kafka() -> Iterator[Broker]:
    with Broker() as broker:
        yield broker


def open_console(bootstrap: str, read_only: bool) -> TestClient:
    settings = ConsoleSettings(bootstrap, read_only=read_only, sample_interval_s=0.2)
    return TestClient(create_app(settings), follow_redirects=False)


@pytest.fixture(scope="module")
def console(kafka: Broker) -> Iterator[TestClient]:
    """A console that may write."""
    with open_console(kafka.bootstrap, read_only=False) as client:
        yield client


@pytest.fixture(scope="module")
def read_only_console(kafka: Broker) -> Iterator[TestClient]:
    with open_console(kafka.bootstrap, read_only=True) as client:
        yield client


def make_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)


def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes | None, bytes | None, int]],
    headers: list[tuple[str, bytes]] | None = None,
    first_timestamp_ms: int = 0,
) -> None:
    """`records` (key, value, partition); with `first_timestamp_ms`, timestamped one ms apart."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, (key, value, partition) in enumerate(records):
        stamp = {"timestamp": first_timestamp_ms + i} if first_timestamp_ms else {}
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers, **stamp)
    assert producer.flush(10) == 0


def commit_group(bootstrap: str, topic: str, group: str, count: int) -> None:
    """`group` reads `count` records of `topic` and commits, then leaves: an empty group."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    for _ in range(200):
        seen += len([m for m in consumer.consume(count, timeout=0.5) if m.error() is None])
        if seen >= count:
            break
    assert seen >= count
    consumer.commit(asynchronous=False)
    consumer.close()


def token_of(html: str) -> str:
    found = re.search(r'name="token" value="([^"]+)"', html)
    assert found, "the page has no form"
    return found[1]


def error_of(html: str) -> str:
    found = re.search(r'id="error-message">(.*?)</p>', html, re.S)
    assert found, "the page shows no error"
    return found[1]
