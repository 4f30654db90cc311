"""Two regions, two brokers, mirroring both ways: writers in both regions update the same 1,000
keys at the same time (region B's clock 2 s ahead), each region's `orders` is copied to the
other as `A.orders` / `B.orders` while they write (a copy loop of this test standing in for
`gregor mirror`: key, value, headers, timestamp and partition kept), and a resolver runs in
each region over its own topics. Once the copies have caught up, both regions' resolved views,
and their compacted `orders.resolved` topics, are identical and equal to an oracle computed
from every write."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gregor import Broker
from gregor.clock import SYSTEM_CLOCK
from gregor.hlc import HlcProducer, HybridClock, ResolverProcess, Timestamp

pytestmark = pytest.mark.cluster

KEYS = [f"entity-{i:04d}".encode() for i in range(1000)]
ROUNDS = 2
PARTITIONS = 3


@pytest.fixture
def regions() -> Iterator[dict[str, Broker]]:
    brokers = {name: Broker(config={"num.partitions": str(PARTITIONS)}) for name in "AB"}
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


class Copy(threading.Thread):
    """Copies every record of `orders` in one region to `<region>.orders` in the other."""

    def __init__(self, src: str, dst: str, dst_topic: str) -> None:
        super().__init__()
        self.src, self.dst, self.dst_topic = src, dst, dst_topic
        self.copied = 0
        self.target: int | None = None  # set once the writers are done
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._copy()
        except BaseException as exc:
            self.error = exc

    def _copy(self) -> None:
        c = ck.Consumer(
            {"bootstrap.servers": self.src, "group.id": "copy", "enable.auto.commit": False}
        )
        p = ck.Producer({"bootstrap.servers": self.dst, "enable.idempotence": True, "linger.ms": 2})
        c.assign([ck.TopicPartition("orders", i, ck.OFFSET_BEGINNING) for i in range(PARTITIONS)])
        try:
            while self.target is None or self.copied < self.target:
                for m in c.consume(500, 0.1):
                    assert not m.error(), m.error()
                    p.produce(
                        self.dst_topic, key=m.key(), value=m.value(), headers=m.headers(),
                        partition=m.partition(), timestamp=m.timestamp()[1],
                    )  # fmt: skip
                    self.copied += 1
                    p.poll(0)
            assert p.flush(30) == 0
        finally:
            c.close()


def test_both_regions_resolve_to_the_same_view_equal_to_the_oracle(regions) -> None:
    a, b = regions["A"].bootstrap, regions["B"].bootstrap
    create(a, "orders", "B.orders")
    create(b, "orders", "A.orders")
    clocks = {"A": HybridClock(1), "B": HybridClock(2, lambda: SYSTEM_CLOCK.now_ms() + 2_000)}
    logs: dict[str, list] = {"A": [], "B": []}
    writers = [
        threading.Thread(target=write, args=(a, clocks["A"], 1, logs["A"])),
        threading.Thread(target=write, args=(b, clocks["B"], 2, logs["B"])),
    ]
    copies = [Copy(a, b, "A.orders"), Copy(b, a, "B.orders")]
    for t in writers + copies:
        t.start()
    for t in writers:
        t.join()
    for name, copy in zip("AB", copies, strict=True):
        assert all(isinstance(x, tuple) for x in logs[name]), logs[name][-1:]
        copy.target = len(logs[name])
    for copy in copies:
        copy.join(120)
        assert not copy.is_alive() and copy.error is None, copy.error
    writes = logs["A"] + logs["B"]
    assert len(writes) == 2 * ROUNDS * len(KEYS)
    best: dict[bytes, tuple[Timestamp, bytes | None]] = {}
    for key, value, ts in writes:
        if key not in best or ts > best[key][0]:
            best[key] = (ts, value)
    expected = {k: v for k, (_, v) in best.items() if v is not None}
    views = []
    for bootstrap, mirror in ((a, "B.orders"), (b, "A.orders")):
        process = ResolverProcess({"bootstrap.servers": bootstrap}, "orders", [mirror])
        process.start()
        try:
            process.catch_up()
        finally:
            process.close()
        assert process.stats.records == len(writes)
        views.append(process.resolver.values())
        assert resolved(bootstrap) == expected
    assert views[0] == views[1] == expected


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
