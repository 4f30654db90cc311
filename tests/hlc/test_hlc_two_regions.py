"""Two regions, two brokers, `gregor mirror` running both ways (A->B and B->A under MirrorMaker
2's default policy, so region A holds `orders` and `B.orders`, region B `orders` and
`A.orders`): writers in both regions update the same 1,000 keys at the same time (region B's
clock 2 s ahead) while the mirror copies, and a resolver runs in each region over its own
topics. Once the mirror has caught up, every write is in both regions once, and both regions'
resolved views, and their compacted `orders.resolved` topics, are identical and equal to an
oracle computed from every write."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gregor import Broker
from gregor.clock import SYSTEM_CLOCK
from gregor.hlc import HlcProducer, HybridClock, ResolverProcess, Timestamp
from tests.mirror.test_engine import Mirror, count, wait_for

pytestmark = pytest.mark.cluster

KEYS = [f"entity-{i:04d}".encode() for i in range(1000)]
ROUNDS = 2
PARTITIONS = 3
MM2 = """\
clusters = A, B
A.bootstrap.servers = {a}
B.bootstrap.servers = {b}
A->B.enabled = true
B->A.enabled = true
topics = orders
replication.factor = 1
offset-syncs.topic.replication.factor = 1
emit.heartbeats.enabled = false
emit.checkpoints.enabled = false
refresh.topics.interval.seconds = 1
offset.flush.interval.ms = 200
"""


@pytest.fixture
def regions() -> Iterator[dict[str, Broker]]:
    config = {"num.partitions": str(PARTITIONS), "group.initial.rebalance.delay.ms": "0"}
    brokers = {name: Broker(config=config) for name in "AB"}
    try:
        for b in brokers.values():
            b.start()
        yield brokers
    finally:
        for b in brokers.values():
            b.close()


def create(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, num_partitions=PARTITIONS) for n in names]).values():
        f.result(30)


def write(bootstrap: str, clock: HybridClock, seed: int, log: list) -> None:
    """ROUNDS passes over every key in a random order, a delete now and then."""
    try:
        rng = random.Random(seed)
        p = HlcProducer(clock, {"bootstrap.servers": bootstrap, "linger.ms": 2})
        for r in range(ROUNDS):
            for key in rng.sample(KEYS, len(KEYS)):
                value = None if rng.random() < 0.1 else f"{clock.node_id}:{r}".encode()
                log.append((key, value, p.produce("orders", value=value, key=key)))
                p.poll(0)
        assert p.flush(30) == 0
    except BaseException as exc:
        log.append(exc)


def test_both_regions_resolve_to_the_same_view_equal_to_the_oracle(
    regions: dict[str, Broker], tmp_path: Path
) -> None:
    a, b = regions["A"].bootstrap, regions["B"].bootstrap
    create(a, "orders")
    create(b, "orders")
    config = tmp_path / "mm2.properties"
    config.write_text(MM2.format(a=a, b=b))
    mirror = Mirror(config, tmp_path / "mirror.log").start()
    try:
        # the writers start once the mirror runs both ways (it has created the remote topics)
        wait_for("B.orders in A", lambda: _exists(a, "B.orders"))
        wait_for("A.orders in B", lambda: _exists(b, "A.orders"))
        clocks = {"A": HybridClock(1), "B": HybridClock(2, lambda: SYSTEM_CLOCK.now_ms() + 2_000)}
        logs: dict[str, list] = {"A": [], "B": []}
        writers = [
            threading.Thread(target=write, args=(a, clocks["A"], 1, logs["A"])),
            threading.Thread(target=write, args=(b, clocks["B"], 2, logs["B"])),
        ]
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        for name in "AB":
            assert all(isinstance(x, tuple) for x in logs[name]), logs[name][-1:]
        wait_for("A's writes in B", lambda: count(b, "A.orders") >= len(logs["A"]), 120)
        wait_for("B's writes in A", lambda: count(a, "B.orders") >= len(logs["B"]), 120)
        assert mirror.stop() == 0
    finally:
        if mirror.process is not None and mirror.process.poll() is None:
            mirror.kill()
    # each write once in each region: none lost, none copied twice, none copied back
    assert count(b, "A.orders") == count(a, "orders") == len(logs["A"])
    assert count(a, "B.orders") == count(b, "orders") == len(logs["B"])
    assert "Traceback" not in mirror.output()
    writes = logs["A"] + logs["B"]
    assert len(writes) == 2 * ROUNDS * len(KEYS)
    best: dict[bytes, tuple[Timestamp, bytes | None]] = {}
    for key, value, ts in writes:
        if key not in best or ts > best[key][0]:
            best[key] = (ts, value)
    expected = {k: v for k, (_, v) in best.items() if v is not None}
    views = []
    for bootstrap, remote in ((a, "B.orders"), (b, "A.orders")):
        process = ResolverProcess({"bootstrap.servers": bootstrap}, "orders", [remote])
        process.start()
        try:
            process.catch_up()
        finally:
            process.close()
        assert process.stats.records == len(writes)
        views.append(process.resolver.values())
        assert resolved(bootstrap) == expected
    assert views[0] == views[1] == expected


def _exists(bootstrap: str, topic: str) -> bool:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    return topic in md.topics and len(md.topics[topic].partitions) == PARTITIONS


def resolved(bootstrap: str) -> dict[bytes, bytes]:
    """The last value of each key of `orders.resolved`, deletes left out."""
    c = ck.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    try:
        ends = {}
        for i in range(PARTITIONS):
            low, high = c.get_watermark_offsets(ck.TopicPartition("orders.resolved", i), timeout=10)
            if high > low:
                ends[i] = high
        c.assign([ck.TopicPartition("orders.resolved", i, ck.OFFSET_BEGINNING) for i in ends])
        last: dict[bytes, bytes | None] = {}
        while ends:
            for m in c.consume(500, 1.0):
                assert not m.error(), m.error()
                last[m.key()] = m.value()
                if m.offset() + 1 >= ends.get(m.partition(), 0):
                    ends.pop(m.partition(), None)
        return {k: v for k, v in last.items() if v is not None}
    finally:
        c.close()
