"""`gregor mirror` into a cluster that takes SASL/PLAIN only, configured as a MirrorMaker 2 user
writes it (`B.security.protocol`, `B.sasl.mechanism`, `B.sasl.jaas.config`): the records, the
remote topic and the internal topics reach the secured cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gregor import Broker
from tests.mirror.test_engine import (
    Mirror,
    by_partition,
    count,
    create,
    produce,
    read_all,
    topics,
    wait_for,
)

pytestmark = pytest.mark.cluster

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_mirror="mirror-secret" user_reader="reader-secret";'
)
MM2 = """\
clusters = A, B
A.bootstrap.servers = {a}
B.bootstrap.servers = {b}
B.security.protocol = SASL_PLAINTEXT
B.sasl.mechanism = PLAIN
B.sasl.jaas.config = org.apache.kafka.common.security.plain.PlainLoginModule required \\
    username="mirror" password="mirror-secret";
A->B.enabled = true
A->B.topics = payments
offset-syncs.topic.location = target
replication.factor = 1
offset-syncs.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
refresh.topics.interval.seconds = 1
offset.flush.interval.ms = 200
"""


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[Broker, Broker]]:
    secured = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "group.initial.rebalance.delay.ms": "0",
    }
    with Broker(config={"group.initial.rebalance.delay.ms": "0"}) as a, Broker(secured) as b:
        yield a, b


def test_records_reach_a_sasl_cluster_configured_the_java_way(
    clusters: tuple[Broker, Broker], tmp_path: Path
) -> None:
    a, b = clusters
    create(a.bootstrap, "payments", 2)
    produce(a.bootstrap, "payments", [(i % 2, b"p%d" % i) for i in range(300)])
    config = tmp_path / "mm2.properties"
    config.write_text(MM2.format(a=a.bootstrap, b=b.bootstrap))
    m = Mirror(config, tmp_path / "mirror.log").start()
    try:
        reader = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "reader",
            "sasl.password": "reader-secret",
        }
        wait_for("A.payments on B", lambda: count(b.bootstrap, "A.payments", reader) >= 300)
        # the offset syncs are on the target (offset-syncs.topic.location = target), and
        # B's heartbeats topic holds A->B's heartbeats
        wait_for(
            "the internal topics on B",
            lambda: (
                {"mm2-offset-syncs.A.internal", "heartbeats"} <= set(topics(b.bootstrap, reader))
            ),
        )
        assert m.stop() == 0
    finally:
        if m.process is not None and m.process.poll() is None:
            m.kill()
    copied = by_partition(read_all(b.bootstrap, "A.payments", conf=reader))
    assert copied == by_partition(read_all(a.bootstrap, "payments"))
    assert "mm2-offset-syncs.B.internal" not in topics(a.bootstrap)
    assert "Traceback" not in m.output()
