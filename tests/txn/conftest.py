"""Fixtures for the transaction coordinator tests over a socket: one broker for the session
(small internal topics, timed-out transactions looked for twice a second), brokers of a test's
own from `make_broker`, never a fixed port."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import pytest

from gregor import Broker

TXN_BROKER_CONFIG = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "num.partitions": "2",
}


@pytest.fixture(scope="session")
def txn_protocol_broker() -> Iterator[Broker]:
    with Broker(config=dict(TXN_BROKER_CONFIG), log_level="INFO") as broker:
        yield broker


@pytest.fixture
def make_txn_broker() -> Iterator[Callable[..., Broker]]:
    made: list[Broker] = []

    def make(**extra: str) -> Broker:
        b = Broker(config={**TXN_BROKER_CONFIG, **extra}, log_level="INFO")
        made.append(b)
        return b.start()

    yield make
    for b in made:
        print(f"--- the last lines of {b.log_path}:")
        print("\n".join(b.read_log().splitlines()[-60:]))
        b.close()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A topic and transactional id of this test's own."""
    base = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:90]
    return f"{base}-{uuid.uuid4().hex[:6]}"
