"""Retention by time and by size: which segments go, in what order, and what readers see."""

import os
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.clock import ManualClock
from gregor.protocol.errors import OFFSET_OUT_OF_RANGE
from gregor.protocol.errors import KafkaError as GregorError
from gregor.protocol.records.records import build_batch
from gregor.storage import retention
from gregor.storage.config import LogConfig
from gregor.storage.log_manager import LogManager
from gregor.testing.broker import Broker

DAY = 86_400_000


def fill(log, batches, ts0, step_ms, size=1000):
    for i in range(batches):
        log.append(build_batch([(b"k%d" % i, b"v" * size)], base_timestamp=ts0 + i * step_ms))
    log.update_high_watermark(log.log_end_offset)


def test_time_retention_deletes_whole_old_segments_and_moves_the_start(tmp_path):
    clock = ManualClock(10 * DAY)
    mgr = LogManager(
        [str(tmp_path)],
        LogConfig(segment_bytes=5000, retention_ms=DAY, file_delete_delay_ms=1000),
        clock=clock,
    )
    mgr.startup()
    log = mgr.get_or_create("t", 0)
    fill(log, 40, ts0=7 * DAY, step_ms=DAY // 10)  # 4 days of records, a few per segment
    before = [(s.base_offset, s.largest_timestamp) for s in log.segments]
    assert len(before) > 4
    cutoff = clock.now_ms() - DAY
    expected_gone = 0
    for _base, ts in before:
        if ts >= cutoff:
            break
        expected_gone += 1
    assert 0 < expected_gone < len(before)
    assert mgr.enforce_retention(clock.now_ms()) == expected_gone
    assert log.log_start_offset == before[expected_gone][0]
    assert all(s.largest_timestamp >= cutoff for s in log.segments)
    # Readers below the new start are refused; at the start they get its first batch.
    with pytest.raises(GregorError) as err:
        log.read(0, 1 << 20)
    assert err.value.code == OFFSET_OUT_OF_RANGE
    assert log.read(log.log_start_offset, 100).length > 0
    # The files are renamed first and removed only after file.delete.delay.ms.
    deleted = [n for n in os.listdir(log.directory) if n.endswith(".deleted")]
    assert len(deleted) == 3 * expected_gone
    assert mgr.purge_deleted(clock.now_ms() + 999) == 0
    assert mgr.purge_deleted(clock.now_ms() + 1000) == expected_gone
    assert not [n for n in os.listdir(log.directory) if n.endswith(".deleted")]
    mgr.shutdown()


def test_size_retention_keeps_at_least_retention_bytes(tmp_path):
    mgr = LogManager(
        [str(tmp_path)],
        LogConfig(segment_bytes=5000, retention_bytes=12000, file_delete_delay_ms=0),
    )
    mgr.startup()
    log = mgr.get_or_create("t", 0)
    fill(log, 50, ts0=int(time.time() * 1000), step_ms=1)
    total = log.size_in_bytes
    deleted = retention.enforce(log, int(time.time() * 1000))
    assert deleted > 0
    assert log.size_in_bytes >= 12000
    # One more segment gone would have left less than retention.bytes.
    assert log.size_in_bytes - log.segments[0].size < 12000
    assert log.size_in_bytes < total
    mgr.shutdown()


def test_nothing_above_the_high_watermark_and_no_empty_active_segment_is_deleted(tmp_path):
    mgr = LogManager(
        [str(tmp_path)], LogConfig(segment_bytes=5000, retention_ms=0, file_delete_delay_ms=0)
    )
    mgr.startup()
    log = mgr.get_or_create("t", 0)
    fill(log, 20, ts0=1000, step_ms=1)
    log.update_high_watermark(log.segments[2].base_offset)  # only the first two are committed
    assert retention.enforce(log, 10 * DAY) == 2
    log.update_high_watermark(log.log_end_offset)
    retention.enforce(log, 10 * DAY)
    # Everything expired: the log rolled and kept one empty active segment at the end.
    assert len(log.segments) == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.log_end_offset == 20
    log.append(build_batch([(b"k", b"v")]))
    assert log.log_end_offset == 21
    mgr.shutdown()


def test_compact_only_topics_are_not_deleted_by_time(tmp_path):
    mgr = LogManager(
        [str(tmp_path)], LogConfig(segment_bytes=5000, retention_ms=0, cleanup_policy="compact")
    )
    mgr.startup()
    log = mgr.get_or_create("t", 0)
    fill(log, 20, ts0=1000, step_ms=1)
    assert retention.enforce(log, 10 * DAY) == 0
    assert log.log_start_offset == 0
    mgr.shutdown()


def test_broker_applies_retention_and_consumers_reset(tmp_path):
    with Broker(
        {"log.retention.check.interval.ms": "200", "log.segment.delete.delay.ms": "0"}
    ) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics(
            [NewTopic("old", 1, 1, config={"segment.bytes": "4096", "retention.ms": "60000"})]
        )["old"].result(10)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        old = int(time.time() * 1000) - 3_600_000
        for i in range(30):
            p.produce("old", value=b"x" * 500, key=b"%d" % i, timestamp=old)
            p.flush(10)
        now = int(time.time() * 1000)
        for i in range(5):
            p.produce("old", value=b"fresh-%d" % i, timestamp=now)
        assert p.flush(10) == 0
        c = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "r",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        # Retention may already have run while the old records were still being
        # written, so wait until the log start offset has settled (unchanged
        # over many retention checks) before asserting where a reset lands.
        deadline = time.monotonic() + 30
        low, settled_since = -1, time.monotonic()
        while time.monotonic() < deadline:
            now_low, high = c.get_watermark_offsets(TopicPartition("old", 0), timeout=5)
            if now_low != low:
                low, settled_since = now_low, time.monotonic()
            elif low > 0 and time.monotonic() - settled_since >= 2.0:
                break
            time.sleep(0.2)
        assert 0 < low <= 30 and high == 35
        # A consumer asking for offset 0, now deleted, is reset to the earliest kept record.
        c.assign([TopicPartition("old", 0, 0)])
        first = None
        while time.monotonic() < deadline and first is None:
            m = c.poll(0.5)
            if m is not None and not m.error():
                first = m
            elif m is not None and m.error().code() != KafkaError._PARTITION_EOF:
                pass
        assert first is not None and first.offset() == low
        c.close()
