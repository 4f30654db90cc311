"""Fixtures for the transaction tests with real clients: one broker for the module set, tuned as
Kafka's own integration tests tune theirs (small internal topics so loading is quick, timed-out
transactions looked for every half second); tests that restart or kill a broker make their own
with `make_broker`. Every test names its own topics and transactional ids."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import pytest
from client_txn_helpers import BROKER_CONFIG

from gregor import Broker


@pytest.fixture(scope="session")
def txn_broker() -> Iterator[Broker]:
    with Broker(config=dict(BROKER_CONFIG), log_level="INFO") as broker:
        yield broker


@pytest.fixture
def bootstrap(txn_broker: Broker) -> Iterator[str]:
    yield txn_broker.bootstrap


@pytest.fixture
def make_broker() -> Iterator[Callable[..., Broker]]:
    made: list[Broker] = []

    def make(**extra: str) -> Broker:
        b = Broker(config={**BROKER_CONFIG, **extra}, log_level="INFO")
        made.append(b)
        return b.start()

    yield make
    for b in made:
        print(f"--- the last lines of {b.log_path}:")
        print("\n".join(b.read_log().splitlines()[-80:]))
        b.close()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:90]
    return f"{base}-{uuid.uuid4().hex[:6]}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", "ignore:read_text is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")
