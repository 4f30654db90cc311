"""`gregor mirror --config mm2.properties` between two single-node gregor brokers, run as a
child process (`python -m gregor mirror`), with real confluent-kafka clients on both sides."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from gregor import Broker
from gregor.mirror import translate_offsets
from gregor.mirror.formats import Checkpoint, Heartbeat
from gregor.testing.cluster import free_ports

pytestmark = pytest.mark.cluster

FAST = """\
clusters = {A}, {B}
{A}.bootstrap.servers = {a}
{B}.bootstrap.servers = {b}
replication.factor = 1
offset-syncs.topic.replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
heartbeats.replication.enabled = false
refresh.topics.interval.seconds = 1
emit.heartbeats.interval.seconds = 1
emit.checkpoints.interval.seconds = 1
sync.group.offsets.interval.seconds = 1
offset.flush.interval.ms = 200
{A}.consumer.session.timeout.ms = 3000
{A}.consumer.heartbeat.interval.ms = 300
{B}.consumer.session.timeout.ms = 3000
{B}.consumer.heartbeat.interval.ms = 300
"""
WAIT_S = 40.0
# The brokers of this module: a new group forms at once, and a SIGKILLed mirror's member leaves
# its group after a 3 s session (the mirrors' setting above) rather than Kafka's minimum of 6 s.
BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
_PAIRS = itertools.count(1)


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[Broker, Broker]]:
    with Broker(config=BROKER_CONFIG) as a, Broker(config=BROKER_CONFIG) as b:
        yield a, b


@dataclass(frozen=True)
class Pair:
    """The module's two brokers under cluster aliases of this test's own (`A3`, `B3`), so
    that its flows, groups, remote and internal topics are its own."""

    a: Broker
    b: Broker
    A: str
    B: str

    def config(self, extra: str = "", b_bootstrap: str | None = None) -> str:
        b = b_bootstrap or self.b.bootstrap
        return FAST.format(a=self.a.bootstrap, b=b, A=self.A, B=self.B) + extra.format(
            A=self.A, B=self.B
        )


@pytest.fixture
def pair(clusters: tuple[Broker, Broker]) -> Pair:
    n = next(_PAIRS)
    return Pair(clusters[0], clusters[1], f"A{n}", f"B{n}")


class Mirror:
    """`python -m gregor mirror --config FILE` as a child process."""

    def __init__(self, path: Path, log: Path):
        self.path = path
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Mirror:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gregor", "mirror", "--config", str(self.path)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        return self

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Callable[[str], Mirror]]:
    started: list[Mirror] = []

    def start(config: str) -> Mirror:
        path = tmp_path / "mm2.properties"
        path.write_text(config)
        m = Mirror(path, tmp_path / f"mirror-{len(started)}.log").start()
        started.append(m)
        return m

    yield start
    for m in started:
        if m.process is not None and m.process.poll() is None:
            m.kill()


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(timeout=30)


def topics(bootstrap: str, conf: Mapping[str, str] | None = None) -> dict[str, int]:
    """The cluster's topics and their partition counts (`conf`: more client settings)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(conf or {})})
    md = admin.list_topics(timeout=30)
    return {name: len(t.partitions) for name, t in md.topics.items()}


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]], **kw: Any) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, (partition, value) in enumerate(records):
        p.produce(topic, value, key=b"k%d" % i, partition=partition, **kw)
        p.poll(0)
    assert p.flush(30) == 0


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _end_offset(c: Consumer, topic: str, partition: int, timeout_s: float = 10.0) -> int:
    """The partition's high watermark. A topic just created may be listed by the metadata a
    moment before its leader serves it (as in Kafka): UNKNOWN_PARTITION is retried."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def read_all(
    bootstrap: str, topic: str, timeout_s: float = 10.0, conf: Mapping[str, str] | None = None
) -> list[Any]:
    """Every record of every partition of `topic`, from the start to the current end."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            **(conf or {}),
        }
    )
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        ends = {p: _end_offset(c, topic, p) for p in md.partitions}
        want = {p: e for p, e in ends.items() if e > 0}
        c.assign([TopicPartition(topic, p, 0) for p in want])
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while want and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.2):
                if m.error() is None:
                    out.append(m)
                    if m.offset() + 1 >= want.get(m.partition(), 0):
                        want.pop(m.partition(), None)
        return out
    finally:
        c.close()


def count(bootstrap: str, topic: str, conf: Mapping[str, str] | None = None) -> int:
    if topic not in topics(bootstrap, conf):
        return 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "counter", **(conf or {})})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        return sum(_end_offset(c, topic, p) for p in md.partitions)
    finally:
        c.close()


def by_partition(records: list[Any]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for m in sorted(records, key=lambda m: (m.partition(), m.offset())):
        out.setdefault(m.partition(), []).append(m.value())
    return out


def test_records_arrive_once_in_order_with_headers_and_timestamps(
    pair: Pair, mirror: Callable[[str], Mirror]
) -> None:
    a, b, remote = pair.a, pair.b, f"{pair.A}.orders"
    create(a.bootstrap, "orders", 3)
    records = [(i % 3, b"v%d" % i) for i in range(600)]
    produce(a.bootstrap, "orders", records, headers=[("h", b"x"), ("n", None)], timestamp=1234567)
    m = mirror(pair.config("{A}->{B}.enabled = true\n{A}->{B}.topics = orders\n"))
    wait_for("A.orders on B", lambda: count(b.bootstrap, remote) >= 600)
    assert topics(b.bootstrap)[remote] == 3
    assert m.stop() == 0
    copied = read_all(b.bootstrap, remote)
    assert len(copied) == 600
    source = read_all(a.bootstrap, "orders")
    assert by_partition(copied) == by_partition(source)
    for c in copied:
        assert c.headers() == [("h", b"x"), ("n", None)]
        assert c.timestamp()[1] == 1234567
        assert c.key() is not None
    assert "Traceback" not in m.output()


def test_both_ways_never_loop_and_new_topics_and_partitions_follow(
    pair: Pair, mirror: Callable[[str], Mirror]
) -> None:
    a, b, A, B = pair.a, pair.b, pair.A, pair.B
    create(a.bootstrap, "trades", 2)
    create(b.bootstrap, "payments", 1)
    config = (
        "{A}->{B}.enabled = true\n{B}->{A}.enabled = true\nheartbeats.replication.enabled = true\n"
    )
    config += "{A}->{B}.topics = trades, late, marker-a\n{B}->{A}.topics = payments, marker-b\n"
    m = mirror(pair.config(config))
    produce(a.bootstrap, "trades", [(0, b"a0"), (1, b"a1")])
    produce(b.bootstrap, "payments", [(0, b"b0")])
    wait_for("A.trades on B", lambda: count(b.bootstrap, f"{A}.trades") >= 2)
    wait_for("B.payments on A", lambda: count(a.bootstrap, f"{B}.payments") >= 1)
    # a topic created after start is picked up, and partitions added on A are added on B
    create(a.bootstrap, "late", 1)
    produce(a.bootstrap, "late", [(0, b"l0")])
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    for f in admin.create_partitions([NewPartitions("trades", 4)]).values():
        f.result(timeout=30)
    produce(a.bootstrap, "trades", [(3, b"a3")])
    wait_for("A.late on B", lambda: count(b.bootstrap, f"{A}.late") >= 1)
    wait_for("A.trades grown", lambda: topics(b.bootstrap).get(f"{A}.trades") == 4)
    wait_for("the record in the new partition", lambda: count(b.bootstrap, f"{A}.trades") >= 3)
    # heartbeats went both ways and came back as remote topics, never as B.A.x or A.B.x
    wait_for("A.heartbeats on B", lambda: count(b.bootstrap, f"{A}.heartbeats") >= 1)
    wait_for("B.heartbeats on A", lambda: count(a.bootstrap, f"{B}.heartbeats") >= 1)
    # topics created now are picked up by a later refresh of each flow, which would also have
    # created any loop's topics (every remote topic exists by now)
    create(a.bootstrap, "marker-a", 1)
    create(b.bootstrap, "marker-b", 1)
    wait_for("a refresh of A->B", lambda: f"{A}.marker-a" in topics(b.bootstrap))
    wait_for("a refresh of B->A", lambda: f"{B}.marker-b" in topics(a.bootstrap))
    assert m.stop() == 0
    names = set(topics(a.bootstrap)) | set(topics(b.bootstrap))
    loops = tuple(f"{x}.{y}." for x in (A, B) for y in (A, B))
    assert not [n for n in names if n.startswith(loops)]
    assert count(a.bootstrap, f"{B}.payments") == 1 and count(b.bootstrap, f"{A}.trades") == 3


def heartbeats(bootstrap: str, topic: str, pair: Pair) -> list[Heartbeat]:
    """The heartbeats of `topic` between this test's clusters (the module's brokers also hold
    other tests')."""
    beats = [Heartbeat.from_record(r.key(), r.value()) for r in read_all(bootstrap, topic)]
    ours = {pair.A, pair.B}
    return [h for h in beats if {h.source_cluster_alias, h.target_cluster_alias} & ours]


def test_heartbeats_arrive_as_remote_heartbeats_in_mm2_format(
    pair: Pair, mirror: Callable[[str], Mirror]
) -> None:
    b, A, B = pair.b, pair.A, pair.B
    m = mirror(pair.config("{A}->{B}.enabled = true\nheartbeats.replication.enabled = true\n"))
    remote = f"{A}.heartbeats"
    wait_for("A.heartbeats on B", lambda: len(heartbeats(b.bootstrap, remote, pair)) >= 2)
    assert m.stop() == 0
    # A's heartbeats are written there by the pair B->A, then mirrored A->B
    copied = heartbeats(b.bootstrap, remote, pair)
    assert {(h.source_cluster_alias, h.target_cluster_alias) for h in copied} == {(B, A)}
    assert all(h.timestamp > 1_600_000_000_000 for h in copied)
    local = heartbeats(b.bootstrap, "heartbeats", pair)
    assert {(h.source_cluster_alias, h.target_cluster_alias) for h in local} == {(A, B)}


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    c.close()


def test_checkpoints_and_group_failover(pair: Pair, mirror: Callable[[str], Mirror]) -> None:
    a, b, A = pair.a, pair.b, pair.A
    remote = f"{A}.events"
    create(a.bootstrap, "events", 2)
    produce(a.bootstrap, "events", [(i % 2, b"e%d" % i) for i in range(1000)])
    config = "{A}->{B}.enabled = true\n{A}->{B}.sync.group.offsets.enabled = true\n"
    config += "offset.lag.max = 50\n{A}->{B}.topics = events\n"
    m = mirror(pair.config(config))
    wait_for("A.events on B", lambda: count(b.bootstrap, remote) >= 1000)
    # a group consumes half of each partition in A and commits
    commit(a.bootstrap, "billing", "events", {0: 250, 1: 250})
    expected_min = 250 - 50  # at most offset.lag.max records again

    def translated() -> dict[Any, int]:
        offsets = translate_offsets(b.bootstrap, A, "billing")
        return offsets if len(offsets) == 2 else {}

    offsets = wait_for("checkpoints of billing", translated)
    assert {(tp.topic, tp.partition) for tp in offsets} == {(remote, 0), (remote, 1)}
    for offset in offsets.values():
        assert expected_min <= offset <= 250
    # the checkpoints topic holds MM2's records
    cps = [
        Checkpoint.from_record(r.key(), r.value())
        for r in read_all(b.bootstrap, f"{A}.checkpoints.internal")
    ]
    assert {(c.group, c.topic, c.upstream_offset) for c in cps} >= {("billing", remote, 250)}

    # the group's offsets were also committed in B (it has no members there)
    def synced() -> dict[int, int]:
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "billing"})
        try:
            tps = c.committed([TopicPartition(remote, p) for p in (0, 1)], timeout=10)
            return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}
        finally:
            c.close()

    committed = wait_for("billing's offsets synced to B", lambda: len(synced()) == 2 and synced())
    assert m.stop() == 0
    # failing over: a consumer of billing in B resumes from them and rereads at most 50 each
    c = Consumer(
        {"bootstrap.servers": b.bootstrap, "group.id": "billing", "auto.offset.reset": "earliest"}
    )
    c.subscribe([remote])
    seen: dict[int, list[bytes]] = {}
    deadline = time.monotonic() + WAIT_S
    while sum(map(len, seen.values())) < sum(500 - committed[p] for p in (0, 1)):
        assert time.monotonic() < deadline
        for msg in c.consume(500, timeout=0.2):
            if msg.error() is None:
                seen.setdefault(msg.partition(), []).append(msg.value())
    c.close()
    for p in (0, 1):
        assert expected_min <= committed[p] <= 250
        assert len(seen[p]) == 500 - committed[p] <= 300
        assert seen[p][-1] == b"e%d" % (998 + p)


def last_values(bootstrap: str, topic: str) -> dict[int, bytes]:
    """The value of the last record of each partition of `topic`."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False}
    )
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        ends = {p: _end_offset(c, topic, p) for p in md.partitions}
        c.assign([TopicPartition(topic, p, e - 1) for p, e in ends.items() if e > 0])
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + 10
        while len(out) < sum(1 for e in ends.values() if e > 0) and time.monotonic() < deadline:
            for m in c.consume(10, timeout=0.2):
                if m.error() is None:
                    out[m.partition()] = m.value()
        return out
    finally:
        c.close()


class SteadyWriter:
    """Writes `s0`, `s1`, ... to A's topic round-robin over 3 partitions, ~2,000 records/s,
    in a thread, until stopped."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap, self.topic = bootstrap, topic
        self.written = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        while not self.stopping.is_set():
            for _ in range(20):
                p.produce(self.topic, b"s%d" % self.written, partition=self.written % 3)
                self.written += 1
            p.poll(0.01)
        assert p.flush(30) == 0

    def stop(self) -> int:
        self.stopping.set()
        self.thread.join()
        return self.written


KILLS = 5


def kill_mid_stream(
    pair: Pair, topic: str, config: str, mirror: Callable[[str], Mirror], seed: int
) -> Mirror:
    """Mirror while A's `topic` is being written, SIGKILL the mirror KILLS times at random
    moments once it is copying, then let a last one run; returns that one once A's writes
    stopped."""
    create(pair.a.bootstrap, topic, 3)
    rng = random.Random(seed)
    writer = SteadyWriter(pair.a.bootstrap, topic)
    copying = f"{pair.A}->{pair.B}: copying"
    for _ in range(KILLS):
        m = mirror(config)
        wait_for("the mirror copying", lambda: copying in m.output())  # noqa: B023
        time.sleep(rng.uniform(0.2, 1.5))
        m.kill()
    m = mirror(config)
    wait_for("the last mirror copying", lambda: copying in m.output())
    writer.stop()
    return m


def test_sigkill_five_times_loses_nothing(pair: Pair, mirror: Callable[[str], Mirror]) -> None:
    a, b = pair.a, pair.b
    config = pair.config("{A}->{B}.enabled = true\n{A}->{B}.topics = stream\n")
    m = kill_mid_stream(pair, "stream", config, mirror, 15)
    last = last_values(a.bootstrap, "stream")
    remote = f"{pair.A}.stream"
    # copies are in order: once each partition's last record is on B, all are
    wait_for("every record copied", lambda: last_values(b.bootstrap, remote) == last, 60)
    assert m.stop() == 0
    source = by_partition(read_all(a.bootstrap, "stream"))
    copied = by_partition(read_all(b.bootstrap, remote))
    for p, values in source.items():
        first_seen: list[bytes] = []
        seen: set[bytes] = set()
        for v in copied[p]:
            if v not in seen:
                seen.add(v)
                first_seen.append(v)
        assert first_seen == values  # all there, in order; duplicates allowed


def free_port() -> int:
    return free_ports(1)[0]


def test_an_unreachable_cluster_is_reported_in_one_line_and_retried(
    pair: Pair, mirror: Callable[[str], Mirror]
) -> None:
    a, A, B = pair.a, pair.A, pair.B
    create(a.bootstrap, "pings", 1)
    produce(a.bootstrap, "pings", [(0, b"x")])
    b = Broker(port=free_port())
    # each attempt to reach B gives up after admin.timeout.ms
    config = "{A}->{B}.enabled = true\n{A}->{B}.topics = pings\nadmin.timeout.ms = 1000\n"
    m = mirror(pair.config(config, b_bootstrap=b.bootstrap))
    line = f"{A}->{B} source: cluster {B} unreachable at {b.bootstrap}"
    wait_for("the report", lambda: line in m.output())
    time.sleep(3)  # more attempts (1 s each, 1 s then 2 s apart): still one line
    assert m.output().count(line) == 1
    assert m.process is not None and m.process.poll() is None
    with b:  # B comes up on that port: the mirror gets there
        wait_for("A.pings on B", lambda: count(b.bootstrap, f"{A}.pings") == 1, 60)
        assert m.stop() == 0
    out = m.output()
    assert f"{A}->{B} source: running again" in out
    assert "Traceback" not in out


def test_topic_configs_follow_and_the_replication_factor_is_capped(
    pair: Pair, mirror: Callable[[str], Mirror]
) -> None:
    a, b, remote = pair.a, pair.b, f"{pair.A}.logs"
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    new = NewTopic("logs", 1, 1, config={"retention.ms": "123456", "min.insync.replicas": "1"})
    for f in admin.create_topics([new]).values():
        f.result(timeout=30)
    config = pair.config(
        "{A}->{B}.enabled = true\n{A}->{B}.topics = logs\nsync.topic.configs.interval.seconds = 1\n"
    ).replace("replication.factor = 1\n", "replication.factor = 3\n", 1)
    m = mirror(config)
    wait_for("A.logs on B", lambda: remote in topics(b.bootstrap))
    target = AdminClient({"bootstrap.servers": b.bootstrap})

    def remote_configs() -> Any:
        (future,) = target.describe_configs([ConfigResource("topic", remote)]).values()
        return future.result(timeout=30)

    configs = remote_configs()
    assert configs["retention.ms"].value == "123456"
    assert configs["min.insync.replicas"].is_default  # excluded by config.properties.exclude
    # a later change on A follows within sync.topic.configs.interval.seconds
    change = ConfigResource(
        "topic",
        "logs",
        incremental_configs=[
            ConfigEntry("retention.ms", "654321", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for f in admin.incremental_alter_configs([change]).values():
        f.result(timeout=30)
    wait_for("the change on B", lambda: remote_configs()["retention.ms"].value == "654321")
    assert m.stop() == 0
    assert f"replication factor 3 capped to 1, the number of brokers of {pair.B}" in m.output()


def test_two_processes_share_a_flow(pair: Pair, mirror: Callable[[str], Mirror]) -> None:
    a, b, remote = pair.a, pair.b, f"{pair.A}.shared"
    create(a.bootstrap, "shared", 4)
    config = pair.config(
        "{A}->{B}.enabled = true\n{A}->{B}.topics = shared\nemit.heartbeats.enabled = false\n"
    )
    copying = f"{pair.A}->{pair.B}: copying"
    first = mirror(config)
    wait_for("the first at work", lambda: f"{copying} 4 partitions" in first.output())
    second = mirror(config)
    wait_for("the second at work", lambda: f"{copying} 2 partitions" in second.output())
    wait_for("the first giving up half", lambda: f"{copying} 2 partitions" in first.output())
    produce(a.bootstrap, "shared", [(i % 4, b"v%d" % i) for i in range(2000)])
    wait_for("every record copied", lambda: count(b.bootstrap, remote) >= 2000)
    assert first.stop() == 0
    produce(a.bootstrap, "shared", [(i % 4, b"w%d" % i) for i in range(400)])
    wait_for("the rest, by the second alone", lambda: count(b.bootstrap, remote) >= 2400)
    assert second.stop() == 0
    copied = by_partition(read_all(b.bootstrap, remote))
    source = by_partition(read_all(a.bootstrap, "shared"))
    assert copied == source  # clean stops commit: nothing twice


def test_both_ways_under_the_identity_policy_copies_each_record_once(
    pair: Pair, mirror: Callable[[str], Mirror]
) -> None:
    a, b, A, B = pair.a, pair.b, pair.A, pair.B
    create(a.bootstrap, "ledger", 1)
    create(b.bootstrap, "ledger", 1)
    config = "replication.policy.class = IdentityReplicationPolicy\ntopics = ledger\n"
    config += "{A}->{B}.enabled = true\n{B}->{A}.enabled = true\nemit.heartbeats.enabled = false\n"
    m = mirror(pair.config(config))
    produce(a.bootstrap, "ledger", [(0, b"from-a-%d" % i) for i in range(50)])
    produce(b.bootstrap, "ledger", [(0, b"from-b-%d" % i) for i in range(50)])
    wait_for("A's records in B", lambda: count(b.bootstrap, "ledger") >= 100)
    wait_for("B's records in A", lambda: count(a.bootstrap, "ledger") >= 100)
    # a last record in each: once it is copied, so is everything before it in that partition,
    # the copies that came in included (had they been copied back, they would be there)
    produce(a.bootstrap, "ledger", [(0, b"end-a")])
    produce(b.bootstrap, "ledger", [(0, b"end-b")])
    wait_for("A's last record in B", lambda: count(b.bootstrap, "ledger") >= 102)
    wait_for("B's last record in A", lambda: count(a.bootstrap, "ledger") >= 102)
    assert m.stop() == 0
    for cluster, origin in ((a, b"from-b-"), (b, b"from-a-")):
        records = [r for r in read_all(cluster.bootstrap, "ledger") if r.value()[:4] != b"end-"]
        assert len(records) == 100  # 50 written here, 50 copied in, none back
        copies = [r for r in records if r.value().startswith(origin)]
        assert len(copies) == 50
        source = (B if origin == b"from-b-" else A).encode()
        assert all(r.headers() == [("gregor.mirror.provenance", source)] for r in copies)


def read_committed(bootstrap: str, topic: str) -> list[Any]:
    """Every committed record of `topic` (read_committed, to the last stable offset)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        ends = {p: _end_offset(c, topic, p) for p in md.partitions}
        c.assign([TopicPartition(topic, p, 0) for p in ends])
        out: list[Any] = []
        deadline = time.monotonic() + 20
        while ends and time.monotonic() < deadline:
            out += [m for m in c.consume(500, timeout=0.2) if m.error() is None]
            for tp in c.position([TopicPartition(topic, p) for p in list(ends)]):
                if tp.offset >= ends[tp.partition]:
                    ends.pop(tp.partition)
        assert not ends, f"{topic} not read to its end"
        return out
    finally:
        c.close()


def test_exactly_once_survives_five_sigkills_without_doubles(
    pair: Pair, mirror: Callable[[str], Mirror]
) -> None:
    a, b, remote = pair.a, pair.b, f"{pair.A}.stream-eos"
    config = "{A}->{B}.enabled = true\n{A}->{B}.topics = stream-eos\n"
    config += "{B}.exactly.once.source.support = enabled\nemit.heartbeats.enabled = false\n"
    m = kill_mid_stream(pair, "stream-eos", pair.config(config), mirror, 656)
    total = count(a.bootstrap, "stream-eos")
    wait_for("every record copied", lambda: len(read_committed(b.bootstrap, remote)) >= total, 60)
    assert m.stop() == 0
    source = by_partition(read_all(a.bootstrap, "stream-eos"))
    copied = by_partition(read_committed(b.bootstrap, remote))
    assert copied == source  # each record exactly once, in order
    positions = read_committed(b.bootstrap, f"mm2-offsets.{pair.B}.internal")
    assert positions and all(m.key().startswith(b'["MirrorSourceConnector",') for m in positions)


def test_tasks_max_splits_a_flow_within_one_process(
    pair: Pair, mirror: Callable[[str], Mirror]
) -> None:
    a, b, remote = pair.a, pair.b, f"{pair.A}.split"
    create(a.bootstrap, "split", 4)
    config = "{A}->{B}.enabled = true\n{A}->{B}.topics = split\nemit.heartbeats.enabled = false\n"
    m = mirror(pair.config(config + "{A}->{B}.tasks.max = 2\n"))
    copying = f"{pair.A}->{pair.B}: copying 2 partitions"
    wait_for("two tasks at work", lambda: m.output().count(copying) >= 2)
    produce(a.bootstrap, "split", [(i % 4, b"v%d" % i) for i in range(400)])
    wait_for("every record copied", lambda: count(b.bootstrap, remote) >= 400)
    assert m.stop() == 0
    assert by_partition(read_all(b.bootstrap, remote)) == by_partition(
        read_all(a.bootstrap, "split")
    )


def committed_on(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}
    finally:
        c.close()


def test_group_offsets_wait_while_the_group_is_active_in_the_target(
    pair: Pair, mirror: Callable[[str], Mirror]
) -> None:
    a, b, A = pair.a, pair.b, pair.A
    remote = f"{A}.busy"
    create(a.bootstrap, "busy", 1)
    produce(a.bootstrap, "busy", [(0, b"b%d" % i) for i in range(100)])
    config = "{A}->{B}.enabled = true\n{A}->{B}.topics = busy\nemit.heartbeats.enabled = false\n"
    m = mirror(pair.config(config + "{A}->{B}.sync.group.offsets.enabled = true\n"))
    wait_for("A.busy on B", lambda: count(b.bootstrap, remote) >= 100)
    # group `live` has a member in B, reading A.busy and committing nothing
    live = Consumer(
        {"bootstrap.servers": b.bootstrap, "group.id": "live", "enable.auto.commit": False}
    )
    live.subscribe([remote])
    wait_for("live's member assigned", lambda: live.poll(0.2) is not None or live.assignment())
    stop = threading.Event()

    def keep_polling() -> None:
        while not stop.is_set():
            live.poll(0.1)

    polling = threading.Thread(target=keep_polling)
    polling.start()
    try:
        # `live` commits in A first, then `zidle`: a sync round that moved zidle's offsets in
        # B had live's checkpoint too (rounds take groups in name order)
        commit(a.bootstrap, "live", "busy", {0: 60})
        commit(a.bootstrap, "zidle", "busy", {0: 60})
        wait_for("zidle synced", lambda: committed_on(b.bootstrap, "zidle", remote, 1))
        assert translate_offsets(b.bootstrap, A, "live")  # its checkpoint is there
        assert committed_on(b.bootstrap, "live", remote, 1) == {}  # its member's choice
    finally:
        stop.set()
        polling.join()
        live.close()
    # the member left: the group is idle in B, and the next round syncs it
    synced = wait_for("live synced", lambda: committed_on(b.bootstrap, "live", remote, 1))
    assert synced == committed_on(b.bootstrap, "zidle", remote, 1)
    assert m.stop() == 0
    # the mirror left the active group alone itself (the broker would have refused it too)
    assert "offsets of group live not synced" not in m.output()
