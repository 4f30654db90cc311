"""pytest fixtures for a real Kafka in your tests, registered when gregor is installed.

    def test_roundtrip(kafka_bootstrap):
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap})

`kafka_broker` is one broker for the whole session (a `gregor.Broker`); `kafka_bootstrap` is its
"host:port". Use distinct topic names per test, or `gregor.Broker()` directly for a private one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gregor.testing.broker import Broker


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[Broker]:
    with Broker() as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: Broker) -> str:
    return kafka_broker.bootstrap
