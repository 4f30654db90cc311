"""`--throughput` pacing, driven by a fake clock the way `gregor perf produce` drives it: wait
while told to wait at least 1 ms, then send."""

import pytest

from gregor.cli.throttle import ThroughputThrottler


def run(rate: float, records: int, send_cost_ms: float, stall_at: int = -1, stall_ms: float = 0):
    """Send times of `records` records, each send costing `send_cost_ms` of the clock."""
    now = 1_000.0
    throttler = ThroughputThrottler(rate, now)
    sent_at = []
    for i in range(records):
        while (wait := throttler.wait_ms(i, now)) >= 1.0:
            now += wait
        if i == stall_at:
            now += stall_ms
        sent_at.append(now)
        now += send_cost_ms
    return sent_at


def most_in_any_window(times: list[float], window_ms: float) -> int:
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - window_ms:
            j += 1
        best = max(best, i - j + 1)
    return best


@pytest.mark.parametrize("rate", [50, 1000, 20_000])
def test_rate_is_kept_on_average_and_in_every_second(rate):
    times = run(rate, records=3 * rate, send_cost_ms=0.001)
    elapsed_s = (times[-1] - times[0]) / 1000
    assert elapsed_s == pytest.approx((3 * rate - 1) / rate, rel=0.01)
    # never more than a second's worth (plus the 1 ms of slack the sender keeps) in one second
    assert most_in_any_window(times, 1000.0) <= rate + max(1, rate // 1000) + 1


def test_a_record_is_never_sent_before_it_is_due_by_more_than_a_millisecond():
    rate = 200
    times = run(rate, records=500, send_cost_ms=0.0)
    for i, t in enumerate(times):
        assert t >= 1_000.0 + i * 1000 / rate - 1.0


def test_a_slow_sender_is_never_held_back():
    # 2 ms per send is slower than 1000/s: nothing waits, each send follows the last
    times = run(1000, records=100, send_cost_ms=2.0)
    assert [b - a for a, b in zip(times, times[1:], strict=False)] == [2.0] * 99


def test_a_stalled_sender_catches_up_then_keeps_the_rate():
    times = run(100, records=300, send_cost_ms=0.0, stall_at=100, stall_ms=500.0)
    # after half a second lost, the next 50 records go at once to get back on schedule
    assert times[150] - times[100] < 1.0
    # then the schedule holds: record i at start + 10 i ms
    assert times[299] == pytest.approx(1_000.0 + 299 * 10, abs=1.0)


def test_no_limit_never_waits_and_zero_is_refused():
    throttler = ThroughputThrottler(-1, 0.0)
    assert throttler.unlimited
    assert throttler.wait_ms(10**9, 0.0) == 0.0
    with pytest.raises(ValueError):
        ThroughputThrottler(0, 0.0)
