"""The latency histogram of `gregor perf`: exact below 256 us, within 1/128 above, nearest-rank."""

import math
import random

import pytest

from gregor.cli.perf_stats import (
    SLOTS,
    LatencyHistogram,
    bucket_high,
    bucket_of,
    summary,
)


def exact_percentile(values: list[int], p: float) -> int:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p * len(ordered) / 100)) - 1]


def filled(values: list[int]) -> LatencyHistogram:
    hist = LatencyHistogram()
    for v in values:
        hist.record_us(v)
    return hist


def test_buckets_cover_every_value_once_and_in_order():
    previous_high = -1
    for index in range(SLOTS):
        high = bucket_high(index)
        assert bucket_of(previous_high + 1) == index
        assert bucket_of(high) == index
        assert high > previous_high
        previous_high = high
    assert previous_high == (1 << 64) - 1


def test_bucket_width_is_at_most_a_128th_of_its_values():
    for value in [0, 1, 255, 256, 257, 1000, 123_456, 10**9, (1 << 63) + 5]:
        index = bucket_of(value)
        low = bucket_high(index - 1) + 1 if index else 0
        assert low <= value <= bucket_high(index)
        assert bucket_high(index) - low <= max(0, low // 128)


def test_nearest_rank_is_exact_for_small_values():
    hist = filled(list(range(1, 101)))
    assert hist.percentiles_us([50, 95, 99, 99.9, 100]) == [50, 95, 99, 100, 100]
    assert filled(list(range(1, 1001))).percentiles_us([99.9]) == [999]
    # one value: every percentile is it
    assert filled([7]).percentiles_us([1, 50, 99.9]) == [7, 7, 7]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_are_never_below_and_at_most_a_128th_above_the_exact_value(seed):
    rng = random.Random(seed)
    values = [int(rng.lognormvariate(8, 2)) for _ in range(20_000)]
    hist = filled(values)
    ps = [50, 95, 99, 99.9]
    for p, got in zip(ps, hist.percentiles_us(ps), strict=True):
        want = exact_percentile(values, p)
        assert want <= got <= want + want // 128, (p, want, got)
    assert hist.max_us == max(values)
    assert hist.mean_us() == pytest.approx(sum(values) / len(values))
    # the last bucket is capped at the largest value recorded
    assert hist.percentiles_us([100]) == [max(values)]


def test_percentiles_in_any_order_and_repeated():
    hist = filled(list(range(1, 101)))
    assert hist.percentiles_us([99, 50, 99, 1]) == [99, 50, 99, 1]


def test_negative_latencies_count_as_zero_and_empty_is_zero():
    assert LatencyHistogram().percentiles_us([50, 99]) == [0, 0]
    assert LatencyHistogram().mean_us() == 0.0
    hist = filled([-5, -1])
    assert hist.percentiles_us([50]) == [0] and hist.max_us == 0


def test_summary_fields_and_units():
    hist = filled([100, 150, 200, 250])  # microseconds
    figures = summary(records=4, size_bytes=4 * 1024 * 1024, elapsed_ms=2000.0, hist=hist)
    assert figures == {
        "records": 4,
        "bytes": 4 * 1024 * 1024,
        "elapsed_ms": 2000.0,
        "records_per_sec": 2.0,
        "mb_per_sec": 2.0,
        "latency_ms": {
            "avg": 0.175,
            "p50": 0.15,
            "p95": 0.25,
            "p99": 0.25,
            "p999": 0.25,
            "max": 0.25,
        },
    }
    assert summary(0, 0, 0.0, LatencyHistogram())["records_per_sec"] == 0.0
