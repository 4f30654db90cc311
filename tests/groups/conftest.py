"""Fixtures for the consumer group tests: brokers from `gregor.Broker`, never a fixed port.

`group_broker` is one broker for the session, tuned for quick group tests as Kafka's own
integration tests are: no initial rebalance delay, a 1 s minimum session timeout, and a small
`__consumer_offsets` (5 partitions) so loading after restarts is quick. Tests that restart or
kill a broker start their own with `make_broker` (tests/conftest.py) in the same config. Every
test names its own topic and group (`name`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from group_helpers import BROKER_CONFIG

from gregor import Broker


@pytest.fixture(scope="session")
def group_broker() -> Iterator[Broker]:
    with Broker(config=dict(BROKER_CONFIG), log_level="INFO") as broker:
        yield broker


@pytest.fixture
def bootstrap(group_broker: Broker) -> str:
    return group_broker.bootstrap


@pytest.fixture
def broker_config() -> dict[str, str]:
    return dict(BROKER_CONFIG)
