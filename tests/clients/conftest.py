"""Fixtures for the real-client tests: brokers from `gregor.Broker`, never a fixed port.

`shared_broker` is one broker for the whole session of these tests, with `num.partitions` set
so that topics auto-created by a producer have several partitions (the data-path tests do not
depend on the admin APIs). Tests that restart, kill or reconfigure a broker start their own.
Every test names its own topic (`topic` fixture), so tests sharing the broker never collide.

The shared broker's log is copied to /tmp/gregor-clients-shared-broker-*.log when it holds
warnings or errors (they are printed at the end, with -s), or always with GREGOR_KEEP_BROKER_LOG=1.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator

import pytest
from client_helpers import SHARED_PARTITIONS, broker_log_problems

from gregor import Broker


@pytest.fixture(scope="session")
def shared_broker() -> Iterator[Broker]:
    broker = Broker(config={"num.partitions": str(SHARED_PARTITIONS)}, log_level="INFO")
    broker.start()
    try:
        yield broker
    finally:
        problems = broker_log_problems(broker.read_log())
        keep = None
        if problems or os.environ.get("GREGOR_KEEP_BROKER_LOG"):
            # Keep the log for whoever reads the test output: it names broker bugs.
            keep = shutil.copy(
                broker.log_path, f"/tmp/gregor-clients-shared-broker-{uuid.uuid4().hex[:8]}.log"
            )
        broker.close()
        if problems:
            print(f"\nshared broker logged {len(problems)} warnings/errors; log kept at {keep}:")
            for line in problems[:40]:
                print("   ", line)


@pytest.fixture(scope="session")
def bootstrap(shared_broker: Broker) -> str:
    return shared_broker.bootstrap


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name of this test's own (valid Kafka topic characters only)."""
    base = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:150]
    return f"{base}-{uuid.uuid4().hex[:8]}"
