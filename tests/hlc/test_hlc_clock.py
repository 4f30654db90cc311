"""The hybrid logical clock with the wall clock driven by hand: the paper's send and receive
rules, monotonic timestamps when the wall clock goes back, and refusal of a timestamp further
ahead than max.clock.skew.ms; and the 16-byte `hlc` header."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.clock import ManualClock
from gregor.hlc import ClockSkewError, HeaderError, HybridClock, Timestamp
from gregor.hlc.timestamp import MAX_LOGICAL

pytestmark = pytest.mark.unit


def clock_at(ms: int, node: int = 7, skew: int = 1000) -> tuple[ManualClock, HybridClock]:
    wall = ManualClock(now_ms=ms)
    return wall, HybridClock(node, wall.now_ms, max_clock_skew_ms=skew)


def test_now_follows_the_wall_clock_and_counts_within_a_millisecond() -> None:
    wall, hlc = clock_at(1_000)
    assert hlc.now() == Timestamp(1_000, 0, 7)
    assert hlc.now() == Timestamp(1_000, 1, 7)
    assert hlc.now() == Timestamp(1_000, 2, 7)
    wall.advance(5)
    assert hlc.now() == Timestamp(1_005, 0, 7)


def test_now_stays_monotonic_when_the_wall_clock_goes_back() -> None:
    wall, hlc = clock_at(10_000)
    first = hlc.now()
    wall.set_ms(9_000)  # an NTP step back
    later = [hlc.now() for _ in range(3)]
    assert later == [Timestamp(10_000, i, 7) for i in (1, 2, 3)]
    assert first < later[0]
    wall.set_ms(10_001)
    assert hlc.now() == Timestamp(10_001, 0, 7)


def test_update_from_a_timestamp_ahead_adopts_it_and_counts_past_it() -> None:
    wall, hlc = clock_at(1_000)
    hlc.now()
    got = hlc.update(Timestamp(1_500, 4, 9))  # 500 ms ahead, within the bound
    assert got == Timestamp(1_500, 5, 7)
    assert hlc.now() == Timestamp(1_500, 6, 7)  # the wall clock (1,000) is behind: count


def test_update_rules_of_the_paper() -> None:
    # l' == l == m.l: the greater counter plus one
    _, hlc = clock_at(1_000)
    hlc.update(Timestamp(1_000, 3, 1))
    assert hlc.last == Timestamp(1_000, 4, 7)
    assert hlc.update(Timestamp(1_000, 9, 1)) == Timestamp(1_000, 10, 7)
    assert hlc.update(Timestamp(1_000, 2, 1)) == Timestamp(1_000, 11, 7)
    # l' == l > m.l: our counter plus one
    assert hlc.update(Timestamp(900, 50, 1)) == Timestamp(1_000, 12, 7)
    # the wall clock ahead of both: counter back to 0
    wall, hlc = clock_at(2_000)
    assert hlc.update(Timestamp(1_500, 50, 1)) == Timestamp(2_000, 0, 7)
    wall.advance(1)
    assert hlc.update(Timestamp(1_999, 0, 1)) == Timestamp(2_001, 0, 7)


def test_a_timestamp_further_ahead_than_the_bound_is_refused_and_changes_nothing() -> None:
    wall, hlc = clock_at(1_000_000, skew=2_000)
    before = hlc.now()
    assert hlc.update(Timestamp(1_002_000, 0, 3)) > before  # exactly the bound: adopted
    last = hlc.last
    hour = 3_600_000
    with pytest.raises(ClockSkewError) as err:
        hlc.update(Timestamp(1_000_000 + hour, 0, 3))
    assert hlc.last == last
    assert err.value.skew_ms == hour
    message = str(err.value)
    assert "3600000 ms ahead" in message and "max.clock.skew.ms=2000" in message
    assert "node 3" in message


def test_the_counter_never_wraps() -> None:
    _, hlc = clock_at(5)
    hlc.update(Timestamp(5, MAX_LOGICAL - 1, 2))
    assert hlc.last == Timestamp(5, MAX_LOGICAL, 7)
    assert hlc.now() == Timestamp(6, 0, 7)  # the next millisecond, not counter 0 of this one


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="node_id"):
        HybridClock(2**32)
    with pytest.raises(ValueError, match="max.clock.skew.ms"):
        HybridClock(1, max_clock_skew_ms=-1)


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("tick"), st.integers(-5_000, 5_000)),
            st.tuples(
                st.just("recv"),
                st.integers(-5_000, 5_000),
                st.integers(0, 20),
                st.integers(0, 10),
            ),
        ),
        max_size=60,
    )
)
def test_every_timestamp_exceeds_all_before_it_and_stays_near_the_wall_clock(events) -> None:
    """Any mix of wall-clock jumps (both ways), sends and receives: strictly increasing, after
    everything received, and never more than the bound ahead of the greatest wall time seen."""
    wall, hlc = clock_at(100_000, skew=1_000)
    seen: list[Timestamp] = []
    greatest_wall = wall.now_ms()
    for event in events:
        wall.set_ms(max(0, wall.now_ms() + event[1] // 10))
        greatest_wall = max(greatest_wall, wall.now_ms())
        if event[0] == "tick":
            ts = hlc.now()
        else:
            received = Timestamp(max(0, wall.now_ms() + event[1]), event[2], event[3])
            try:
                ts = hlc.update(received)
            except ClockSkewError:
                assert received.physical_ms - wall.now_ms() > 1_000
                continue
            assert ts[:2] > received[:2]
        assert all(ts > s for s in seen)
        assert ts.physical_ms <= greatest_wall + 1_000
        seen.append(ts)


def test_header_layout_is_fixed_and_big_endian() -> None:
    ts = Timestamp(0x0102030405060708, 0x090A0B0C, 0x0D0E0F10)
    assert ts.encode() == bytes(range(1, 17))
    assert Timestamp.decode(ts.encode()) == ts
    assert Timestamp.decode(memoryview(ts.encode())) == ts


@given(
    st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
    st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
)
def test_header_round_trips_and_orders_as_its_bytes(a, b) -> None:
    ta, tb = Timestamp(*a), Timestamp(*b)
    assert Timestamp.decode(ta.encode()) == ta
    assert (ta < tb) == (ta.encode() < tb.encode())


def test_header_of_a_wrong_length_or_range_is_a_clear_error() -> None:
    for data in (b"", b"\0" * 15, b"\0" * 17):
        with pytest.raises(HeaderError, match=f"must be 16 bytes .*got {len(data)}"):
            Timestamp.decode(data)
    with pytest.raises(HeaderError, match="no value"):
        Timestamp.decode(None)
    with pytest.raises(ValueError, match="logical out of range"):
        Timestamp(1, 2**32, 1).encode()
    with pytest.raises(ValueError, match="physical_ms out of range"):
        Timestamp(-1, 0, 1).encode()
