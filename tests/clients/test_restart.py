"""Restarts, clean (SIGTERM) and crashed (SIGKILL), each on a private broker: every record that
was acknowledged is there afterwards, at the offset it was acknowledged at, with its key,
headers and timestamp; offsets carry on densely; topics and their configs survive."""

from __future__ import annotations

import glob
import hashlib
import os
import re
import threading
import time

import confluent_kafka as ck
import pytest
from client_helpers import (
    DeliveryLog,
    check_exact,
    consume_confluent,
    ensure_topic,
    produce_all,
    wait_until,
)
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from gregor import Broker

PARTITIONS = 3
# Recent timestamps: with small segments, records older than log.retention.ms (7 days) would be
# due for deletion by time retention.
BASE_TS = (int(time.time()) - 3600) * 1000
# Small segments, so the logs being recovered span many segment files and indexes.
CONFIG = {"num.partitions": str(PARTITIONS), "log.segment.bytes": "262144"}


def records(start: int, n: int) -> list[dict]:
    return [
        {
            "key": b"key-%d" % i,
            # Hex of a hash: lz4 halves it at best, so 15,000 records fill several segments
            # whatever batch sizes the producer happens to form.
            "value": b"value-%d-" % i
            + hashlib.blake2b(b"%d" % i).hexdigest().encode() * (1 + i % 3),
            "headers": [("i", b"%d" % i)],
            "partition": i % PARTITIONS,
            "timestamp": BASE_TS + i,
        }
        for i in range(start, start + n)
    ]


def expected_of(recs: list[dict]) -> dict[int, list]:
    exp: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for r in recs:
        exp[r["partition"]].append((r["key"], r["value"], r["headers"], r["timestamp"]))
    return exp


def produce_acked(bootstrap: str, topic: str, recs: list[dict], **conf) -> None:
    # Batches well below log.segment.bytes: Kafka refuses a batch larger than a segment
    # (RECORD_LIST_TOO_LARGE), and librdkafka's default batch.size is 1 MB.
    p = ck.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "batch.size": 65536, **conf}
    )
    dr = DeliveryLog()
    produce_all(p, topic, recs, on_delivery=dr)
    assert p.flush(60) == 0
    assert dr.errors == [] and len(dr.acked) == len(recs)


def segment_files(broker: Broker, topic: str, partition: int) -> list[str]:
    return sorted(glob.glob(os.path.join(broker.data_dir, "logs", f"{topic}-{partition}", "*.log")))


@pytest.fixture
def broker():
    with Broker(config=CONFIG, log_level="INFO") as b:
        yield b


@pytest.mark.parametrize("clean", [True, False], ids=["sigterm", "sigkill"])
def test_restart_keeps_every_acked_record(broker: Broker, clean: bool) -> None:
    topic = "durable"
    ensure_topic(broker.bootstrap, topic, PARTITIONS)
    first = records(0, 15_000)
    produce_acked(broker.bootstrap, topic, first, **{"compression.type": "lz4"})
    assert len(segment_files(broker, topic, 0)) > 1, "expected several segments per partition"

    broker.restart(clean=clean)
    check_exact(
        consume_confluent(broker.bootstrap, topic, range(PARTITIONS), len(first)),
        expected_of(first),
    )

    # Offsets carry on after the restart, densely; the time index still answers.
    second = records(15_000, 3_000)
    produce_acked(broker.bootstrap, topic, second)
    both = first + second
    check_exact(
        consume_confluent(broker.bootstrap, topic, range(PARTITIONS), len(both)), expected_of(both)
    )
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        # Record i is in partition i % 3 at offset i // 3; ask for i = 9001 exactly.
        [res] = c.offsets_for_times([TopicPartition(topic, 9001 % 3, BASE_TS + 9001)], timeout=10)
        assert res.offset == 9001 // 3
    finally:
        c.close()

    # And once more, with the other kind of stop.
    broker.restart(clean=not clean)
    check_exact(
        consume_confluent(broker.bootstrap, topic, range(PARTITIONS), len(both)), expected_of(both)
    )


def test_sigkill_while_producing(broker: Broker) -> None:
    """Kill the broker in the middle of a stream of produces. The producer carries on after the
    restart; every record it was told was written (delivery report without error) is at the
    offset it was told, and each partition's log is dense and holds only records we sent."""
    topic = "killed-mid-stream"
    ensure_topic(broker.bootstrap, topic, PARTITIONS)
    p = ck.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 2,
            "batch.size": 65536,
            "acks": "all",
            "message.timeout.ms": 60_000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
        }
    )
    dr = DeliveryLog()
    total = 30_000
    sent = {r["value"]: r for r in records(0, total)}
    done = threading.Event()
    left: list[int] = []

    def run() -> None:
        for i, r in enumerate(sent.values()):
            p.produce(topic, on_delivery=dr, **r)
            if i % 100 == 99:
                p.poll(0.005)  # a steady stream over a second or more, not one burst
        left.append(p.flush(90))
        done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_until(lambda: len(dr.acked) >= 5_000, 30, "5000 acks before the kill", interval=0.002)
    acked_before_kill = len(dr.acked)
    broker.restart(clean=False)
    assert done.wait(120), "the producer did not finish after the restart"
    t.join()
    assert acked_before_kill < 0.9 * total, "the kill came after nearly everything was acknowledged"
    print(
        f"acked before the kill: {acked_before_kill}; after: {len(dr.acked)}; errors: {len(dr.errors)}"
    )
    assert left == [0], "records still undelivered after flush"
    assert len(dr.acked) + len(dr.errors) == total

    acked = {(part, off): value for part, off, value in dr.acked}
    assert len(acked) == len(dr.acked), "two records were acknowledged at the same offset"
    ends = {}
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        for part in range(PARTITIONS):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, part), timeout=10)
            assert lo == 0
            ends[part] = hi
    finally:
        c.close()
    got = consume_confluent(broker.bootstrap, topic, range(PARTITIONS), sum(ends.values()))
    at = {(r.partition, r.offset): r for r in got}
    for part in range(PARTITIONS):
        assert sorted(o for q, o in at if q == part) == list(range(ends[part]))
    for (part, off), value in acked.items():
        r = at.get((part, off))
        assert r is not None, f"acknowledged record {part}/{off} {value!r} is gone"
        exp = sent[value]
        assert (r.key, r.value, r.headers, r.timestamp) == (
            exp["key"],
            value,
            exp["headers"],
            exp["timestamp"],
        )
    for r in got:  # nothing we did not send; retries of unacknowledged batches may repeat some
        exp = sent.get(r.value)
        assert exp is not None and exp["partition"] == r.partition, f"unexpected record {r}"


def test_torn_tail_is_cut_at_the_last_whole_batch(broker: Broker) -> None:
    """SIGKILL, then the last batch of a partition is cut short (a torn write). On restart the
    partition ends at the last whole batch, and new records get the next offsets."""
    topic = "torn"
    ensure_topic(broker.bootstrap, topic, PARTITIONS)
    # A long linger: the five records of each flush() go out as one batch.
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
    batches = [[b"b%d-r%d" % (b, i) for i in range(5)] for b in range(4)]
    for b, batch in enumerate(batches):
        for v in batch:
            p.produce(topic, value=v, partition=0, timestamp=BASE_TS + b)
        assert p.flush(10) == 0
    broker.kill()
    [active] = segment_files(broker, topic, 0)
    size = os.path.getsize(active)
    with open(active, "r+b") as f:
        f.truncate(size - 7)
    broker.start()
    got = consume_confluent(broker.bootstrap, topic, [0], 15)
    assert [r.value for r in got] == [v for batch in batches[:3] for v in batch]
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, value=b"after", partition=0, timestamp=BASE_TS + 9)
    assert p.flush(10) == 0
    got = consume_confluent(broker.bootstrap, topic, [0], 16)
    assert [(r.offset, r.value) for r in got[-2:]] == [(14, b"b2-r4"), (15, b"after")]


def test_auto_created_topics_survive_restarts(broker: Broker) -> None:
    names = [f"auto-{i}" for i in range(5)]
    for n in names:
        ensure_topic(broker.bootstrap, n, PARTITIONS)
    md_before = ck.Producer({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    ids_before = {n: md_before.topics[n] for n in names}
    for clean in (True, False):
        broker.restart(clean=clean)
        md = ck.Producer({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        for n in names:
            assert n in md.topics, f"topic {n} lost after restart (clean={clean})"
            assert len(md.topics[n].partitions) == len(ids_before[n].partitions)
        assert md.cluster_id == md_before.cluster_id


def test_topic_configs_survive_restarts(broker: Broker) -> None:
    """Topics made by CreateTopics with configs, altered by IncrementalAlterConfigs, deleted by
    DeleteTopics: all of it as it was after a clean restart and after SIGKILL."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics(
        [
            NewTopic(
                "configured", 5, 1, config={"retention.ms": "3600000", "cleanup.policy": "compact"}
            ),
            NewTopic("doomed", 2, 1),
        ],
        request_timeout=15,
    )["configured"].result()
    res = ConfigResource(
        ResourceType.TOPIC,
        "configured",
        incremental_configs=[
            ConfigEntry("max.message.bytes", "200000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([res], request_timeout=15)[res].result()
    admin.delete_topics(["doomed"], request_timeout=15)["doomed"].result()

    def check() -> None:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = admin.list_topics(timeout=10).topics
        assert len(topics["configured"].partitions) == 5
        assert "doomed" not in topics
        r = ConfigResource(ResourceType.TOPIC, "configured")
        cfg = admin.describe_configs([r], request_timeout=10)[r].result()
        assert {
            k: cfg[k].value for k in ("retention.ms", "cleanup.policy", "max.message.bytes")
        } == {
            "retention.ms": "3600000",
            "cleanup.policy": "compact",
            "max.message.bytes": "200000",
        }
        live = [
            d
            for d in os.listdir(os.path.join(broker.data_dir, "logs"))
            if re.fullmatch(r"doomed-\d+", d)
        ]
        assert live == [], f"the deleted topic's partition directories came back: {live}"

    check()
    broker.restart(clean=True)
    check()
    broker.restart(clean=False)
    check()


def test_dynamic_broker_config_survives_restarts(broker: Broker) -> None:
    """A per-broker dynamic config (IncrementalAlterConfigs on BROKER "1") is described with its
    source, inherited by topics without their own value, kept across restarts, and removed by
    DELETE. A static-only config cannot be altered."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.retention.ms", "99999999", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([res], request_timeout=15)[res].result()
    admin.create_topics([NewTopic("inherits", 1, 1)], request_timeout=15)["inherits"].result()

    def describe(kind: ResourceType, name: str) -> dict:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        r = ConfigResource(kind, name)
        return admin.describe_configs([r], request_timeout=10)[r].result()

    sources_seen: set[int] = set()
    dynamic = {
        ck.admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        ck.admin.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
    }

    def check(value: str) -> None:
        b = describe(ResourceType.BROKER, "1")["log.retention.ms"]
        t = describe(ResourceType.TOPIC, "inherits")["retention.ms"]
        assert b.value == t.value == value, f"broker {b.value}, topic {t.value}, expected {value}"
        assert b.source in dynamic and t.source in dynamic, (b.source, t.source)
        sources_seen.update((b.source, t.source))

    check("99999999")
    broker.restart(clean=True)
    check("99999999")
    broker.restart(clean=False)
    check("99999999")

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
        ],
    )
    admin.incremental_alter_configs([res], request_timeout=15)[res].result()
    t = describe(ResourceType.TOPIC, "inherits")["retention.ms"]
    assert (t.value, t.source) == ("604800000", ck.admin.ConfigSource.DEFAULT_CONFIG.value)

    bad = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as ei:
        admin.incremental_alter_configs([bad], request_timeout=15)[bad].result()
    assert ei.value.args[0].code() in (
        ck.KafkaError.INVALID_REQUEST,
        ck.KafkaError.INVALID_CONFIG,
    ), str(ei.value)
    assert describe(ResourceType.BROKER, "1")["log.dirs"].value != "/elsewhere"

    # Kafka reports a config set on resource BROKER "1" as DYNAMIC_BROKER_CONFIG (2); only one set
    # on the cluster-wide default resource (BROKER "") is DYNAMIC_DEFAULT_BROKER_CONFIG (3).
    assert sources_seen == {ck.admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value}, (
        f"per-broker config reported with source(s) {sources_seen}, Kafka says 2 (DYNAMIC_BROKER_CONFIG)"
    )
