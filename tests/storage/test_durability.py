"""Durability settings: flush.messages and explicit flushes move the recovery point, and only
after an fsync of the data below it."""

from __future__ import annotations

import os

import pytest

from gregor.protocol.records.records import build_batch
from gregor.storage.config import LogConfig
from gregor.storage.log import Log

from .storage_helpers import all_batches


@pytest.fixture
def fsyncs(monkeypatch):
    """Every fsync, as (path of the fd) in call order; the real fsync still runs."""
    calls: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        real(fd)
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fsync", spy)
    return calls


def _batch(n: int = 1) -> bytearray:
    return build_batch([(b"k", b"v" * 100)] * n, base_timestamp=1000)


def test_flush_messages_one_fsyncs_every_append(tmp_path, fsyncs):
    config = LogConfig(flush_messages=1, segment_bytes=4096, segment_index_bytes=65536)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    for i in range(60):
        fsyncs.clear()
        log.append(_batch(i % 3 + 1), now_ms=0)
        assert log.recovery_point == log.log_end_offset
        # The segment that took the batch was fsynced before the recovery point moved.
        assert log.active_segment.log_path in fsyncs
    assert len(log.segments) > 3


def test_flush_messages_n(tmp_path, fsyncs):
    config = LogConfig(flush_messages=5, segment_index_bytes=65536)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    points = []
    for _ in range(12):
        log.append(_batch(2), now_ms=0)
        points.append(log.recovery_point)
    # Flushed whenever 5 or more offsets were unflushed: after the 3rd, 6th, 9th, 12th append.
    assert points == [0, 0, 6, 6, 6, 12, 12, 12, 18, 18, 18, 24]


def test_default_flush_policy_leaves_it_to_rolls_and_flush(tmp_path, fsyncs):
    config = LogConfig(segment_bytes=2048, segment_index_bytes=65536)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    for _ in range(50):
        log.append(_batch(), now_ms=0)
        # A roll fsyncs the old segment: the recovery point is the active segment's base.
        assert log.recovery_point == log.active_segment.base_offset
    assert log.recovery_point < log.log_end_offset
    fsyncs.clear()
    log.flush(log.log_end_offset - 1)
    assert log.recovery_point == log.log_end_offset - 1
    assert fsyncs == [log.active_segment.log_path]
    fsyncs.clear()
    log.flush()
    assert log.recovery_point == log.log_end_offset
    assert fsyncs == []  # nothing new to write: the file was fsynced already
    log.flush()  # idempotent
    assert log.recovery_point == log.log_end_offset
    log.append(_batch(), now_ms=0)
    assert log.recovery_point == log.log_end_offset - 1
    log.flush()
    assert fsyncs == [log.active_segment.log_path]


def test_recovery_point_bounds_recovery(tmp_path):
    """After a crash, segments below the recovery point are not re-read: damage in their data
    (which a crash cannot cause once fsynced) goes unnoticed, as in Kafka; at or above it, it is
    found."""
    config = LogConfig(segment_bytes=2048, segment_index_bytes=65536)
    d = str(tmp_path / "t-0")
    log = Log.open(d, config, now_ms=0)
    for _ in range(60):
        log.append(_batch(), now_ms=0)
    content = all_batches(log)
    first = log.segments[0]
    log.close_handles()
    with open(first.log_path, "r+b") as f:  # a flipped byte in a record of the first segment
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    recovered = Log.open(
        d, config, clean_shutdown=False, recovery_point=log.recovery_point, now_ms=0
    )
    assert recovered.log_end_offset == 60 and len(all_batches(recovered)) == len(content)
    recovered.close_handles()
    recovered = Log.open(d, config, clean_shutdown=False, recovery_point=0, now_ms=0)
    assert recovered.log_end_offset == 0 and all_batches(recovered) == []


def test_a_recovered_tail_is_durable_only_after_the_next_flush_fsyncs_it(tmp_path, fsyncs):
    # After a crash, what the loader re-read may be in the page cache only: the recovery point
    # stays where the last flush left it (as Kafka's LogLoader keeps it), so a second crash
    # re-checks that tail, and the next flush fsyncs every recovered segment, closed or not.
    config = LogConfig(segment_bytes=2048, segment_index_bytes=65536)
    directory = str(tmp_path / "t-0")
    log = Log.open(directory, config, now_ms=0)
    for _ in range(10):
        log.append(_batch(), now_ms=0)
    log.flush()
    flushed = log.recovery_point
    for _ in range(30):  # rolls fsync the old segments; the last ones are never flushed
        log.append(_batch(), now_ms=0)
    end = log.log_end_offset
    log.close_handles()  # a crash: no flush
    log = Log.open(directory, config, recovery_point=flushed, clean_shutdown=False, now_ms=0)
    assert log.log_end_offset == end
    assert log.recovery_point == flushed  # not the log end: nothing recovered was fsynced
    recovered = [s.log_path for s in log.segments if s.base_offset + 1 > flushed]
    assert len(recovered) > 1  # the tail spans closed segments and the active one
    fsyncs.clear()
    log.flush()
    assert log.recovery_point == end
    assert set(recovered) <= set(fsyncs)
