"""SIGKILL chaos on a three-node cluster (gregor.testing.cluster): while an idempotent acks=all
producer streams numbered records into a 3-partition, replication-factor-3 topic
(min.insync.replicas=2) and a group consumer commits its progress synchronously, a driver
SIGKILLs one running node every 6-8 s (sometimes the active controller), restarting it a few
seconds later, so two nodes always run. Afterwards, with every node back and every ISR full:

- every acknowledged record is in the log, none twice, and each partition holds the records
  acknowledged to it in the order they were acknowledged;
- the committed offsets the group reads back (OffsetFetch) never went backwards, and never
  fell below an acknowledged commit;
- each partition's segment files are byte for byte the same on all three brokers.

The driver's choices come from `random.Random(seed)`; the seed and the timeline of kills and
restarts are printed (`-s`) and named in every failure. Replay with
`GREGOR_CHAOS_SEED=<seed>`; `GREGOR_CHAOS_SECONDS=180` makes a longer soak (40 s of producing
by default, about 75 s in all)."""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from gregor.testing.cluster import LocalCluster
from tests.kraft_cluster.helpers import (
    FAST_REPLICATION,
    active_controller,
    all_brokers_seen,
    make_cluster,
    metadata_of,
    wait_for,
)

pytestmark = pytest.mark.slow  # a soak: 40 s of SIGKILLs by default

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TOPIC = "chaos"
PARTITIONS = 3
OFFSETS_PARTITIONS = 3
GROUP = "chaos-readers"
COMMIT_EVERY = 50  # records between two synchronous commits
SECONDS = float(os.environ.get("GREGOR_CHAOS_SECONDS", "40"))
SEED = int(os.environ.get("GREGOR_CHAOS_SEED", str(random.SystemRandom().randrange(1 << 32))))


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    config = {
        **FAST_REPLICATION,
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "offsets.topic.replication.factor": "3",
    }
    with make_cluster(tmp_path, config) as c:
        yield c


class Timeline:
    """What happened when, relative to the start, printed as it happens and kept for failures."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.start = time.monotonic()
        self.events: list[str] = []
        self.lock = threading.Lock()

    def note(self, what: str) -> None:
        line = f"{time.monotonic() - self.start:7.2f}s {what}"
        with self.lock:
            self.events.append(line)
        print(f"[chaos seed={self.seed}] {line}", flush=True)

    def __str__(self) -> str:
        with self.lock:
            return f"seed={self.seed} (GREGOR_CHAOS_SEED to replay)\n" + "\n".join(self.events)


def in_sync_everywhere(cluster: LocalCluster, topic: str, partitions: int) -> bool:
    """Every node's Metadata shows each partition of `topic` led, with all three in its ISR."""
    for node in cluster.ids:
        t = next((t for t in metadata_of(cluster, node).topics if t.name == topic), None)
        if t is None or len(t.partitions) != partitions:
            return False
        if any(p.leader_id < 0 or sorted(p.isr_nodes) != [1, 2, 3] for p in t.partitions):
            return False
    return True


def create_topic(cluster: LocalCluster) -> None:
    client = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 3000})
    spec = NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})
    for attempt in range(3):
        try:
            client.create_topics([spec], operation_timeout=10, request_timeout=10)[TOPIC].result(15)
            break
        except KafkaException as exc:
            if exc.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if attempt == 2:
                raise
            time.sleep(0.5)
    wait_for(
        f"{TOPIC} on three in-sync replicas", lambda: in_sync_everywhere(cluster, TOPIC, 3), 30
    )


class KillDriver(threading.Thread):
    """SIGKILLs one node, restarts it after 2-3.5 s, and starts the next cycle 6-8 s after the
    last kill; about one victim in three is the active controller. One node down at a time."""

    def __init__(self, cluster: LocalCluster, rng: random.Random, timeline: Timeline) -> None:
        super().__init__(name="kill-driver", daemon=True)
        self.cluster = cluster
        self.rng = rng
        self.timeline = timeline
        self.stop_event = threading.Event()
        self.kills = 0
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            self.stop_event.wait(self.rng.uniform(3.0, 5.0))
            while not self.stop_event.is_set():
                self.cycle()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(exc))
            self.timeline.note(f"driver failed: {exc!r}")

    def cycle(self) -> None:
        started = time.monotonic()
        period = self.rng.uniform(6.0, 8.0)
        downtime = self.rng.uniform(2.0, 3.5)
        aim_at_controller = self.rng.random() < 1 / 3
        pick = self.rng.random()
        running = sorted(self.cluster.running())
        victim = running[int(pick * len(running))]
        what = "node"
        if aim_at_controller:
            try:
                victim, what = self.cluster.active_controller(timeout_s=10), "active controller"
            except TimeoutError:
                what = "node (no agreed controller)"
        self.cluster.kill(victim)
        self.kills += 1
        self.timeline.note(f"SIGKILL {what} {victim}")
        time.sleep(downtime)
        self.cluster.start_node(victim)  # returns once it listens again
        self.timeline.note(f"restarted node {victim}")
        self.stop_event.wait(max(0.0, period - (time.monotonic() - started)))


class GroupReader(threading.Thread):
    """A group consumer committing its positions synchronously every COMMIT_EVERY records and
    reading them back with OffsetFetch (`committed`) after each commit."""

    def __init__(self, cluster: LocalCluster, timeline: Timeline) -> None:
        super().__init__(name="group-reader", daemon=True)
        self.timeline = timeline
        self.consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 1000,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                "log_level": 2,
            }
        )
        self.stop_event = threading.Event()
        self.assigned = threading.Event()
        self.read = 0
        self.acked_commits: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.commit_errors: list[str] = []
        self.seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}  # by OffsetFetch
        self.violations: list[str] = []

    def run(self) -> None:
        # Positions of the current assignment only: after a rebalance the consumer resumes
        # from the committed offsets, and committing a position from before it could move
        # a committed offset back once the records after it are read again.
        positions: dict[int, int] = {}

        def assigned(consumer: Any, partitions: list[Any]) -> None:
            positions.clear()
            self.assigned.set()

        def revoked(consumer: Any, partitions: list[Any]) -> None:
            positions.clear()

        self.consumer.subscribe([TOPIC], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        try:
            since_commit = 0
            while not self.stop_event.is_set():
                msg = self.consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                positions[msg.partition()] = msg.offset() + 1
                self.read += 1
                since_commit += 1
                if since_commit >= COMMIT_EVERY:
                    since_commit = 0
                    self.commit(dict(positions))
                    self.check()
            self.check()
        finally:
            self.consumer.close()

    def commit(self, positions: dict[int, int]) -> None:
        offsets = [TopicPartition(TOPIC, p, o) for p, o in sorted(positions.items())]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self.commit_errors.append(str(exc.args[0]))
            self.timeline.note(f"commit failed: {exc.args[0]}")
            return
        for p, o in positions.items():
            self.acked_commits[p].append(o)

    def check(self) -> None:
        """Each partition's committed offset as OffsetFetch answers it: never below the last
        answer, nor below the last acknowledged commit."""
        try:
            answer = self.consumer.committed(
                [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=5
            )
        except KafkaException:
            return  # the coordinator is moving: the next check will tell
        for tp in answer:
            if tp.error is not None or tp.offset < 0:
                continue
            seen, acked = self.seen[tp.partition], self.acked_commits[tp.partition]
            if seen and tp.offset < seen[-1]:
                self.violations.append(
                    f"partition {tp.partition}: committed {tp.offset} after {seen[-1]}"
                )
                self.timeline.note(f"committed offset went back: {self.violations[-1]}")
            if acked and tp.offset < acked[-1]:
                self.violations.append(
                    f"partition {tp.partition}: committed {tp.offset} below acknowledged {acked[-1]}"
                )
                self.timeline.note(f"acknowledged commit lost: {self.violations[-1]}")
            seen.append(tp.offset)


def produce_for(
    cluster: LocalCluster, seconds: float, timeline: Timeline
) -> tuple[dict[int, list[int]], int, list[str], list[str], list[str]]:
    """Numbered records (key and value: the number) for `seconds`, at most 200 in flight; the
    numbers acknowledged per partition in acknowledgement order, how many were sent, the
    delivery failures (not acknowledged: allowed to be missing or present), the client's
    non-fatal errors (brokers going away) and what went wrong for good (a fatal error, such as
    an idempotent producer finding its sequence broken, or records never settled), which ends
    the stream early."""
    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 20000,
            "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            "error_cb": lambda err: errors.append(f"client error: {err}"),
            "log_level": 2,  # the timeline, not every refused connection
        }
    )
    acked: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    failed: list[str] = []
    settled = 0

    def delivered(err: Any, msg: Any) -> None:
        nonlocal settled
        settled += 1
        if err is None:
            acked[msg.partition()].append(int(msg.value()))
        else:
            failed.append(f"{int(msg.value())}: {err}")

    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if sent - settled >= 200:
            producer.poll(0.01)
            continue
        key = str(sent).encode()
        try:
            producer.produce(TOPIC, key=key, value=key, on_delivery=delivered)
        except KafkaException as exc:
            timeline.note(f"producer failed: {exc.args[0]}")
            break
        sent += 1
        producer.poll(0)
        time.sleep(0.002)
    timeline.note(f"producer stopped after {sent} records, flushing")
    left = producer.flush(30)
    broken = [e for e in errors if "fatal" in e.lower()]
    if left:
        broken.append(f"{left} records neither acknowledged nor failed after 30 s")
    return acked, sent, failed, [e for e in errors if e not in broken], broken


def read_everything(cluster: LocalCluster) -> dict[int, list[int]]:
    """Each partition from offset 0 up to its high watermark, with a fresh consumer."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "chaos-checker",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        values: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        next_offset = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 60
        while any(next_offset[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            values[msg.partition()].append(int(msg.value()))
            next_offset[msg.partition()] = msg.offset() + 1
        assert all(next_offset[p] >= ends[p] for p in ends), (next_offset, ends)
        return values
    finally:
        consumer.close()


def partition_bytes(cluster: LocalCluster, node: int, partition: int) -> bytes:
    """Every byte of one partition's segment files on `node`, in offset order."""
    directory = os.path.join(cluster.data_dir(node), "logs", f"{TOPIC}-{partition}")
    out = b""
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".log")):
        with open(os.path.join(directory, name), "rb") as f:
            out += f.read()
    return out


def test_sigkill_chaos_loses_no_acknowledged_record_nor_commit(cluster: LocalCluster) -> None:
    timeline = Timeline(SEED)
    print(f"\n[chaos] seed={SEED} seconds={SECONDS}", flush=True)
    active_controller(cluster)
    all_brokers_seen(cluster)
    create_topic(cluster)

    reader = GroupReader(cluster, timeline)
    reader.start()
    assert reader.assigned.wait(30), "the group consumer got no assignment"
    wait_for(
        "__consumer_offsets on three in-sync replicas",
        lambda: in_sync_everywhere(cluster, "__consumer_offsets", OFFSETS_PARTITIONS),
        30,
    )
    timeline.note("topic in sync, group assigned: chaos starts")

    driver = KillDriver(cluster, random.Random(SEED), timeline)
    driver.start()
    try:
        acked, sent, failures, client_errors, broken = produce_for(cluster, SECONDS, timeline)
    finally:
        driver.stop_event.set()
        driver.join(30)
    assert not driver.errors, f"kill driver failed: {driver.errors}\n{timeline}"
    assert sorted(cluster.running()) == [1, 2, 3], f"{cluster.running()}\n{timeline}"

    wait_for(
        "every partition's ISR full again",
        lambda: (
            in_sync_everywhere(cluster, TOPIC, PARTITIONS)
            and in_sync_everywhere(cluster, "__consumer_offsets", OFFSETS_PARTITIONS)
        ),
        60,
    )
    timeline.note("every node back, every ISR full")
    reader.stop_event.set()
    reader.join(30)

    log = read_everything(cluster)
    in_log = [n for p in range(PARTITIONS) for n in log[p]]
    acked_all = {n for p in range(PARTITIONS) for n in acked[p]}
    lost = sorted(acked_all - set(in_log))
    doubled = sorted(n for n, times in Counter(in_log).items() if times > 1)
    figures = (
        f"kills={driver.kills} sent={sent} acknowledged={len(acked_all)} "
        f"not acknowledged={len(failures)} client errors={len(client_errors)} in log={len(in_log)} lost={len(lost)} "
        f"duplicated={len(doubled)} read by group={reader.read} "
        f"commits acknowledged={sum(len(v) for v in reader.acked_commits.values())} "
        f"commit errors={len(reader.commit_errors)}"
    )
    timeline.note(figures)
    assert driver.kills >= min(3, int(SECONDS // 10)), f"too few kills\n{timeline}"
    assert lost == [], f"acknowledged records missing: {lost[:20]}...\n{timeline}"
    assert doubled == [], f"records twice in the log: {doubled[:20]}...\n{timeline}"
    for p in range(PARTITIONS):
        acked_here = set(acked[p])
        order = [n for n in log[p] if n in acked_here]
        assert order == acked[p], f"partition {p}: acknowledged order not kept\n{timeline}"
    assert broken == [], f"producer: {broken}\n{timeline}"
    assert reader.violations == [], f"{reader.violations}\n{timeline}"
    assert any(reader.seen.values()), f"OffsetFetch never answered\n{timeline}"

    for p in range(PARTITIONS):
        wait_for(
            f"partition {p}'s segments equal on the three brokers",
            lambda p=p: len({partition_bytes(cluster, n, p) for n in cluster.ids}) == 1,
            20,
        )
