"""Fixtures of the transaction tests: two brokers for the session, never a fixed port.

`txn_protocol_broker` serves the raw-protocol tests (small internal topics, timed-out
transactions looked for twice a second); `txn_broker` (and `bootstrap`) serves the real-client
tests, tuned as Kafka's own integration tests tune theirs (client_txn_helpers.BROKER_CONFIG).
Tests that restart or kill a broker make their own with `make_broker` (tests/conftest.py), in
the real-client config unless a module overrides `broker_config`. Every test names its own topics
and transactional ids (`name`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from client_txn_helpers import BROKER_CONFIG, TXN_BROKER_CONFIG

from gregor import Broker


@pytest.fixture(scope="session")
def txn_protocol_broker() -> Iterator[Broker]:
    with Broker(config=dict(TXN_BROKER_CONFIG), log_level="INFO") as broker:
        yield broker


@pytest.fixture(scope="session")
def txn_broker() -> Iterator[Broker]:
    with Broker(config=dict(BROKER_CONFIG), log_level="INFO") as broker:
        yield broker


@pytest.fixture
def bootstrap(txn_broker: Broker) -> str:
    return txn_broker.bootstrap


@pytest.fixture
def broker_config() -> dict[str, str]:
    return dict(BROKER_CONFIG)
