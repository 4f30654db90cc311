"""The quota core's part in a throttled consumer Fetch (Kafka's KafkaApis.handleFetchRequest):
the bytes of a response that is not sent are taken back from the window, and a Fetch asks for
at most what the window holds (getMaxValueInQuotaWindow)."""

from __future__ import annotations

import pytest

from gregor.security.quotas import CLIENT_ID, USER, QuotaState

pytestmark = pytest.mark.unit


def test_a_throttled_responses_bytes_are_taken_back() -> None:
    state = QuotaState({((CLIENT_ID, "app"),): 1000.0}, num=4, window_ms=1000)
    assert state.record("alice", "app", 2_500.0, 0) == 0  # 2500 / 3 s: within 1000/s
    assert state.record("alice", "app", 2_000.0, 0) == 1_500  # (4500 / 3 s - 1000) / 1000 x 3 s
    state.unrecord("alice", "app", 2_000.0, 0)
    assert state.over("alice", "app", 0) == 0  # back to 2500 / 3 s
    assert state.record("alice", "app", 500.0, 0) == 0  # 3000 / 3 s: at the quota, not over


@pytest.mark.parametrize(
    ("bounds", "num", "window_ms", "most"),
    [
        ({((CLIENT_ID, "app"),): 1000.0}, 11, 1000, 10_000),  # Kafka's defaults: 10 windows
        ({((CLIENT_ID, "app"),): 1000.0}, 4, 1000, 3_000),
        ({((CLIENT_ID, "app"),): 262_144.0}, 4, 2000, 1_572_864),  # 2 s windows
        ({((CLIENT_ID, None), (USER, "alice")): 1.5}, 3, 1000, 3),  # truncated, as Java's toInt
        ({((CLIENT_ID, "other"),): 1000.0}, 11, 1000, None),  # no quota binds: no cap
    ],
)
def test_at_most_the_window_is_asked_for(
    bounds: dict, num: int, window_ms: int, most: int | None
) -> None:
    assert QuotaState(bounds, num, window_ms).max_in_window("alice", "app") == most
