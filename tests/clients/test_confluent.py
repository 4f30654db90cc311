"""confluent-kafka (librdkafka 2.x) against a real gregor broker over real sockets.

Data path: produce with keys, headers, explicit timestamps and every compression codec, read
everything back exactly; ListOffsets by time and the watermarks; a fetch long-poll woken by an
append. Admin (AdminClient): create/describe/alter/delete topics and partitions, the errors
Kafka gives, describe_cluster, delete_records. Consumer groups are not served yet: consumers
`assign()` with explicit offsets and never commit.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
import uuid

import confluent_kafka as ck
import pytest
from client_helpers import (
    SHARED_PARTITIONS,
    DeliveryLog,
    check_exact,
    consume_confluent,
    consumer_conf,
    ensure_topic,
    frame,
    produce_all,
    recv_frame,
    request_header,
    wait_until,
)
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

# -- produce / consume ---------------------------------------------------------------------------

BASE_TS = 1_700_000_000_000
_PATTERN = bytes(range(256)) * 3
CODEC_COUNTS = {"none": 100_000, "gzip": 20_000, "snappy": 20_000, "lz4": 20_000, "zstd": 20_000}


def make_record(codec: str, i: int) -> dict:
    """Varied records: null and empty keys/values, no headers, repeated header keys, null
    header values, sizes from a few bytes to a few hundred."""
    key = None if i % 97 == 0 else (b"" if i % 89 == 0 else f"key-{i}".encode())
    if i % 101 == 0:
        value = None
    elif i % 31 == 0:
        value = b""
    else:
        start = (i * 7) % 256
        value = f"{codec}:{i}:".encode() + _PATTERN[start : start + i % 300]
    if i % 50 == 0:
        headers: list = []
    elif i % 13 == 0:
        headers = [("seq", str(i).encode()), ("dup", b"a"), ("dup", b"b"), ("null", None)]
    else:
        headers = [("seq", str(i).encode()), ("codec", codec.encode())]
    return {
        "key": key,
        "value": value,
        "headers": headers,
        "timestamp": BASE_TS + i * 3 + (i % 5),
        "partition": i % SHARED_PARTITIONS,
    }


@pytest.mark.parametrize("codec", list(CODEC_COUNTS))
def test_roundtrip_every_codec(bootstrap: str, topic: str, codec: str) -> None:
    n = CODEC_COUNTS[codec]
    ensure_topic(bootstrap, topic)
    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 5,
            "acks": "all",
            "queue.buffering.max.messages": 200_000,
        }
    )
    dr = DeliveryLog()
    recs = [make_record(codec, i) for i in range(n)]
    produce_all(producer, topic, recs, on_delivery=dr)
    assert producer.flush(60) == 0
    assert dr.errors == []
    assert len(dr.acked) == n

    expected: dict[int, list] = {p: [] for p in range(SHARED_PARTITIONS)}
    for r in recs:
        # confluent-kafka reports an absent header list as None; we normalise to [].
        expected[r["partition"]].append((r["key"], r["value"], r["headers"], r["timestamp"]))
    # The offsets the producer was told match the offsets the records are at.
    acked = sorted((p, o) for p, o, _ in dr.acked)
    assert acked == sorted((p, o) for p in expected for o in range(len(expected[p])))

    got = consume_confluent(bootstrap, topic, range(SHARED_PARTITIONS), n)
    check_exact(got, expected)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_roundtrip_each_acks(bootstrap: str, topic: str, acks: str) -> None:
    ensure_topic(bootstrap, topic)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 2})
    dr = DeliveryLog()
    recs = [
        {
            "key": b"k%d" % i,
            "value": b"acks-%s-%d" % (acks.encode(), i),
            "partition": i % 2,
            "timestamp": BASE_TS + i,
        }
        for i in range(500)
    ]
    produce_all(producer, topic, recs, on_delivery=dr)
    assert producer.flush(30) == 0
    assert dr.errors == []
    expected = {
        p: [(r["key"], r["value"], [], r["timestamp"]) for r in recs if r["partition"] == p]
        for p in (0, 1)
    }
    check_exact(consume_confluent(bootstrap, topic, [0, 1], 500), expected)


def test_large_record_with_small_fetch_sizes(bootstrap: str, topic: str) -> None:
    """A record bigger than the consumer's fetch limits still arrives whole (KIP-74: the first
    batch is returned even when it is above max.partition.fetch.bytes / fetch.max.bytes)."""
    ensure_topic(bootstrap, topic)
    big = os.urandom(700_000)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 1_000_000})
    producer.produce(topic, value=big, key=b"big", partition=0, timestamp=BASE_TS)
    producer.produce(topic, value=b"small", key=b"small", partition=0, timestamp=BASE_TS + 1)
    assert producer.flush(30) == 0
    got = consume_confluent(
        bootstrap,
        topic,
        [0],
        2,
        **{"max.partition.fetch.bytes": 1024, "fetch.max.bytes": 4096, "message.max.bytes": 4096},
    )
    check_exact(got, {0: [(b"big", big, [], BASE_TS), (b"small", b"small", [], BASE_TS + 1)]})


def test_consume_from_middle_offset(bootstrap: str, topic: str) -> None:
    ensure_topic(bootstrap, topic)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 7})
    for i in range(50):
        producer.produce(topic, value=b"v%d" % i, partition=3, timestamp=BASE_TS + i)
    assert producer.flush(30) == 0
    got = consume_confluent(bootstrap, topic, [3], 27, start_offset=23)
    assert [(r.offset, r.value) for r in got] == [(o, b"v%d" % o) for o in range(23, 50)]


# -- ListOffsets -------------------------------------------------------------------------------


def _produce_timed(
    bootstrap: str, topic: str, partition: int, timestamps: list[int], batch: int = 10
) -> None:
    producer = ck.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": batch}
    )
    for i, ts in enumerate(timestamps):
        producer.produce(topic, value=b"t%d" % i, partition=partition, timestamp=ts)
    assert producer.flush(30) == 0


def test_offsets_for_times_and_watermarks(bootstrap: str, topic: str) -> None:
    ensure_topic(bootstrap, topic)
    # 100 records at T, T+10, ..., in batches of 10 (several batches, several index entries).
    t0 = BASE_TS
    _produce_timed(bootstrap, topic, 0, [t0 + 10 * i for i in range(100)])
    c = ck.Consumer(consumer_conf(bootstrap))
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 100)
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (0, 0)
        cases = {
            t0 - 1_000_000: 0,  # before everything: the first record
            t0: 0,  # exact first
            t0 + 1: 1,  # between 0 and 1: the first with ts >= t
            t0 + 10 * 37: 37,  # exact, mid-log
            t0 + 10 * 37 + 5: 38,
            t0 + 10 * 99: 99,  # exact last
            t0 + 10 * 99 + 1: -1,  # after everything: OFFSET_END (-1)
        }
        for ts, want in cases.items():
            [res] = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert res.error is None
            assert res.offset == want, (
                f"offsets_for_times({ts - t0:+d}) = {res.offset}, expected {want}"
            )
        # Several partitions in one request, one of them empty.
        res = c.offsets_for_times(
            [TopicPartition(topic, 0, t0 + 505), TopicPartition(topic, 1, t0)], timeout=10
        )
        assert [(r.partition, r.offset) for r in res] == [(0, 51), (1, -1)]
    finally:
        c.close()


def test_offsets_for_times_non_monotonic(bootstrap: str, topic: str) -> None:
    """Timestamps out of order within and across batches: Kafka answers the first offset
    whose timestamp is >= the target (not a binary search over unsorted times)."""
    ensure_topic(bootstrap, topic)
    stamps = [BASE_TS + d for d in (100, 300, 200, 50, 400, 250)]
    _produce_timed(bootstrap, topic, 2, stamps, batch=3)
    c = ck.Consumer(consumer_conf(bootstrap))
    try:
        for delta, want in {0: 0, 100: 0, 150: 1, 250: 1, 300: 1, 301: 4, 400: 4, 401: -1}.items():
            [res] = c.offsets_for_times([TopicPartition(topic, 2, BASE_TS + delta)], timeout=10)
            assert res.offset == want, f"target +{delta}: got {res.offset}, expected {want}"
    finally:
        c.close()


def test_admin_list_offsets(bootstrap: str, topic: str) -> None:
    ensure_topic(bootstrap, topic)
    stamps = [BASE_TS + d for d in (5, 9, 1, 7)]
    _produce_timed(bootstrap, topic, 1, stamps)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 1)
    specs = {
        "earliest": (OffsetSpec.earliest(), 0),
        "latest": (OffsetSpec.latest(), 4),
        "max_timestamp": (OffsetSpec.max_timestamp(), 1),
        "for_timestamp": (OffsetSpec.for_timestamp(BASE_TS + 6), 1),
    }
    for name, (spec, want) in specs.items():
        res = admin.list_offsets({tp: spec}, request_timeout=10)[tp].result()
        assert res.offset == want, f"{name}: {res.offset} != {want}"
    res = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=10)[tp].result()
    assert res.timestamp == BASE_TS + 9


# -- long poll -----------------------------------------------------------------------------------


def test_fetch_long_poll_is_woken_by_append(bootstrap: str, topic: str) -> None:
    """A consumer waiting at the log end (fetch.wait.max.ms=5000) gets a new record well within
    the wait: the broker answers a parked fetch when data is appended, not when it times out."""
    ensure_topic(bootstrap, topic)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce(topic, value=b"warm-up", partition=1)  # connections and metadata ready
    assert producer.flush(10) == 0
    c = ck.Consumer(consumer_conf(bootstrap, **{"fetch.wait.max.ms": 5000, "fetch.min.bytes": 1}))
    try:
        # The log end of partition 0 is 0 (the warm-up went to partition 1).
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)
        c.assign([TopicPartition(topic, 0, 0)])
        for round_ in range(3):
            # Let the consumer's fetch reach the broker and park there (it waits up to 5 s).
            assert c.poll(0.5) is None
            t0 = time.monotonic()
            producer.produce(topic, value=b"wake-%d" % round_, partition=0)
            producer.flush(5)
            m = None
            while m is None and time.monotonic() - t0 < 6:
                m = c.poll(0.02)
            elapsed = time.monotonic() - t0
            assert m is not None and m.error() is None, m and m.error()
            assert (m.offset(), m.value()) == (round_, b"wake-%d" % round_)
            assert elapsed < 1.0, (
                f"round {round_}: record arrived {elapsed:.2f}s after produce (fetch not woken)"
            )
    finally:
        c.close()


def _fetch_v4(topic: str, partition: int, offset: int, max_wait_ms: int, corr: int) -> bytes:
    t = topic.encode()
    body = struct.pack(">iiiib", -1, max_wait_ms, 1, 1 << 20, 0)
    body += struct.pack(">ih", 1, len(t)) + t + struct.pack(">iiqi", 1, partition, offset, 1 << 20)
    return frame(request_header(1, 4, corr) + body)


def _parse_fetch_v4(frame: bytes) -> tuple[int, int, int, int]:
    """(correlation id, error code, high watermark, records bytes) of a one-partition v4 response."""
    corr, _throttle, _ntopics, tlen = struct.unpack_from(">iiih", frame, 0)
    pos = 14 + tlen
    _nparts, _p, err, hw, _lso, naborted = struct.unpack_from(">iihqqi", frame, pos)
    pos += 4 + 4 + 2 + 8 + 8 + 4 + max(naborted, 0) * 16
    (rlen,) = struct.unpack_from(">i", frame, pos)
    return corr, err, hw, max(rlen, 0)


def test_fetch_waits_for_max_wait_then_wakes_on_append(bootstrap: str, topic: str) -> None:
    """The same at the protocol level: an empty fetch is held for max_wait_ms (not answered at
    once), and a held fetch is answered as soon as a record is appended."""
    ensure_topic(bootstrap, topic)
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        t0 = time.monotonic()
        s.sendall(_fetch_v4(topic, 0, 0, 800, 1))
        corr, err, hw, nbytes = _parse_fetch_v4(recv_frame(s))
        waited = time.monotonic() - t0
        assert (corr, err, hw, nbytes) == (1, 0, 0, 0)
        assert 0.7 <= waited < 3.0, f"empty fetch with max_wait 800ms answered after {waited:.3f}s"

        s.sendall(_fetch_v4(topic, 0, 0, 10_000, 2))
        time.sleep(0.3)  # the fetch is parked on the broker now (it may wait 10 s)
        producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        producer.produce(topic, value=b"x", partition=0)
        t1 = time.monotonic()
        assert producer.flush(10) == 0
        corr, err, hw, nbytes = _parse_fetch_v4(recv_frame(s))
        woke = time.monotonic() - t1
        assert (corr, err, hw) == (2, 0, 1) and nbytes > 0
        assert woke < 1.0, f"parked fetch answered {woke:.2f}s after the append"


# -- admin ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _error_code(exc_info: pytest.ExceptionInfo) -> int:
    err = exc_info.value.args[0]
    assert isinstance(err, KafkaError), exc_info.value
    return err.code()


def _topics(admin: AdminClient) -> dict:
    return admin.list_topics(timeout=10).topics


def _describe_topic_configs(admin: AdminClient, topic: str) -> dict:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res], request_timeout=10)[res].result()


def test_admin_create_describe_produce_delete(
    admin: AdminClient, bootstrap: str, topic: str
) -> None:
    fs = admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=3,
                replication_factor=1,
                config={"retention.ms": "123456789", "cleanup.policy": "delete"},
            )
        ],
        request_timeout=15,
    )
    assert fs[topic].result() is None

    md = _topics(admin)[topic]
    assert md.error is None and sorted(md.partitions) == [0, 1, 2]
    for pm in md.partitions.values():
        assert (pm.leader, pm.replicas, pm.isrs) == (1, [1], [1])

    desc = admin.describe_topics(ck.TopicCollection([topic]), request_timeout=10)[topic].result()
    assert desc.name == topic and not desc.is_internal
    assert [p.id for p in desc.partitions] == [0, 1, 2]
    assert all(p.leader.id == 1 and [r.id for r in p.replicas] == [1] for p in desc.partitions)

    configs = _describe_topic_configs(admin, topic)
    assert configs["retention.ms"].value == "123456789"
    assert configs["retention.ms"].source == ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].source == ck.admin.ConfigSource.DEFAULT_CONFIG.value

    # The topic works.
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    for p in range(3):
        producer.produce(topic, value=b"p%d" % p, partition=p, timestamp=BASE_TS)
    assert producer.flush(10) == 0
    check_exact(
        consume_confluent(bootstrap, topic, range(3), 3),
        {p: [(None, b"p%d" % p, [], BASE_TS)] for p in range(3)},
    )

    assert admin.delete_topics([topic], request_timeout=15)[topic].result() is None
    wait_until(lambda: topic not in _topics(admin), 10, "the deleted topic to leave the metadata")

    # Re-created under the same name, it starts empty with its own layout.
    admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1)], request_timeout=15
    )[topic].result()
    assert sorted(_topics(admin)[topic].partitions) == [0]
    c = ck.Consumer(consumer_conf(bootstrap))
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)
    finally:
        c.close()
    assert (
        _describe_topic_configs(admin, topic)["retention.ms"].source
        == ck.admin.ConfigSource.DEFAULT_CONFIG.value
    )


def test_admin_create_with_broker_defaults(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic)], request_timeout=15)[topic].result()  # -1/-1: defaults
    assert len(_topics(admin)[topic].partitions) == SHARED_PARTITIONS


def test_admin_create_validate_only(admin: AdminClient, topic: str) -> None:
    fs = admin.create_topics([NewTopic(topic, 2, 1)], validate_only=True, request_timeout=15)
    assert fs[topic].result() is None
    assert topic not in _topics(admin)
    # validate_only still validates.
    fs = admin.create_topics(
        [NewTopic(topic, 2, 1, config={"retention.ms": "nope"})],
        validate_only=True,
        request_timeout=15,
    )
    with pytest.raises(KafkaException) as ei:
        fs[topic].result()
    assert _error_code(ei) == KafkaError.INVALID_CONFIG
    assert topic not in _topics(admin)


@pytest.mark.parametrize(
    "spec, code",
    [
        ({"num_partitions": 1, "replication_factor": 3}, KafkaError.INVALID_REPLICATION_FACTOR),
        ({"num_partitions": 0, "replication_factor": 1}, KafkaError.INVALID_PARTITIONS),
        (
            {
                "num_partitions": 1,
                "replication_factor": 1,
                "config": {"retention.ms": "not-a-number"},
            },
            KafkaError.INVALID_CONFIG,
        ),
        (
            {"num_partitions": 1, "replication_factor": 1, "config": {"cleanup.policy": "shred"}},
            KafkaError.INVALID_CONFIG,
        ),
        (
            {"num_partitions": 1, "replication_factor": 1, "config": {"no.such.config": "1"}},
            KafkaError.INVALID_CONFIG,
        ),
    ],
    ids=["rf3", "zero-partitions", "bad-int", "bad-enum", "unknown-config"],
)
def test_admin_create_errors(admin: AdminClient, topic: str, spec: dict, code: int) -> None:
    fs = admin.create_topics([NewTopic(topic, **spec)], request_timeout=15)
    with pytest.raises(KafkaException) as ei:
        fs[topic].result()
    assert _error_code(ei) == code, str(ei.value)
    assert topic not in _topics(admin)


def test_admin_create_existing_topic(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 2, 1)], request_timeout=15)[topic].result()
    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic(topic, 5, 1)], request_timeout=15)[topic].result()
    assert _error_code(ei) == KafkaError.TOPIC_ALREADY_EXISTS
    assert len(_topics(admin)[topic].partitions) == 2  # untouched


def test_admin_create_colliding_name(admin: AdminClient, topic: str) -> None:
    """A name differing from a topic's only in '.' against '_' is refused (their metric names
    collide), whether that topic exists already or comes earlier in the same request."""
    dotted, underscored = f"{topic}.v1", f"{topic}_v1"
    admin.create_topics([NewTopic(dotted, 1, 1)], request_timeout=15)[dotted].result()
    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic(underscored, 1, 1)], request_timeout=15)[underscored].result()
    assert _error_code(ei) == KafkaError.TOPIC_EXCEPTION, str(ei.value)
    assert f"collides with existing topic: {dotted}" in str(ei.value)
    first, second = f"{topic}.v2", f"{topic}_v2"
    fs = admin.create_topics([NewTopic(first, 1, 1), NewTopic(second, 1, 1)], request_timeout=15)
    fs[first].result()
    with pytest.raises(KafkaException) as ei:
        fs[second].result()
    assert _error_code(ei) == KafkaError.TOPIC_EXCEPTION, str(ei.value)
    names = _topics(admin)
    assert dotted in names and first in names
    assert underscored not in names and second not in names


def test_admin_create_invalid_name(admin: AdminClient) -> None:
    for name in ("bad/name", "..", "x" * 250):
        with pytest.raises(KafkaException) as ei:
            admin.create_topics([NewTopic(name, 1, 1)], request_timeout=15)[name].result()
        assert _error_code(ei) == KafkaError.TOPIC_EXCEPTION, f"{name!r}: {ei.value}"


def test_admin_create_partitions(admin: AdminClient, bootstrap: str, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 2, 1)], request_timeout=15)[topic].result()
    # validate_only changes nothing.
    admin.create_partitions([NewPartitions(topic, 4)], validate_only=True, request_timeout=15)[
        topic
    ].result()
    assert len(_topics(admin)[topic].partitions) == 2
    admin.create_partitions([NewPartitions(topic, 5)], request_timeout=15)[topic].result()
    wait_until(
        lambda: len(_topics(admin)[topic].partitions) == 5, 10, "5 partitions in the metadata"
    )
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value=b"new", partition=4, timestamp=BASE_TS)
    assert producer.flush(10) == 0
    check_exact(consume_confluent(bootstrap, topic, [4], 1), {4: [(None, b"new", [], BASE_TS)]})

    for count in (3, 5):  # fewer, or as many as now: INVALID_PARTITIONS
        with pytest.raises(KafkaException) as ei:
            admin.create_partitions([NewPartitions(topic, count)], request_timeout=15)[
                topic
            ].result()
        assert _error_code(ei) == KafkaError.INVALID_PARTITIONS, f"count {count}: {ei.value}"
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(KafkaException) as ei:
        admin.create_partitions([NewPartitions(missing, 3)], request_timeout=15)[missing].result()
    assert _error_code(ei) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert len(_topics(admin)[topic].partitions) == 5


def test_admin_incremental_alter_configs(admin: AdminClient, topic: str) -> None:
    admin.create_topics(
        [NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})], request_timeout=15
    )[topic].result()
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("max.message.bytes", "500000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    assert admin.incremental_alter_configs([res], request_timeout=15)[res].result() is None
    configs = _describe_topic_configs(admin, topic)
    assert configs["retention.ms"].value == "86400000"
    assert configs["max.message.bytes"].value == "500000"
    assert configs["cleanup.policy"].value == "delete"  # back to the default
    assert configs["cleanup.policy"].source == ck.admin.ConfigSource.DEFAULT_CONFIG.value

    bad = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as ei:
        admin.incremental_alter_configs([bad], request_timeout=15)[bad].result()
    assert _error_code(ei) == KafkaError.INVALID_CONFIG
    assert _describe_topic_configs(admin, topic)["retention.ms"].value == "86400000"

    missing = ConfigResource(
        ResourceType.TOPIC,
        f"missing-{uuid.uuid4().hex[:8]}",
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as ei:
        admin.incremental_alter_configs([missing], request_timeout=15)[missing].result()
    assert _error_code(ei) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_alter_configs_replaces_the_set(admin: AdminClient, topic: str) -> None:
    """Legacy AlterConfigs: the given set replaces the topic's whole dynamic config."""
    admin.create_topics(
        [NewTopic(topic, 1, 1, config={"retention.ms": "1000000"})], request_timeout=15
    )[topic].result()
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "3600000"})
    with pytest.warns(DeprecationWarning):
        fs = admin.alter_configs([res], request_timeout=15)
    assert fs[res].result() is None
    configs = _describe_topic_configs(admin, topic)
    assert configs["segment.ms"].value == "3600000"
    assert configs["segment.ms"].source == ck.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].source == ck.admin.ConfigSource.DEFAULT_CONFIG.value


def test_admin_describe_broker_configs_and_cluster(admin: AdminClient) -> None:
    res = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([res], request_timeout=10)[res].result()
    assert configs["num.partitions"].value == str(SHARED_PARTITIONS)
    assert configs["num.partitions"].source == ck.admin.ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["auto.create.topics.enable"].value == "true"

    cluster = admin.describe_cluster(request_timeout=10).result()
    assert [n.id for n in cluster.nodes] == [1]
    assert cluster.controller is not None and cluster.controller.id == 1
    assert cluster.cluster_id == admin.list_topics(timeout=10).cluster_id


def test_admin_delete_missing_topic(admin: AdminClient) -> None:
    name = f"missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(KafkaException) as ei:
        admin.delete_topics([name], request_timeout=15)[name].result()
    assert _error_code(ei) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_delete_records(admin: AdminClient, bootstrap: str, topic: str) -> None:
    ensure_topic(bootstrap, topic)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 4})
    for i in range(10):
        producer.produce(topic, value=b"r%d" % i, partition=0, timestamp=BASE_TS + i)
    assert producer.flush(10) == 0

    tp = TopicPartition(topic, 0, 6)
    deleted = admin.delete_records([tp], request_timeout=15)
    [(_, fut)] = deleted.items()
    assert fut.result().low_watermark == 6

    c = ck.Consumer(consumer_conf(bootstrap))
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (6, 10)
    finally:
        c.close()
    earliest = admin.list_offsets(
        {TopicPartition(topic, 0): OffsetSpec.earliest()}, request_timeout=10
    )
    assert next(iter(earliest.values())).result().offset == 6

    # Below the new start with no reset policy: the fetch fails with OFFSET_OUT_OF_RANGE.
    c = ck.Consumer(consumer_conf(bootstrap, **{"auto.offset.reset": "error"}))
    try:
        c.assign([TopicPartition(topic, 0, 2)])

        def offset_error() -> KafkaError | None:
            m = c.poll(0.2)
            assert m is None or m.error() is not None, f"delivered a deleted record at {m.offset()}"
            return m.error() if m is not None else None

        err = wait_until(offset_error, 15, "an offset-out-of-range error")
        assert err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET), str(
            err
        )
        assert "out of range" in str(err).lower(), str(err)
    finally:
        c.close()

    # With auto.offset.reset=earliest the consumer resumes at the new start.
    got = consume_confluent(
        bootstrap, topic, [0], 4, start_offset=2, **{"auto.offset.reset": "earliest"}
    )
    assert [(r.offset, r.value) for r in got] == [(o, b"r%d" % o) for o in range(6, 10)]

    # Deleting past the high watermark is refused.
    with pytest.raises(KafkaException) as ei:
        next(
            iter(admin.delete_records([TopicPartition(topic, 0, 11)], request_timeout=15).values())
        ).result()
    assert _error_code(ei) == KafkaError.OFFSET_OUT_OF_RANGE
    # OFFSET_END deletes everything.
    res = next(
        iter(
            admin.delete_records(
                [TopicPartition(topic, 0, ck.OFFSET_END)], request_timeout=15
            ).values()
        )
    ).result()
    assert res.low_watermark == 10


def test_admin_manual_replica_assignment(admin: AdminClient, topic: str) -> None:
    # (confluent-kafka wants num_partitions = len(replica_assignment) on the wire.)
    admin.create_topics(
        [NewTopic(topic, 3, replica_assignment=[[1], [1], [1]])], request_timeout=15
    )[topic].result()
    md = _topics(admin)[topic]
    assert sorted(md.partitions) == [0, 1, 2] and all(
        pm.replicas == [1] for pm in md.partitions.values()
    )
    other = topic + "-b2"
    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic(other, 1, replica_assignment=[[2]])], request_timeout=15)[
            other
        ].result()
    assert _error_code(ei) == KafkaError.INVALID_REPLICA_ASSIGNMENT, str(ei.value)
    assert other not in _topics(admin)


def test_admin_describe_configs_of_missing_topic(admin: AdminClient) -> None:
    res = ConfigResource(ResourceType.TOPIC, f"missing-{uuid.uuid4().hex[:8]}")
    with pytest.raises(KafkaException) as ei:
        admin.describe_configs([res], request_timeout=10)[res].result()
    assert _error_code(ei) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_admin_incremental_append_subtract_and_validate_only(
    admin: AdminClient, topic: str
) -> None:
    admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=15)[topic].result()

    def alter(op: AlterConfigOpType, value: str, validate_only: bool = False) -> None:
        res = ConfigResource(
            ResourceType.TOPIC,
            topic,
            incremental_configs=[ConfigEntry("cleanup.policy", value, incremental_operation=op)],
        )
        admin.incremental_alter_configs([res], validate_only=validate_only, request_timeout=15)[
            res
        ].result()

    alter(AlterConfigOpType.APPEND, "compact")
    assert _describe_topic_configs(admin, topic)["cleanup.policy"].value == "delete,compact"
    alter(AlterConfigOpType.SUBTRACT, "delete")
    assert _describe_topic_configs(admin, topic)["cleanup.policy"].value == "compact"
    alter(AlterConfigOpType.SET, "delete", validate_only=True)
    assert _describe_topic_configs(admin, topic)["cleanup.policy"].value == "compact"


def test_topic_max_message_bytes_is_enforced(
    admin: AdminClient, bootstrap: str, topic: str
) -> None:
    admin.create_topics(
        [NewTopic(topic, 1, 1, config={"max.message.bytes": "2000"})], request_timeout=15
    )[topic].result()
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    dr = DeliveryLog()
    producer.produce(topic, value=os.urandom(5000), partition=0, on_delivery=dr)
    producer.flush(10)
    producer.produce(topic, value=b"fits", partition=0, on_delivery=dr)
    producer.flush(10)
    assert len(dr.errors) == 1 and (
        "MSG_SIZE_TOO_LARGE" in dr.errors[0] or "too large" in dr.errors[0].lower()
    ), dr.errors
    assert [(p, o, v) for p, o, v in dr.acked] == [(0, 0, b"fits")]


def test_compacted_topic_refuses_null_keys(admin: AdminClient, bootstrap: str, topic: str) -> None:
    admin.create_topics(
        [NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})], request_timeout=15
    )[topic].result()
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors: list = []
    producer.produce(topic, value=b"no key", partition=0, on_delivery=lambda e, m: errors.append(e))
    producer.flush(10)
    [err] = errors
    # Kafka's LogValidator: "Compacted topic cannot accept message without key" -> INVALID_RECORD.
    assert err is not None and err.code() == KafkaError.INVALID_RECORD, (
        f"a keyless record was accepted by a compacted topic ({err})"
    )
    producer.produce(
        topic, key=b"k", value=b"keyed", partition=0, on_delivery=lambda e, m: errors.append(e)
    )
    producer.flush(10)
    assert errors[1] is None


def test_log_append_time_topic(admin: AdminClient, bootstrap: str, topic: str) -> None:
    """message.timestamp.type=LogAppendTime: the broker stamps its own time on every record,
    and consumers see it as a log-append time."""
    admin.create_topics(
        [NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})],
        request_timeout=15,
    )[topic].result()
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    t0 = int(time.time() * 1000)
    for i in range(20):
        producer.produce(topic, value=b"lat%d" % i, partition=0, timestamp=BASE_TS + i)
    assert producer.flush(10) == 0
    t1 = int(time.time() * 1000)
    c = ck.Consumer(consumer_conf(bootstrap))
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 15
        while len(got) < 20 and time.monotonic() < deadline:
            for m in c.consume(100, 0.2):
                assert m.error() is None, m.error()
                got.append(m)
        assert [m.value() for m in got] == [b"lat%d" % i for i in range(20)]
        for m in got:
            ts_type, ts = m.timestamp()
            assert ts_type == ck.TIMESTAMP_LOG_APPEND_TIME, f"timestamp type {ts_type}"
            assert t0 - 1000 <= ts <= t1 + 1000, f"log append time {ts} outside [{t0}, {t1}]"
    finally:
        c.close()


def test_min_insync_replicas_refuses_acks_all(
    admin: AdminClient, bootstrap: str, topic: str
) -> None:
    """min.insync.replicas=2 with one replica: acks=all gets NOT_ENOUGH_REPLICAS, acks=1 works."""
    admin.create_topics(
        [NewTopic(topic, 1, 1, config={"min.insync.replicas": "2"})], request_timeout=15
    )[topic].result()
    errors: list = []
    strict = ck.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "linger.ms": 0}
    )
    strict.produce(topic, value=b"all", partition=0, on_delivery=lambda e, m: errors.append(e))
    strict.flush(10)
    [err] = errors
    assert err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS, err
    loose = ck.Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    loose.produce(topic, value=b"one", partition=0, on_delivery=lambda e, m: errors.append(e))
    loose.flush(10)
    assert errors[1] is None
    assert [r.value for r in consume_confluent(bootstrap, topic, [0], 1)] == [b"one"]


def test_offset_past_the_end_resets_to_latest(bootstrap: str, topic: str) -> None:
    """A fetch past the log end gets OFFSET_OUT_OF_RANGE; with auto.offset.reset=latest the
    consumer moves to the end (seen in librdkafka's statistics) and reads what comes next."""
    ensure_topic(bootstrap, topic)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, value=b"x%d" % i, partition=0)
    assert producer.flush(10) == 0
    fetch_offset: list[int] = []

    def stats(js: str) -> None:
        part = json.loads(js).get("topics", {}).get(topic, {}).get("partitions", {}).get("0")
        if part and part.get("fetch_state") == "active":
            fetch_offset.append(part["next_offset"])

    conf = {
        "auto.offset.reset": "latest",
        "fetch.wait.max.ms": 100,
        "statistics.interval.ms": 50,
        "stats_cb": stats,
    }
    c = ck.Consumer(consumer_conf(bootstrap, **conf))
    try:
        c.assign([TopicPartition(topic, 0, 1000)])
        wait_until(
            lambda: c.poll(0.05) is None and fetch_offset and fetch_offset[-1] == 10,
            10,
            "the reset to offset 10",
        )
        producer.produce(topic, value=b"next", partition=0)
        assert producer.flush(10) == 0
        m = wait_until(lambda: c.poll(0.1), 10, "the record after the reset")
        assert m.error() is None and (m.offset(), m.value()) == (10, b"next")
    finally:
        c.close()


def test_metadata_marks_only_kafkas_own_topics_internal(admin: AdminClient, bootstrap: str) -> None:
    """is_internal is Kafka's: `__consumer_offsets` is internal, a user's `__`-prefixed topic
    is not (a client hiding internal topics must still show it)."""
    user_topic = f"__user_{uuid.uuid4().hex[:8]}"
    assert admin.create_topics([NewTopic(user_topic, 1, 1)])[user_topic].result(timeout=15) is None
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{user_topic}"})
    try:  # a group's first call makes the broker create __consumer_offsets
        consumer.list_topics(timeout=10)
        consumer.committed([TopicPartition(user_topic, 0)], timeout=15)
    finally:
        consumer.close()
    names = [user_topic, "__consumer_offsets"]
    found = admin.describe_topics(ck.TopicCollection(names), request_timeout=10)
    internal = {name: f.result().is_internal for name, f in found.items()}
    assert internal == {user_topic: False, "__consumer_offsets": True}
