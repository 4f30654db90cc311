"""Storage reads time only from the clock its log manager was given (gregor/clock.py): segment
creation times, LogAppendTime stamps, segment.ms rolls, flush times and delete delays all move
with a ManualClock, and never with the wall clock."""

from __future__ import annotations

import pickle

from gregor.clock import SYSTEM_CLOCK, ManualClock
from gregor.protocol.records.records import build_batch
from gregor.storage.config import LogConfig
from gregor.storage.log_manager import LogManager

T0 = 5_000_000  # far from any wall-clock time: a reading of the real clock would show


def test_a_log_takes_every_time_it_needs_from_the_log_managers_clock(tmp_path):
    clock = ManualClock(T0)
    config = LogConfig(message_timestamp_type="LogAppendTime", segment_ms=1000)
    mgr = LogManager([str(tmp_path)], config, clock=clock)
    mgr.startup()
    log = mgr.get_or_create("t", 0)
    assert log.clock is clock
    assert log.active_segment.created_ms == T0 and log.last_flush_ms == T0
    first = log.append(build_batch([(b"k", b"v")], base_timestamp=7))
    assert first.log_append_time == T0  # stamped with the clock's time, not the producer's
    clock.advance(1000)
    log.append(build_batch([(b"k", b"v")]))
    assert len(log.segments) == 1  # segment.ms has not passed on this clock (it must be over)
    clock.advance(1)
    third = log.append(build_batch([(b"k", b"v")]))
    assert len(log.segments) == 2 and log.active_segment.base_offset == third.first_offset
    assert log.active_segment.created_ms == T0 + 1001 == third.log_append_time
    log.flush()
    assert log.last_flush_ms == T0 + 1001
    mgr.shutdown()


def test_the_system_clock_pickles_as_itself_and_a_manual_clock_as_a_copy():
    assert pickle.loads(pickle.dumps(SYSTEM_CLOCK)) is SYSTEM_CLOCK
    clock = ManualClock(T0, monotonic_ms=10)
    copy = pickle.loads(pickle.dumps(clock))
    clock.advance(5)
    assert (copy.now_ms(), copy.monotonic_ms()) == (T0, 10)
    assert (clock.now_ms(), clock.monotonic_s()) == (T0 + 5, 0.015)


def test_a_manual_clock_sleeps_by_advancing_even_below_a_millisecond():
    clock = ManualClock(T0)
    for _ in range(4):
        clock.sleep(0.00025)
    assert clock.monotonic_ms() == 1 and clock.now_ms() == T0 + 1
    clock.set_ms(T0 - 60_000)  # the wall clock jumps back; monotonic time does not
    assert clock.now_ms() == T0 - 60_000 and clock.monotonic_ms() == 1
