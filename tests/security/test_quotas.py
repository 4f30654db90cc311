"""The quota core: Kafka's precedence of quota entities, the sliding-window rate and the throttle
time, table-driven against values worked out by hand from Kafka's formulas."""

from __future__ import annotations

import pytest

from gregor.security.quotas import CLIENT_ID, USER, Entity, QuotaState, Rate, resolve

pytestmark = pytest.mark.unit

U, C = "alice", "app"
LEVELS: list[tuple[Entity, tuple[str, str]]] = [
    (((CLIENT_ID, C), (USER, U)), (U, C)),  # 1 /config/users/U/clients/C
    (((CLIENT_ID, None), (USER, U)), (U, C)),  # 2 /config/users/U/clients/<default>
    (((USER, U),), (U, "")),  # 3 /config/users/U
    (((CLIENT_ID, C), (USER, None)), (U, C)),  # 4 /config/users/<default>/clients/C
    (((CLIENT_ID, None), (USER, None)), (U, C)),  # 5 /config/users/<default>/clients/<default>
    (((USER, None),), (U, "")),  # 6 /config/users/<default>
    (((CLIENT_ID, C),), ("", C)),  # 7 /config/clients/C
    (((CLIENT_ID, None),), ("", C)),  # 8 /config/clients/<default>
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_most_specific_entity_binds_and_says_what_is_measured_together(level: int) -> None:
    # Every level from `level` down is set; the one at `level` wins.
    bounds = {ent: float(100 + i) for i, (ent, _) in enumerate(LEVELS) if i >= level}
    assert resolve(bounds, U, C) == (LEVELS[level][1], float(100 + level))


@pytest.mark.parametrize(
    ("bounds", "user", "client", "expected"),
    [
        ({}, U, C, None),
        ({(("user", "bob"),): 5.0}, U, C, None),  # another user's quota
        ({(("client-id", "other"),): 5.0}, U, C, None),
        ({(("user", U),): 5.0, (("client-id", C),): 9.0}, U, C, ((U, ""), 5.0)),  # user first
        ({(("client-id", None),): 7.0}, U, "x", (("", "x"), 7.0)),  # default: per client id
        ({(("user", None),): 7.0}, "bob", C, (("bob", ""), 7.0)),  # default: per user
    ],
)
def test_resolve_cases(bounds, user, client, expected) -> None:  # type: ignore[no-untyped-def]
    assert resolve(bounds, user, client) == expected


@pytest.mark.parametrize(
    ("events", "now", "rate", "window"),
    [
        # One event: the window counts as (num - 1) whole windows = 10 s.
        ([(0, 1000.0)], 0, 100.0, 10_000),
        # Events over 2 s, under 10 full windows: topped up to 10 whole windows.
        ([(0, 1000.0), (1000, 1000.0), (2000, 1000.0)], 2000, 300.0, 10_000),
        # 12.5 s elapsed since the oldest sample kept: the window is that.
        ([(t * 500, 100.0) for t in range(26)], 12_500, None, None),
        # 15 s of 1000 per second.
        ([(t * 1000, 1000.0) for t in range(15)], 14_000, None, None),
    ],
)
def test_rate_over_sliding_windows(events, now, rate, window) -> None:  # type: ignore[no-untyped-def]
    r = Rate(num=11, window_ms=1000)
    for t, v in events:
        r.record(v, t)
    size = r.window_size_ms(now)
    measured = r.measure(now)
    if rate is not None:
        assert (measured, size) == (pytest.approx(rate), window)
    elif now == 12_500:
        # One sample a second, 13 started: the ring of num + 1 = 12 lost the one of 0 s; the one
        # of 1 s (last event 1.5 s) is 11 s idle, so reset: 2 s .. 12.5 s remain, 22 events.
        assert size == 10_500
        assert measured == pytest.approx(2200.0 / 10.5)
    else:
        # The ring keeps 3 .. 14 s; the sample of 3 s is 11 s idle, so reset: 4 .. 14 s remain.
        assert size == 10_000
        assert measured == pytest.approx(11_000 / 10)


def test_a_sample_idle_for_the_whole_window_is_reset() -> None:
    r = Rate(num=2, window_ms=1000)
    r.record(5000.0, 0)
    assert r.measure(1999) == pytest.approx(5000.0 / 1.999)
    assert r.measure(2000) == 0.0


@pytest.mark.parametrize(
    ("bound", "recorded", "throttle"),
    [
        (1000.0, 10_000.0, 0),  # exactly at the bound over 10 s
        (1000.0, 15_000.0, 5_000),  # (1500 - 1000) / 1000 x 10 s
        (1000.0, 30_000.0, 20_000),
        (2048.0, 20_481.0, 0),  # 2048.1 per second: X = 0.1 / 2048 x 10000 = 0.49 -> 0
        (2048.0, 20_490.0, 5),  # 2049 per second: X = 1 / 2048 x 10000 = 4.88 -> 5
    ],
)
def test_throttle_time_is_kafkas(bound: float, recorded: float, throttle: int) -> None:
    state = QuotaState({((USER, U),): bound}, num=11, window_ms=1000)
    assert state.record(U, C, recorded, 0) == throttle


def test_no_quota_no_sensor_no_throttle() -> None:
    state = QuotaState({((USER, "bob"),): 1.0})
    assert state.record(U, C, 1e9, 0) == 0
    assert state.sensors == {}


def test_a_user_quota_is_shared_by_its_clients_and_a_default_is_not() -> None:
    state = QuotaState({((USER, U),): 1000.0, ((USER, None),): 1000.0})
    assert state.record(U, "a", 10_000.0, 0) == 0
    assert state.record(U, "b", 5_000.0, 0) == 5_000  # same sensor (alice, "")
    assert state.record("bob", "a", 10_000.0, 0) == 0  # default user: bob's own sensor
    assert state.record("carol", "a", 10_000.0, 0) == 0
    assert set(state.sensors) == {(U, ""), ("bob", ""), ("carol", "")}
    state.expire(11_000)
    assert state.sensors == {}


def test_strict_check_refuses_only_once_the_rate_is_already_over() -> None:
    state = QuotaState({((CLIENT_ID, C),): 1.0}, num=4, window_ms=1000)
    assert state.over(U, C, 0) == 0  # nothing recorded yet
    state.add(U, C, 10.0, 0)  # admitted, though it takes the rate to 10 / 3 s
    assert state.over(U, C, 0) == 7_000  # (10 / 3 s - 1) / 1 x 3000 ms
    assert state.over(U, "other", 0) == 0
    assert state.over(U, C, 4_000) == 0  # the sample expired
