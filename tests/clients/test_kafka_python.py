"""kafka-python 3.x against a real gregor broker: produce/consume round trips, cross-client
with confluent-kafka, ListOffsets by time, and KafkaAdminClient.

kafka-python enables idempotence by default, which needs InitProducerId. Until the broker
serves it, these producers are made with enable_idempotence=False (decided by asking the broker
its ApiVersions, so they switch to the default by themselves once it lands), and
`test_default_idempotent_producer` is an xfail saying so.

kafka-python's snappy/lz4/zstd need python-snappy/lz4/zstandard, which are not installed here:
its codecs are covered for none and gzip; the others are covered by confluent-kafka and aiokafka.
"""

from __future__ import annotations

import glob
import os
import socket
import struct
import time
import uuid

import confluent_kafka as ck
import kafka.errors as kerr
import pytest
from client_helpers import (
    INIT_PRODUCER_ID,
    SHARED_PARTITIONS,
    Rec,
    check_exact,
    consume_confluent,
    ensure_topic,
    frame,
    recv_frame,
    request_header,
    served_apis,
)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

BASE_TS = 1_600_000_000_000


@pytest.fixture(scope="module")
def idempotence(bootstrap: str) -> bool:
    return INIT_PRODUCER_ID in served_apis(bootstrap)


def producer(bootstrap: str, idempotence: bool, **extra) -> KafkaProducer:
    conf = {"bootstrap_servers": bootstrap, "enable_idempotence": idempotence, "linger_ms": 5}
    if not idempotence:
        conf["acks"] = 1
    conf.update(extra)
    return KafkaProducer(**conf)


def consume_kp(
    bootstrap: str, topic: str, partitions, count: int, timeout: float = 60.0, start: int | None = 0
) -> list[Rec]:
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        if start is not None:
            for tp in tps:
                c.seek(tp, start)
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            assert time.monotonic() < deadline, f"read {len(out)} of {count} records in {timeout}s"
            for _tp, msgs in c.poll(timeout_ms=200, max_records=10_000).items():
                for m in msgs:
                    assert m.timestamp_type == 0, f"timestamp type {m.timestamp_type}"
                    out.append(
                        Rec(m.partition, m.offset, m.key, m.value, list(m.headers), m.timestamp)
                    )
        extra = c.poll(timeout_ms=300)
        assert not any(extra.values()), f"unexpected extra records: {extra}"
        return out
    finally:
        c.close()


def kp_records(n: int, tag: str) -> list[dict]:
    recs = []
    for i in range(n):
        recs.append(
            {
                "key": None if i % 41 == 0 else f"k{i}".encode(),
                "value": None if i % 43 == 0 and i % 41 else f"{tag}-{i}".encode() * (1 + i % 5),
                "headers": [] if i % 10 == 0 else [("i", str(i).encode()), ("tag", tag.encode())],
                "partition": i % SHARED_PARTITIONS,
                "timestamp_ms": BASE_TS + i,
            }
        )
    return recs


def expected_of(recs: list[dict]) -> dict[int, list]:
    exp: dict[int, list] = {p: [] for p in range(SHARED_PARTITIONS)}
    for r in recs:
        exp[r["partition"]].append((r["key"], r["value"], r["headers"], r["timestamp_ms"]))
    return exp


def send_all(p: KafkaProducer, topic: str, recs: list[dict]) -> list:
    futures = [p.send(topic, **r) for r in recs]
    p.flush(30)
    return [f.get(timeout=10) for f in futures]


@pytest.mark.parametrize("codec", [None, "gzip"])
def test_roundtrip(bootstrap: str, topic: str, idempotence: bool, codec: str | None) -> None:
    ensure_topic(bootstrap, topic)
    recs = kp_records(4000, f"kp-{codec}")
    p = producer(bootstrap, idempotence, compression_type=codec)
    try:
        metas = send_all(p, topic, recs)
    finally:
        p.close()
    exp = expected_of(recs)
    assert sorted((m.partition, m.offset) for m in metas) == sorted(
        (q, o) for q in exp for o in range(len(exp[q]))
    )
    check_exact(consume_kp(bootstrap, topic, range(SHARED_PARTITIONS), len(recs)), exp)


def test_kafka_python_to_confluent(bootstrap: str, topic: str, idempotence: bool) -> None:
    ensure_topic(bootstrap, topic)
    recs = kp_records(2000, "kp2ck")
    p = producer(bootstrap, idempotence, compression_type="gzip")
    try:
        send_all(p, topic, recs)
    finally:
        p.close()
    check_exact(
        consume_confluent(bootstrap, topic, range(SHARED_PARTITIONS), len(recs)), expected_of(recs)
    )


def test_confluent_to_kafka_python(bootstrap: str, topic: str) -> None:
    ensure_topic(bootstrap, topic)
    recs = kp_records(2000, "ck2kp")
    cp = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": "gzip", "linger.ms": 5})
    for r in recs:
        cp.produce(
            topic,
            key=r["key"],
            value=r["value"],
            headers=r["headers"],
            partition=r["partition"],
            timestamp=r["timestamp_ms"],
        )
    assert cp.flush(30) == 0
    check_exact(
        consume_kp(bootstrap, topic, range(SHARED_PARTITIONS), len(recs)), expected_of(recs)
    )


def test_default_idempotent_producer(bootstrap: str, topic: str, idempotence: bool) -> None:
    if not idempotence:
        pytest.xfail(
            "the broker does not serve InitProducerId yet: kafka-python's default (idempotent) producer cannot work"
        )
    ensure_topic(bootstrap, topic)
    recs = kp_records(500, "idem")
    p = KafkaProducer(bootstrap_servers=bootstrap)  # library defaults: idempotent, acks=all
    try:
        send_all(p, topic, recs)
    finally:
        p.close()
    check_exact(
        consume_kp(bootstrap, topic, range(SHARED_PARTITIONS), len(recs)), expected_of(recs)
    )


def test_offsets_for_times_and_ends(bootstrap: str, topic: str, idempotence: bool) -> None:
    ensure_topic(bootstrap, topic)
    p = producer(bootstrap, idempotence, batch_size=200)
    try:
        send_all(
            p,
            topic,
            [
                {"value": b"x%d" % i, "partition": 0, "timestamp_ms": BASE_TS + 10 * i}
                for i in range(60)
            ],
        )
    finally:
        p.close()
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        assert c.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert c.end_offsets([tp0, tp1]) == {tp0: 60, tp1: 0}
        for ts, want in {BASE_TS - 5: 0, BASE_TS: 0, BASE_TS + 101: 11, BASE_TS + 590: 59}.items():
            res = c.offsets_for_times({tp0: ts})[tp0]
            assert res is not None and res.offset == want, f"{ts - BASE_TS:+d}: {res}"
            assert res.timestamp == BASE_TS + 10 * want
        # After the last record's time, and on an empty partition: no offset.
        assert c.offsets_for_times({tp0: BASE_TS + 591, tp1: BASE_TS}) == {tp0: None, tp1: None}
    finally:
        c.close()


# -- admin ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(bootstrap: str):
    a = KafkaAdminClient(bootstrap_servers=bootstrap)
    yield a
    a.close()


def _topic_desc(admin: KafkaAdminClient, topic: str) -> dict:
    [d] = admin.describe_topics([topic])
    return d


def _topic_configs(admin: KafkaAdminClient, topic: str, config_filter: str = "all") -> dict:
    res = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter=config_filter
    )
    return res["topic"][topic]


def test_admin_create_describe_alter_delete(
    admin: KafkaAdminClient, bootstrap: str, topic: str
) -> None:
    admin.create_topics(
        {
            topic: {
                "num_partitions": 3,
                "replication_factor": 1,
                "configs": {"retention.bytes": "1048576"},
            }
        }
    )
    d = _topic_desc(admin, topic)
    assert d["error_code"] == 0
    parts = sorted(d["partitions"], key=lambda p: p["partition_index"])
    assert [
        (p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"]) for p in parts
    ] == [(i, 1, [1], [1]) for i in range(3)]
    assert topic in admin.list_topics()

    cfg = _topic_configs(admin, topic)
    assert cfg["retention.bytes"]["value"] == "1048576"
    assert cfg["retention.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert cfg["cleanup.policy"]["value"] == "delete"
    assert cfg["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    assert set(_topic_configs(admin, topic, "modified")) == {"retention.bytes"}

    result = admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "7200000"})]
    )
    assert result == {"topic": {topic: "OK"}}
    cfg = _topic_configs(admin, topic, "modified")
    assert {k: v["value"] for k, v in cfg.items()} == {
        "retention.bytes": "1048576",
        "retention.ms": "7200000",
    }

    admin.delete_topics([topic])
    deadline = time.monotonic() + 10
    while topic in admin.list_topics():
        assert time.monotonic() < deadline, "deleted topic still listed"
        time.sleep(0.05)


def test_admin_create_validate_only(admin: KafkaAdminClient, topic: str) -> None:
    admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}}, validate_only=True)
    assert topic not in admin.list_topics()


@pytest.mark.parametrize(
    "spec, error",
    [
        ({"num_partitions": 1, "replication_factor": 3}, kerr.InvalidReplicationFactorError),
        (
            {
                "num_partitions": 1,
                "replication_factor": 1,
                "configs": {"min.insync.replicas": "zero"},
            },
            kerr.InvalidConfigurationError,
        ),
    ],
    ids=["rf3", "bad-config"],
)
def test_admin_create_errors(admin: KafkaAdminClient, topic: str, spec: dict, error: type) -> None:
    with pytest.raises(error):
        admin.create_topics({topic: spec})
    assert topic not in admin.list_topics()


def test_admin_create_existing(admin: KafkaAdminClient, topic: str) -> None:
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    with pytest.raises(kerr.TopicAlreadyExistsError):
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})
    result = admin.create_topics(
        {topic: {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False
    )
    [t] = result["topics"]
    assert t["error_code"] == kerr.TopicAlreadyExistsError.errno


def test_admin_create_partitions(admin: KafkaAdminClient, topic: str) -> None:
    admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}})
    admin.create_partitions({topic: 6})
    assert len(_topic_desc(admin, topic)["partitions"]) == 6
    with pytest.raises(kerr.InvalidPartitionsError):
        admin.create_partitions({topic: 4})
    assert len(_topic_desc(admin, topic)["partitions"]) == 6


def test_admin_delete_records(
    admin: KafkaAdminClient, bootstrap: str, topic: str, idempotence: bool
) -> None:
    ensure_topic(bootstrap, topic)
    p = producer(bootstrap, idempotence)
    try:
        send_all(
            p,
            topic,
            [{"value": b"d%d" % i, "partition": 2, "timestamp_ms": BASE_TS + i} for i in range(20)],
        )
    finally:
        p.close()
    tp = TopicPartition(topic, 2)
    result = admin.delete_records({tp: 15})
    assert result[tp]["low_watermark"] == 15

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
    )
    try:
        assert c.beginning_offsets([tp]) == {tp: 15}
        c.assign([tp])
        c.seek(tp, 3)
        with pytest.raises(kerr.OffsetOutOfRangeError):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                got = c.poll(timeout_ms=200)
                assert not any(got.values()), f"delivered deleted records: {got}"
    finally:
        c.close()

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        c.assign([tp])
        c.seek(tp, 3)
        got: list = []
        deadline = time.monotonic() + 10
        while len(got) < 5:
            assert time.monotonic() < deadline, got
            for msgs in c.poll(timeout_ms=200).values():
                got.extend((m.offset, m.value) for m in msgs)
        assert got == [(o, b"d%d" % o) for o in range(15, 20)]
    finally:
        c.close()


def test_admin_errors_on_missing_topic(admin: KafkaAdminClient) -> None:
    name = f"missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(kerr.UnknownTopicOrPartitionError):
        admin.delete_topics([name])
    with pytest.raises(kerr.UnknownTopicOrPartitionError):
        admin.create_partitions({name: 3})


def test_admin_describe_cluster_log_dirs_and_topic_partitions(
    admin: KafkaAdminClient, shared_broker, bootstrap: str, topic: str, idempotence: bool
) -> None:
    ensure_topic(bootstrap, topic)
    p = producer(bootstrap, idempotence)
    try:
        send_all(
            p,
            topic,
            [
                {"value": b"s%d" % i * 50, "partition": 1, "timestamp_ms": BASE_TS + i}
                for i in range(100)
            ],
        )
    finally:
        p.close()

    cluster = admin.describe_cluster()
    assert (
        cluster["cluster_id"]
        == ck.Producer({"bootstrap.servers": bootstrap}).list_topics(timeout=10).cluster_id
    )
    assert cluster["controller_id"] == 1
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (1, shared_broker.host, shared_broker.port)
    ]

    [node] = admin.describe_log_dirs()
    [log_dir] = node["log_dirs"]
    assert log_dir["error_code"] == 0
    assert os.path.realpath(log_dir["log_dir"]) == os.path.realpath(
        os.path.join(shared_broker.data_dir, "logs")
    )
    [t] = [t for t in log_dir["topics"] if t["name"] == topic]
    sizes = {q["partition_index"]: q["partition_size"] for q in t["partitions"]}
    assert sorted(sizes) == list(range(SHARED_PARTITIONS))
    on_disk = sum(
        os.path.getsize(f)
        for f in glob.glob(os.path.join(log_dir["log_dir"], f"{topic}-1", "*.log"))
    )
    assert sizes[1] == on_disk > 100 * 50
    assert sizes[0] == sizes[2] == sizes[3] == 0

    [d] = admin.describe_topic_partitions([topic])["topics"]
    assert d["error_code"] == 0 and d["name"] == topic and not d["is_internal"]
    assert str(d["topic_id"]) == str(_topic_desc(admin, topic)["topic_id"])
    assert [
        (q["partition_index"], q["leader_id"], q["replica_nodes"], q["isr_nodes"])
        for q in d["partitions"]
    ] == [(i, 1, [1], [1]) for i in range(SHARED_PARTITIONS)]
    assert all(q["leader_epoch"] >= 0 for q in d["partitions"])


def _offset_for_leader_epoch_v2(
    topic: str, partition: int, current_epoch: int, epoch: int
) -> bytes:
    t = topic.encode()
    body = (
        struct.pack(">ih", 1, len(t)) + t + struct.pack(">iiii", 1, partition, current_epoch, epoch)
    )
    return frame(request_header(23, 2, 9) + body)


def test_offset_for_leader_epoch(bootstrap: str, topic: str, idempotence: bool) -> None:
    """OffsetForLeaderEpoch v2 on a raw socket, with the epoch the records carry (read by
    kafka-python): the current epoch ends at the log end offset."""
    ensure_topic(bootstrap, topic)
    p = producer(bootstrap, idempotence)
    try:
        send_all(p, topic, [{"value": b"e%d" % i, "partition": 0} for i in range(12)])
    finally:
        p.close()
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        recs = c.poll(timeout_ms=5000).get(tp, [])
        assert recs, "no records"
        epoch = recs[0].leader_epoch
        assert epoch is not None and epoch >= 0
    finally:
        c.close()

    host, port = bootstrap.rsplit(":", 1)

    def ask(partition: int, current: int, requested: int) -> tuple[int, int, int, int]:
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(_offset_for_leader_epoch_v2(topic, partition, current, requested))
            data = recv_frame(s)
        corr, _throttle, ntopics, tlen = struct.unpack_from(">iiih", data)
        assert (corr, ntopics, data[14 : 14 + tlen]) == (9, 1, topic.encode())
        nparts, err, part, leader_epoch, end_offset = struct.unpack_from(">ihiiq", data, 14 + tlen)
        assert nparts == 1
        return err, part, leader_epoch, end_offset

    assert ask(0, epoch, epoch) == (0, 0, epoch, 12)
    assert ask(0, -1, epoch) == (0, 0, epoch, 12)  # no current-epoch check
    assert ask(0, epoch + 1, epoch)[0] == kerr.UnknownLeaderEpochError.errno  # the client is ahead
    assert ask(99, -1, epoch)[0] == kerr.UnknownTopicOrPartitionError.errno
    # As Kafka's LeaderEpochFileCache.endOffsetFor answers:
    cases = {
        # A partition with no records yet: Kafka assigns the leader epoch at the log end when
        # the broker becomes leader (Partition.makeLeader -> maybeAssignEpochStartOffset), so
        # the current epoch ends at offset 0.
        "empty partition, current epoch": ((1, epoch, epoch), (0, 1, epoch, 0)),
        # An epoch above every known one: UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET.
        "epoch above the latest": ((0, -1, epoch + 1), (0, 0, -1, -1)),
    }
    wrong = {
        label: (ask(*args), want) for label, (args, want) in cases.items() if ask(*args) != want
    }
    assert not wrong, "(error, partition, epoch, end offset) got != expected: " + "; ".join(
        f"{label}: {got} != {want}" for label, (got, want) in wrong.items()
    )
