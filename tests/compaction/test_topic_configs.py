"""Every topic config of issue 6, through real admin clients: set at creation, altered with
AlterConfigs and IncrementalAlterConfigs (SET / DELETE / APPEND / SUBTRACT), described with
source and synonyms, invalid values refused with INVALID_CONFIG naming the key; and honoured
on a live partition (timestamps bounds, timestamp type, keys on compacted topics)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from gregor import Broker

# name -> (a value to create with, a value to alter to, an invalid value, Kafka's default,
#          the broker-level synonym that supplies the default)
CONFIGS: dict[str, tuple[str, str, str, str, str]] = {
    "cleanup.policy": ("compact", "compact,delete", "shred", "delete", "log.cleanup.policy"),
    "retention.ms": ("3600000", "7200000", "-2", "604800000", "log.retention.ms"),
    "retention.bytes": ("1048576", "2097152", "lots", "-1", "log.retention.bytes"),
    "segment.bytes": ("1048576", "2097152", "13", "1073741824", "log.segment.bytes"),
    "segment.ms": ("3600000", "7200000", "0", "604800000", "log.roll.ms"),
    "segment.index.bytes": ("65536", "131072", "4", "10485760", "log.index.size.max.bytes"),
    "index.interval.bytes": ("1024", "2048", "-1", "4096", "log.index.interval.bytes"),
    "max.message.bytes": ("500000", "600000", "-5", "1048588", "message.max.bytes"),
    "message.timestamp.type": (
        "LogAppendTime",
        "CreateTime",
        "WallClock",
        "CreateTime",
        "log.message.timestamp.type",
    ),
    "message.timestamp.before.max.ms": (
        "86400000",
        "3600000",
        "-1",
        "9223372036854775807",
        "log.message.timestamp.before.max.ms",
    ),
    "message.timestamp.after.max.ms": (
        "60000",
        "120000",
        "-1",
        "3600000",
        "log.message.timestamp.after.max.ms",
    ),
    "compression.type": ("zstd", "lz4", "brotli", "producer", "compression.type"),
    "min.compaction.lag.ms": ("1000", "2000", "-1", "0", "log.cleaner.min.compaction.lag.ms"),
    "max.compaction.lag.ms": (
        "86400000",
        "172800000",
        "0",
        "9223372036854775807",
        "log.cleaner.max.compaction.lag.ms",
    ),
    "delete.retention.ms": ("1000", "2000", "-1", "86400000", "log.cleaner.delete.retention.ms"),
    "min.cleanable.dirty.ratio": ("0.25", "0.75", "1.5", "0.5", "log.cleaner.min.cleanable.ratio"),
    "file.delete.delay.ms": ("1000", "2000", "-1", "60000", "log.segment.delete.delay.ms"),
    "flush.messages": ("1000", "2000", "0", "9223372036854775807", "log.flush.interval.messages"),
    "flush.ms": ("1000", "2000", "-1", "9223372036854775807", "log.flush.interval.ms"),
    "min.insync.replicas": ("1", "2", "0", "1", "min.insync.replicas"),
    "unclean.leader.election.enable": (
        "true",
        "false",
        "maybe",
        "false",
        "unclean.leader.election.enable",
    ),
}
CREATED = {k: v[0] for k, v in CONFIGS.items()}
ALTERED = {k: v[1] for k, v in CONFIGS.items()}
# Set on the broker (server.properties / --set): topics without their own value inherit it.
STATIC = {"log.cleaner.delete.retention.ms": "12345", "log.cleaner.backoff.ms": "100"}


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(STATIC) as b:
        yield b


@pytest.fixture(scope="module")
def admin(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def kp_admin(broker: Broker) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield a
    a.close()


def _name() -> str:
    return f"cfg-{uuid.uuid4().hex[:10]}"


def _create(admin: AdminClient, configs: dict[str, str]) -> str:
    topic = _name()
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(15)
    return topic


def _describe(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource("topic", topic)
    return admin.describe_configs([res], request_timeout=15)[res].result()


def _incremental(
    admin: AdminClient, topic: str, ops: list[tuple[str, AlterConfigOpType, str | None]]
) -> None:
    entries = [ConfigEntry(name, value, incremental_operation=op) for name, op, value in ops]
    res = ConfigResource("topic", topic, incremental_configs=entries)
    admin.incremental_alter_configs([res], request_timeout=15)[res].result()


def _error_of(fut_result) -> KafkaError:
    with pytest.raises(KafkaException) as err:
        fut_result()
    return err.value.args[0]


def test_every_config_set_at_creation_is_described_with_its_source_and_synonyms(admin):
    topic = _create(admin, CREATED)
    described = _describe(admin, topic)
    for name, (created, _a, _b, default, synonym) in CONFIGS.items():
        entry = described[name]
        assert entry.value == created, name
        assert entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name
        synonyms = [(s.name, s.value, s.source) for s in entry.synonyms.values()]
        # The fallback: Kafka's default, under its broker-level name.
        assert (synonym, default, ConfigSource.DEFAULT_CONFIG.value) in synonyms, name
        if synonym != name:  # librdkafka keys synonyms by name: same-named ones collapse
            assert synonyms[0] == (name, created, ConfigSource.DYNAMIC_TOPIC_CONFIG.value), name


def test_a_static_broker_config_is_the_source_of_topics_without_their_own(admin, kp_admin):
    topic = _create(admin, {})
    entry = _describe(admin, topic)["delete.retention.ms"]
    assert (entry.value, entry.source) == ("12345", ConfigSource.STATIC_BROKER_CONFIG.value)
    # Both synonyms share a name (librdkafka keeps one of them): read them with kafka-python.
    synonyms = [
        (s["name"], s["value"], s["source"])
        for s in _kp_describe(kp_admin, topic)["delete.retention.ms"]["synonyms"]
    ]
    assert synonyms == [
        ("log.cleaner.delete.retention.ms", "12345", "STATIC_BROKER_CONFIG"),
        ("log.cleaner.delete.retention.ms", "86400000", "DEFAULT_CONFIG"),
    ]
    for name, (*_rest, default, _synonym) in CONFIGS.items():
        if name != "delete.retention.ms":
            assert (_describe(admin, topic)[name].value, name) == (default, name)


def test_incremental_set_then_delete_every_config(admin):
    topic = _create(admin, CREATED)
    _incremental(admin, topic, [(k, AlterConfigOpType.SET, v) for k, v in ALTERED.items()])
    described = _describe(admin, topic)
    assert {k: described[k].value for k in CONFIGS} == ALTERED
    _incremental(admin, topic, [(k, AlterConfigOpType.DELETE, None) for k in CONFIGS])
    described = _describe(admin, topic)
    for name, (*_rest, default, _synonym) in CONFIGS.items():
        expected = (
            STATIC.get("log.cleaner.delete.retention.ms")
            if name == "delete.retention.ms"
            else default
        )
        assert described[name].value == expected, name
        assert described[name].source in (
            ConfigSource.DEFAULT_CONFIG.value,
            ConfigSource.STATIC_BROKER_CONFIG.value,
        )


def test_incremental_append_and_subtract_on_the_list_config(admin):
    topic = _create(admin, {"cleanup.policy": "delete"})
    _incremental(admin, topic, [("cleanup.policy", AlterConfigOpType.APPEND, "compact")])
    assert _describe(admin, topic)["cleanup.policy"].value == "delete,compact"
    _incremental(admin, topic, [("cleanup.policy", AlterConfigOpType.SUBTRACT, "delete")])
    assert _describe(admin, topic)["cleanup.policy"].value == "compact"
    # APPEND on a topic without its own value starts from the effective one (the default).
    other = _create(admin, {})
    _incremental(admin, other, [("cleanup.policy", AlterConfigOpType.APPEND, "compact")])
    assert _describe(admin, other)["cleanup.policy"].value == "delete,compact"
    # Only list configs take APPEND / SUBTRACT.
    entries = [ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)]
    res = ConfigResource("topic", topic, incremental_configs=entries)
    err = _error_of(
        lambda: admin.incremental_alter_configs([res], request_timeout=15)[res].result()
    )
    assert err.code() == KafkaError.INVALID_CONFIG and "retention.ms" in err.str()


def test_alter_configs_replaces_the_whole_set(admin):
    topic = _create(admin, CREATED)
    res = ConfigResource("topic", topic, set_config=ALTERED)
    admin.alter_configs([res], request_timeout=15)[res].result()
    described = _describe(admin, topic)
    assert {k: described[k].value for k in CONFIGS} == ALTERED
    # A key left out of the set goes back to its default.
    fewer = dict(ALTERED)
    del fewer["retention.ms"]
    res = ConfigResource("topic", topic, set_config=fewer)
    admin.alter_configs([res], request_timeout=15)[res].result()
    entry = _describe(admin, topic)["retention.ms"]
    assert (entry.value, entry.source) == ("604800000", ConfigSource.DEFAULT_CONFIG.value)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_an_invalid_value_is_refused_naming_the_key(admin, name):
    bad = CONFIGS[name][2]
    topic = _name()
    fut = admin.create_topics([NewTopic(topic, 1, 1, config={name: bad})])[topic]
    err = _error_of(lambda: fut.result(15))
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert name in err.str() and bad in err.str()

    topic = _create(admin, {})
    entries = [ConfigEntry(name, bad, incremental_operation=AlterConfigOpType.SET)]
    res = ConfigResource("topic", topic, incremental_configs=entries)
    err = _error_of(
        lambda: admin.incremental_alter_configs([res], request_timeout=15)[res].result()
    )
    assert err.code() == KafkaError.INVALID_CONFIG and name in err.str()

    res = ConfigResource("topic", topic, set_config={name: bad})
    err = _error_of(lambda: admin.alter_configs([res], request_timeout=15)[res].result())
    assert err.code() == KafkaError.INVALID_CONFIG and name in err.str()
    # Nothing changed.
    assert _describe(admin, topic)[name].value == CONFIGS[name][3] or name == "delete.retention.ms"


def test_kafka_python_admin_sets_alters_and_describes_every_config(kp_admin):
    topic = _name()
    kp_admin.create_topics([_kp_new_topic(topic, CREATED)])
    described = _kp_describe(kp_admin, topic)
    for name, created in CREATED.items():
        assert described[name]["value"] == created, name
        assert described[name]["config_source"] == "DYNAMIC_TOPIC_CONFIG", name
        names = [s["name"] for s in described[name]["synonyms"]]
        assert names[0] == name and CONFIGS[name][4] in names
    # IncrementalAlterConfigs (the client's default): SET everything, then DELETE one.
    res = KpResource(ConfigResourceType.TOPIC, topic, dict(ALTERED))
    assert kp_admin.alter_configs([res]) == {"topic": {topic: "OK"}}
    described = _kp_describe(kp_admin, topic)
    assert {k: described[k]["value"] for k in CONFIGS} == ALTERED
    res = KpResource(
        ConfigResourceType.TOPIC,
        topic,
        {"segment.ms": ("DELETE", None), "cleanup.policy": ("SUBTRACT", "delete")},
    )
    assert kp_admin.alter_configs([res]) == {"topic": {topic: "OK"}}
    described = _kp_describe(kp_admin, topic)
    assert (described["segment.ms"]["value"], described["segment.ms"]["config_source"]) == (
        "604800000",
        "DEFAULT_CONFIG",
    )
    assert described["cleanup.policy"]["value"] == "compact"
    # The legacy AlterConfigs.
    res = KpResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "1234567"})
    assert kp_admin.alter_configs([res], incremental=False) == {"topic": {topic: "OK"}}
    assert _kp_describe(kp_admin, topic)["retention.ms"]["value"] == "1234567"
    # An invalid value: INVALID_CONFIG, naming the key.
    res = KpResource(ConfigResourceType.TOPIC, topic, {"min.cleanable.dirty.ratio": "2"})
    result = kp_admin.alter_configs([res])["topic"][topic]
    assert (
        "InvalidConfiguration" in type(result).__name__
        or "INVALID_CONFIG" in str(result).upper()
        or "Invalid" in str(result)
    )
    assert "min.cleanable.dirty.ratio" in str(result)


def _kp_new_topic(name: str, configs: dict[str, str]):
    from kafka.admin import NewTopic as KpNewTopic

    return KpNewTopic(name, 1, 1, topic_configs=configs)


def _kp_describe(kp_admin: KafkaAdminClient, topic: str) -> dict:
    res = kp_admin.describe_configs(
        [KpResource(ConfigResourceType.TOPIC, topic)], include_synonyms=True, config_filter="all"
    )
    return res["topic"][topic]


# -- honoured on a live partition ------------------------------------------------------------


def _produce_one(bootstrap: str, topic: str, key: bytes | None, timestamp: int | None = None):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    result = []
    kwargs = {"timestamp": timestamp} if timestamp is not None else {}
    producer.produce(
        topic,
        key=key,
        value=b"v",
        partition=0,
        on_delivery=lambda err, msg: result.append((err, msg)),
        **kwargs,
    )
    producer.flush(15)
    [(err, msg)] = result
    return err, msg


def test_timestamp_bounds_are_enforced_on_produce_and_follow_alters(admin, broker):
    topic = _create(
        admin,
        {"message.timestamp.after.max.ms": "60000", "message.timestamp.before.max.ms": "3600000"},
    )
    now = int(time.time() * 1000)
    err, _ = _produce_one(broker.bootstrap, topic, b"k", now + 3_600_000)
    assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP
    err, _ = _produce_one(broker.bootstrap, topic, b"k", now - 2 * 3_600_000)
    assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP
    err, msg = _produce_one(broker.bootstrap, topic, b"k", now - 1000)
    assert err is None and msg.offset() == 0
    # Widened live, without a restart.
    _incremental(
        admin, topic, [("message.timestamp.after.max.ms", AlterConfigOpType.SET, "86400000")]
    )
    err, _ = _produce_one(broker.bootstrap, topic, b"k", now + 3_600_000)
    assert err is None
    # LogAppendTime topics stamp the broker's time: the producer's timestamp is not checked.
    _incremental(admin, topic, [("message.timestamp.type", AlterConfigOpType.SET, "LogAppendTime")])
    err, msg = _produce_one(broker.bootstrap, topic, b"k", now + 10 * 86_400_000)
    assert err is None and abs(msg.timestamp()[1] - int(time.time() * 1000)) < 60_000


def test_switching_to_compact_requires_keys(admin, broker):
    topic = _create(admin, {})
    err, _ = _produce_one(broker.bootstrap, topic, None)
    assert err is None
    _incremental(admin, topic, [("cleanup.policy", AlterConfigOpType.SET, "compact")])
    err, _ = _produce_one(broker.bootstrap, topic, None)
    assert err is not None and err.code() == KafkaError.INVALID_RECORD
    err, _ = _produce_one(broker.bootstrap, topic, b"k")
    assert err is None


def test_the_broker_describes_the_cleaner_configs(admin):
    res = ConfigResource("broker", "1")
    described = admin.describe_configs([res], request_timeout=15)[res].result()
    assert (
        described["log.cleaner.backoff.ms"].value,
        described["log.cleaner.backoff.ms"].source,
    ) == (
        "100",
        ConfigSource.STATIC_BROKER_CONFIG.value,
    )
    for name in (
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.enable",
        "log.cleaner.io.buffer.load.factor",
    ):
        assert described[name].source == ConfigSource.DEFAULT_CONFIG.value, name
