"""A real broker compacts a topic while clients use it: confluent-kafka produces many updates
per key, the cleaner runs on its thread, and a consumer reading from the beginning gets the
latest value of every key, at the offset it was produced at."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor import Broker
from gregor.storage import checkpoints
from gregor.storage.cleaner import CHECKPOINT_FILE

KEYS = 300
UPDATES = 15
SEGMENT_MS = 1500


def _produce(producer: Producer, topic: str, items: list[tuple[bytes, bytes | None]]) -> list[int]:
    offsets: list[int] = [-1] * len(items)
    errors: list[str] = []

    def report(i: int):
        def cb(err, msg):
            if err is not None:
                errors.append(str(err))
            else:
                offsets[i] = msg.offset()

        return cb

    for i, (key, value) in enumerate(items):
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=report(i))
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]
    return offsets


def _consume_all(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{time.monotonic_ns()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    position = 0
    while position < end and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=0.5):
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.key(), msg.value()))
        position = consumer.position([TopicPartition(topic, 0)])[0].offset
    consumer.close()
    return out


def _checkpoint(broker: Broker, topic: str) -> int:
    path = os.path.join(broker.data_dir, "logs", CHECKPOINT_FILE)
    try:
        return checkpoints.read_offsets(path).get((topic, 0), -1)
    except (FileNotFoundError, checkpoints.CheckpointError):
        return -1


def _roll(producer: Producer, topic: str) -> int:
    """Wait out segment.ms and append one record: the segment before it rolls, so everything
    before this record is inactive and may be cleaned. Returns its offset."""
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    return _produce(producer, topic, [(b"roll", b"%d" % time.time_ns())])[0]


def _wait_cleaned_to(broker: Broker, topic: str, offset: int) -> None:
    deadline = time.monotonic() + 60
    while _checkpoint(broker, topic) < offset:
        assert time.monotonic() < deadline, (
            f"not cleaned to {offset}: at {_checkpoint(broker, topic)}\n{broker.read_log()[-3000:]}"
        )
        time.sleep(0.05)


@pytest.mark.parametrize("worker", ["process", "thread"])
def test_a_compacted_topic_keeps_the_latest_value_of_every_key(worker):
    config = {
        "log.cleaner.backoff.ms": "50",
        "log.cleaner.worker.process": str(worker == "process").lower(),
    }
    with Broker(config, log_level="INFO") as broker:
        topic = "compacted"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": "60000",
            "segment.ms": str(SEGMENT_MS),
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "2000",
            "compression.type": "producer",
        }
        admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(15)
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "linger.ms": 5,
                "batch.size": 16384,
                "enable.idempotence": True,
                "compression.type": "lz4",
            }
        )
        items = [
            (b"key-%d" % (i % KEYS), b"value-%d-" % i + b"x" * 80) for i in range(KEYS * UPDATES)
        ]
        deleted = [(b"key-%d" % k, None) for k in range(0, KEYS, 10)]
        offsets = _produce(producer, topic, items + deleted)
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for (key, value), offset in zip(items + deleted, offsets, strict=True):
            latest[key] = (offset, value)

        roll = _roll(producer, topic)
        _wait_cleaned_to(broker, topic, roll)
        got = _consume_all(broker.bootstrap, topic, roll + 1)
        expected = sorted((o, k, v) for k, (o, v) in latest.items())
        # Exactly the latest record of every key, tombstones included (delete.retention.ms has
        # not passed since the cleaning that reached them), in offset order, offsets kept.
        assert [m for m in got if m[0] < roll] == expected
        assert got[-1][:2] == (roll, b"roll")

        # Once delete.retention.ms has passed, the next cleaning removes the tombstones.
        time.sleep(2.1)
        roll2 = _roll(producer, topic)
        _wait_cleaned_to(broker, topic, roll2)
        got = _consume_all(broker.bootstrap, topic, roll2 + 1)
        live = sorted((o, k, v) for k, (o, v) in latest.items() if v is not None)
        assert [m for m in got if m[0] < roll] == live
        # Both roll records: the newer one is in the active segment, so the map never saw it.
        assert [m[:2] for m in got if m[0] >= roll] == [(roll, b"roll"), (roll2, b"roll")]
        producer.flush(10)

        # The broker logged its cleanings, and nothing went wrong.
        text = broker.read_log()
        assert "cleaned compacted-0" in text
        assert "Traceback" not in text and "ERROR" not in text


def test_the_cleaner_follows_dynamic_log_cleaner_configs():
    """log.cleaner.threads=0 at start: nothing is cleaned. Set to 1 as a dynamic
    broker config of this broker (IncrementalAlterConfigs on BROKER "1"): the cleaner starts
    and cleans."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    config = {
        "log.cleaner.threads": "0",
        "log.cleaner.backoff.ms": "50",
        "log.cleaner.worker.process": "false",
    }
    with Broker(config, log_level="INFO") as broker:
        topic = "dyn-compacted"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = {
            "cleanup.policy": "compact",
            "segment.ms": str(SEGMENT_MS),
            "min.cleanable.dirty.ratio": "0.01",
        }
        admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(15)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        _produce(producer, topic, [(b"k%d" % (i % 10), b"v%d" % i) for i in range(500)])
        roll = _roll(producer, topic)
        time.sleep(1.0)  # 20 backoffs: a running cleaner would have cleaned by now
        assert _checkpoint(broker, topic) == -1

        entry = ConfigEntry("log.cleaner.threads", "1", incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource("broker", "1", incremental_configs=[entry])
        admin.incremental_alter_configs([resource])[resource].result(15)
        _wait_cleaned_to(broker, topic, roll)
        got = _consume_all(broker.bootstrap, topic, roll + 1)
        assert len([m for m in got if m[0] < roll]) == 10  # the latest value of each key
        assert "log cleaner reconfigured: 1 thread(s)" in broker.read_log()
