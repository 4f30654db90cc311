"""Transactions survive the SIGKILL of their coordinator's broker (multi-process, confluent-kafka).

`__transaction_state` has replication factor 3 and the data topics too (min.insync.replicas=2),
so the broker that takes a transactional id's partition over loads the state its predecessor
replicated:

- killed with the transaction open (before `commit_transaction`): librdkafka finds the new
  coordinator and sends EndTxn there; the transaction is still Ongoing with every partition it
  added (AddPartitionsToTxn was answered once replicated), so the commit succeeds, as in Kafka,
  and read_committed sees exactly its records;
- killed right after `commit_transaction` returned: the new coordinator loads PrepareCommit
  (or CompleteCommit) and writes whatever markers are still owed, so read_committed sees them;
- consume-transform-produce with `send_offsets_to_transaction`, the coordinator killed mid-run
  and restarted: every input record is in the output exactly once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gregor.protocol import api_keys
from gregor.protocol.messages import FindCoordinatorRequest
from gregor.testing.cluster import LocalCluster
from gregor.testing.raw_client import RawClient
from tests.kraft_cluster.helpers import (
    FAST_REPLICATION,
    all_brokers_seen,
    make_cluster,
    metadata_of,
    wait_for,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

INTERNAL = 3  # partitions of __transaction_state and __consumer_offsets
CONFIG = {
    **FAST_REPLICATION,  # broker.session.timeout.ms=3000, replica.lag.time.max.ms=2000
    "transaction.state.log.num.partitions": str(INTERNAL),
    "offsets.topic.num.partitions": str(INTERNAL),
}
TXN_TIMEOUT_MS = 20000  # well above a failover (session timeout + election + load)


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[LocalCluster]:
    with make_cluster(tmp_path, CONFIG) as c:
        ready(c)
        yield c


def find_coordinator(cluster: LocalCluster, key: str, key_type: int) -> int | None:
    """The coordinator a running node names for a transactional id (key_type 1) or group (0)."""
    for node in cluster.running():
        try:
            with RawClient(cluster.bootstrap_of(node), timeout_s=5) as raw:
                request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
                answer = raw.call(api_keys.FIND_COORDINATOR, 4, request).coordinators[0]
        except OSError:
            continue
        if answer.error_code == 0 and answer.node_id in cluster.running():
            return int(answer.node_id)
    return None


def in_sync(cluster: LocalCluster, topic: str, partitions: int, replicas: list[int]) -> bool:
    """Every running node's Metadata: each partition of `topic` led, with `replicas` in sync."""
    for node in cluster.running():
        t = next((t for t in metadata_of(cluster, node).topics if t.name == topic), None)
        if t is None or len(t.partitions) != partitions:
            return False
        for p in t.partitions:
            if p.leader_id not in replicas or sorted(p.isr_nodes) != replicas:
                return False
    return True


def ready(cluster: LocalCluster) -> None:
    """Three unfenced brokers; both internal topics made (FindCoordinator creates them) with
    three in-sync replicas for each partition."""
    all_brokers_seen(cluster)
    for key_type, topic in ((0, "__consumer_offsets"), (1, "__transaction_state")):
        wait_for(
            f"a coordinator for key type {key_type}",
            lambda k=key_type: find_coordinator(cluster, "x", k),
            30,
        )
        wait_for(
            f"{topic} on three in-sync replicas",
            lambda t=topic: in_sync(cluster, t, INTERNAL, [1, 2, 3]),
            30,
        )


def create_topic(cluster: LocalCluster, name: str) -> None:
    """Three partitions, replication factor 3, min.insync.replicas=2; waits for the ISRs."""
    client = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 3000})
    spec = NewTopic(name, 3, 3, config={"min.insync.replicas": "2"})
    for attempt in range(3):
        # librdkafka drops a broker handle a Metadata answer leaves out: try again
        try:
            client.create_topics([spec], operation_timeout=10, request_timeout=10)[name].result(15)
            break
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if attempt == 2:
                raise
            time.sleep(0.5)
    wait_for(f"{name} on three in-sync replicas", lambda: in_sync(cluster, name, 3, [1, 2, 3]), 30)


def transactional_producer(bootstrap: str, transactional_id: str) -> Any:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    producer.init_transactions(30)
    return producer


def produce_to_every_partition(
    producer: Any, topic: str, prefix: str, per_partition: int
) -> list[str]:
    values = []
    for p in range(3):
        for i in range(per_partition):
            value = f"{prefix}-{p}-{i}"
            producer.produce(topic, value=value.encode(), partition=p)
            values.append(value)
    assert producer.flush(20) == 0  # every record acknowledged (acks=all) before what follows
    return values


def commit(producer: Any, timeout_s: float = 60.0) -> None:
    """commit_transaction, called again on a retriable error as librdkafka documents it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            producer.commit_transaction(max(1.0, deadline - time.monotonic()))
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() >= deadline:
                raise


def read(
    bootstrap: str, topic: str, enough: Callable[[list[str]], bool], timeout_s: float = 45.0
) -> list[str]:
    """read_committed values of the three partitions from the start, until `enough` says so,
    then one more second (so that a duplicate would show)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(3)])
    values: list[str] = []
    deadline = time.monotonic() + timeout_s
    linger_until = None
    try:
        while time.monotonic() < deadline:
            if linger_until is None and enough(values):
                linger_until = time.monotonic() + 1.0
            if linger_until is not None and time.monotonic() >= linger_until:
                break
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value().decode())
    finally:
        consumer.close()
    return values


def survivors_bootstrap(cluster: LocalCluster, dead: int) -> str:
    return ",".join(cluster.bootstrap_of(n) for n in cluster.ids if n != dead)


def took_over(cluster: LocalCluster, tid: str, dead: int) -> int:
    def other() -> int | None:
        node = find_coordinator(cluster, tid, 1)
        return node if node != dead else None

    return int(wait_for("a new transaction coordinator", other, 30))


def test_a_transaction_open_when_its_coordinator_is_killed_commits(cluster: LocalCluster) -> None:
    create_topic(cluster, "payments")
    tid = "payer-1"
    producer = transactional_producer(cluster.bootstrap, tid)
    coordinator = find_coordinator(cluster, tid, 1)
    assert coordinator is not None

    producer.begin_transaction()
    written = produce_to_every_partition(producer, "payments", "open", 10)
    cluster.kill(coordinator)  # SIGKILL with the transaction open, before EndTxn
    started = time.monotonic()
    # EndTxn fails against the dead broker; librdkafka looks the coordinator up again and the
    # broker that took __transaction_state over (state Ongoing, replicated) commits
    commit(producer)
    print(f"\ncommit_transaction returned {time.monotonic() - started:.2f} s after the kill")
    new_coordinator = took_over(cluster, tid, coordinator)
    assert new_coordinator != coordinator

    bootstrap = survivors_bootstrap(cluster, coordinator)
    seen = read(bootstrap, "payments", lambda v: len(v) >= len(written))
    assert sorted(seen) == sorted(written)

    # the transaction is finished: the next one commits through the new coordinator
    producer.begin_transaction()
    more = produce_to_every_partition(producer, "payments", "next", 2)
    commit(producer)
    seen = read(bootstrap, "payments", lambda v: set(more) <= set(v))
    assert sorted(seen) == sorted(written + more)
    producer.flush(5)


def test_markers_owed_when_the_coordinator_dies_are_written_by_its_successor(
    cluster: LocalCluster,
) -> None:
    create_topic(cluster, "ledger")
    tid = "clerk-1"
    producer = transactional_producer(cluster.bootstrap, tid)
    coordinator = find_coordinator(cluster, tid, 1)
    assert coordinator is not None

    producer.begin_transaction()
    written = produce_to_every_partition(producer, "ledger", "entry", 10)
    producer.commit_transaction(30)
    cluster.kill(coordinator)  # right after EndTxn was answered: markers may still be owed

    new_coordinator = took_over(cluster, tid, coordinator)
    bootstrap = survivors_bootstrap(cluster, coordinator)
    seen = read(bootstrap, "ledger", lambda v: len(v) >= len(written))
    assert sorted(seen) == sorted(written)
    with open(f"{cluster.data_dir(new_coordinator)}/broker.log", encoding="utf-8") as f:
        rewritten = f"transactional id {tid} was left in PrepareCommit" in f.read()
    print(
        f"\nthe new coordinator {'wrote the markers owed' if rewritten else 'found CompleteCommit'}"
    )

    producer.begin_transaction()
    more = produce_to_every_partition(producer, "ledger", "more", 2)
    commit(producer)
    seen = read(bootstrap, "ledger", lambda v: set(more) <= set(v))
    assert sorted(seen) == sorted(written + more)
    producer.flush(5)


def rewind(consumer: Any, topic: str) -> None:
    """Back to the committed offsets (after an abort, the positions are past aborted work)."""
    committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
    consumer.assign(
        [
            TopicPartition(
                topic,
                tp.partition,
                tp.offset if tp.offset >= 0 else confluent_kafka.OFFSET_BEGINNING,
            )
            for tp in committed
        ]
    )


def test_consume_transform_produce_is_exactly_once_across_a_coordinator_kill(
    cluster: LocalCluster,
) -> None:
    create_topic(cluster, "inputs")
    create_topic(cluster, "outputs")
    total = 300
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(total):
        plain.produce("inputs", value=f"in-{i}".encode(), partition=i % 3)
    assert plain.flush(20) == 0

    tid = "relay-1"
    producer = transactional_producer(cluster.bootstrap, tid)
    coordinator = find_coordinator(cluster, tid, 1)
    assert coordinator is not None
    # the group's coordinator elsewhere: the kill is the transaction coordinator's alone
    group = next(
        g
        for g in (f"pipeline-{i}" for i in range(1000))
        if find_coordinator(cluster, g, 0) != coordinator
    )
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    consumer.assign(
        [TopicPartition("inputs", p, confluent_kafka.OFFSET_BEGINNING) for p in range(3)]
    )

    done = 0  # input records whose transaction committed
    transactions = aborts = 0
    killed_at: float | None = None
    restarted = False
    deadline = time.monotonic() + 60
    try:
        while done < total and time.monotonic() < deadline:
            msgs = [m for m in consumer.consume(20, 0.5) if m.error() is None]
            if not msgs:
                continue
            if killed_at is not None and not restarted:
                cluster.start_node(coordinator)  # once a transaction committed without it
                restarted = True
            try:
                producer.begin_transaction()
                for m in msgs:
                    producer.produce(
                        "outputs", value=m.value().replace(b"in-", b"out-"), partition=m.partition()
                    )
                if transactions == 3 and killed_at is None:
                    producer.flush(20)
                    cluster.kill(coordinator)  # mid-transaction: records written, offsets not yet
                    killed_at = time.monotonic()
                positions = consumer.position([TopicPartition("inputs", p) for p in range(3)])
                producer.send_offsets_to_transaction(
                    positions, consumer.consumer_group_metadata(), 60
                )
                commit(producer)
                done += len(msgs)
                transactions += 1
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
                aborts += 1
                producer.abort_transaction(30)
                rewind(consumer, "inputs")
    finally:
        consumer.close()
    assert killed_at is not None and restarted
    print(
        f"\n{transactions} transactions committed, {aborts} aborted; coordinator {coordinator} killed and restarted"
    )
    assert done == total

    outputs = read(cluster.bootstrap, "outputs", lambda v: len(v) >= total)
    assert sorted(outputs) == sorted(f"out-{i}" for i in range(total))
    producer.flush(5)
