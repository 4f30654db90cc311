"""Fixtures for the consumer group tests: brokers from `gregor.Broker`, never a fixed port.

`group_broker` is one broker for the session, tuned for quick group tests as Kafka's own
integration tests are: no initial rebalance delay, a 1 s minimum session timeout, and a small
`__consumer_offsets` (5 partitions) so loading after restarts is quick. Tests that restart or
kill a broker start their own with `make_broker`. Every test names its own topic and group.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

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
def make_broker() -> Iterator[Callable[..., Broker]]:
    made: list[Broker] = []

    def make(**extra: str) -> Broker:
        b = Broker(config={**BROKER_CONFIG, **extra}, log_level="INFO")
        made.append(b)
        return b.start()

    yield make
    for b in made:
        # pytest shows this only when the test failed.
        print(f"--- the last lines of {b.log_path}:")
        print("\n".join(b.read_log().splitlines()[-60:]))
        b.close()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A topic and group name of this test's own."""
    base = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:100]
    return f"{base}-{uuid.uuid4().hex[:6]}"


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.x loads its schemas with a deprecated importlib.resources call.
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")
