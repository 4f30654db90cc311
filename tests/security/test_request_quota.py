"""`request_percentage` quotas: the loop time charged per request, Kafka's exemptions and bound
on the throttle time (unit), and on a real broker a client limited to 1% of the loop that
sends cheap requests in a loop is told `throttle_time_ms`, muted and slowed, while another
client on the same broker is not. The rates are printed; the assert on them is loose."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from gregor.broker.request_quota import RequestQuota, exempt
from gregor.protocol import api_keys
from gregor.protocol.messages import (
    ApiVersionsRequest,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
)
from gregor.security.quotas import CLIENT_ID, REQUEST_PERCENTAGE, USER
from gregor.testing.broker import Broker
from gregor.testing.raw_client import RawClient

MS = 1_000_000  # nanoseconds


def header(key: int = api_keys.METADATA, client_id: str = "greedy", version: int = 12) -> Any:
    return SimpleNamespace(request_api_key=key, request_api_version=version, client_id=client_id)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("key", "version", "body", "is_exempt"),
    [
        (api_keys.METADATA, 12, MetadataRequest(topics=None), False),
        (api_keys.API_VERSIONS, 3, ApiVersionsRequest(), False),
        (api_keys.PRODUCE, 9, ProduceRequest(acks=1), False),
        (api_keys.PRODUCE, 9, ProduceRequest(acks=0), True),  # no response to carry it
        (api_keys.FETCH, 12, FetchRequest(replica_id=-1), False),  # a consumer
        (api_keys.FETCH, 12, FetchRequest(replica_id=2), True),  # a follower
        (
            api_keys.FETCH,
            15,
            FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=2, replica_epoch=5)),
            True,
        ),
        (api_keys.WRITE_TXN_MARKERS, 1, None, True),
        (api_keys.ALTER_PARTITION, 3, None, True),
        (api_keys.BROKER_HEARTBEAT, 1, None, True),
        (api_keys.CREATE_TOPICS, 7, None, False),
    ],
)
def test_cluster_actions_are_exempt_as_in_kafka(
    key: int, version: int, body: Any, is_exempt: bool
) -> None:
    assert exempt(key, version, body) is is_exempt


@pytest.mark.unit
def test_loop_time_is_charged_as_a_percentage_of_the_loop_and_the_throttle_bounded() -> None:
    quotas: dict[Any, Any] = {((CLIENT_ID, "greedy"),): {REQUEST_PERCENTAGE: 1.0}}
    rq = RequestQuota(lambda: quotas, window_num=11, window_size_s=1)
    conn: dict[str, Any] = {}
    request = MetadataRequest(topics=None)
    # 50 ms of loop time = 5 (% x s); over the first window (10 s): 0.5%, under 1%.
    assert rq.charge(conn, header(), request, 50 * MS, 0) == 0
    # 60 ms more: 11 (% x s) / 10 s = 1.1%: (1.1 - 1) / 1 x 10 s = 1000 ms.
    assert rq.charge(conn, header(), request, 60 * MS, 0) == 1000
    # 1 s more: 111 / 10 = 11.1%, 101 s by Kafka's formula, bounded to one sample (1 s).
    assert rq.charge(conn, header(), request, 1000 * MS, 0) == 1000
    # Another client id, and an exempt request, are not charged.
    assert rq.charge(conn, header(client_id="modest"), request, 1000 * MS, 0) == 0
    follower = FetchRequest(replica_id=2)
    assert rq.charge(conn, header(api_keys.FETCH, version=12), follower, 10**10, 0) == 0
    state = rq.state()
    assert state is not None
    assert state.sensors[("", "greedy")].measure(0) == pytest.approx(11.1)  # 1.11 s in 10 s


@pytest.mark.unit
def test_the_quota_follows_the_image_and_a_user_quota_is_shared() -> None:
    quotas: dict[Any, Any] = {}
    rq = RequestQuota(lambda: quotas, window_num=11, window_size_s=1)
    assert rq.state() is None
    quotas = {((USER, None),): {REQUEST_PERCENTAGE: 1.0}}  # every user: its own 1%
    assert rq.state() is not None
    conn: dict[str, Any] = {}
    assert rq.charge(conn, header(client_id="a"), None, 80 * MS, 0) == 0
    assert rq.charge(conn, header(client_id="b"), None, 80 * MS, 0) > 0  # same user: shared


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with Broker(data_dir=str(tmp_path_factory.mktemp("request-quota"))) as b:
        yield b


def set_quota(broker: Broker, client_id: str, percent: float) -> None:
    from gregor.protocol import errors
    from gregor.protocol.messages import AlterClientQuotasRequest as A

    request = A(
        entries=[
            A.EntryData(
                entity=[A.EntityData(entity_type=CLIENT_ID, entity_name=client_id)],
                ops=[A.OpData(key=REQUEST_PERCENTAGE, value=percent, remove=False)],
            )
        ],
        validate_only=False,
    )
    with RawClient(broker.bootstrap) as raw:
        answer = raw.call(api_keys.ALTER_CLIENT_QUOTAS, 1, request)
    assert [e.error_code for e in answer.entries] == [errors.NONE]


def metadata_loop(raw: RawClient, seconds: float, until_throttled: bool = False) -> list[int]:
    """Metadata requests one after another for `seconds` (or until one is throttled): the
    throttle time of each answer."""
    throttles = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        answer = raw.call(api_keys.METADATA, 12, MetadataRequest(topics=None))
        throttles.append(answer.throttle_time_ms)
        if until_throttled and answer.throttle_time_ms:
            break
    return throttles


@pytest.mark.client
def test_a_client_over_its_request_percentage_is_throttled_and_another_is_not(
    broker: Broker,
) -> None:
    set_quota(broker, "greedy", 1.0)
    time.sleep(0.5)  # the quota reaches the broker's image
    with RawClient(broker.bootstrap, client_id="greedy") as greedy:
        started = time.monotonic()
        before = metadata_loop(greedy, 30, until_throttled=True)
        first_rate = len(before) / (time.monotonic() - started)
        assert before[-1] > 0, "never throttled"
        started = time.monotonic()
        after = metadata_loop(greedy, 4)
        later_rate = len(after) / (time.monotonic() - started)
        with RawClient(broker.bootstrap, client_id="modest") as modest:
            started = time.monotonic()
            other = metadata_loop(modest, 2)
            other_rate = len(other) / (time.monotonic() - started)
    throttled = [t for t in after if t]
    print(
        f"\ngreedy: {first_rate:.0f} requests/s until the first throttle ({len(before)} "
        f"requests), then {later_rate:.0f}/s, {len(throttled)} of {len(after)} throttled "
        f"(up to {max(after)} ms); modest, same broker, while greedy is still over its quota: {other_rate:.0f}/s, "
        f"throttle max {max(other)} ms"
    )
    assert throttled and max(after) <= 1000  # at most one sample, as Kafka bounds it
    assert later_rate < first_rate / 2
    assert max(other) == 0 and other_rate > 2 * later_rate
