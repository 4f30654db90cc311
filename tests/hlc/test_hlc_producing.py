"""Stamping headers for any client, reading them back into the clock, and the version-vector
header."""

from __future__ import annotations

import pytest

from gregor.clock import ManualClock
from gregor.hlc import (
    ClockSkewError,
    HeaderError,
    HlcProducer,
    HybridClock,
    Timestamp,
    observe,
    read_timestamp,
    stamp,
)
from gregor.hlc import version_vector as vvs

pytestmark = pytest.mark.unit


def make_clock(ms: int = 50_000, node: int = 3) -> tuple[ManualClock, HybridClock]:
    wall = ManualClock(now_ms=ms)
    return wall, HybridClock(node, wall.now_ms, max_clock_skew_ms=2_000)


def test_stamp_keeps_the_users_headers_and_adds_one_hlc() -> None:
    _, clock = make_clock()
    user = [("trace", b"abc"), ("hlc", b"forged"), ("n", "text")]
    headers, ts = stamp(user, clock)
    assert headers == [("trace", b"abc"), ("n", b"text"), ("hlc", ts.encode())]
    assert ts == Timestamp(50_000, 0, 3)
    headers, ts2 = stamp({"a": b"1"}, clock, vv=vvs.make({3: 2, 1: 1}))
    assert ts2 > ts
    assert headers[0] == ("a", b"1")
    assert vvs.decode(dict(headers)["hlc-vv"]) == ((1, 1), (3, 2))
    assert stamp(None, clock)[0] == [("hlc", Timestamp(50_000, 2, 3).encode())]


class FakeMessage:
    """The shape of a confluent-kafka Message's headers()."""

    def __init__(self, headers):
        self._headers = headers

    def headers(self):
        return self._headers


def test_observe_moves_the_clock_past_what_was_read() -> None:
    _, clock = make_clock()
    read = Timestamp(51_000, 7, 9)  # written by a node 1 s ahead
    assert observe(FakeMessage([("x", b""), ("hlc", read.encode())]), clock) == read
    assert clock.now() > read
    assert observe(FakeMessage(None), clock) is None
    assert read_timestamp([("hlc", read.encode())]) == read


def test_observe_refuses_a_record_an_hour_ahead() -> None:
    _, clock = make_clock()
    before = clock.last
    ahead = Timestamp(50_000 + 3_600_000, 0, 9)
    with pytest.raises(ClockSkewError, match="3600000 ms ahead"):
        observe(FakeMessage([("hlc", ahead.encode())]), clock)
    assert clock.last == before
    with pytest.raises(HeaderError, match="16 bytes"):
        observe(FakeMessage([("hlc", b"short")]), clock)


class RecordingProducer:
    def __init__(self):
        self.sent = []

    def produce(self, topic, value=None, key=None, headers=None, **kwargs):
        self.sent.append((topic, key, value, headers, kwargs))

    def flush(self, timeout=None):
        return 0


def test_hlc_producer_stamps_every_record() -> None:
    wall, clock = make_clock()
    inner = RecordingProducer()
    p = HlcProducer(clock, producer=inner)
    t1 = p.produce("orders", b"v1", b"k", headers=[("h", b"1")], partition=2)
    wall.advance(3)
    t2 = p.produce("orders", value=None, key=b"k")
    assert (t1, t2) == (Timestamp(50_000, 0, 3), Timestamp(50_003, 0, 3))
    assert inner.sent[0] == (
        "orders",
        b"k",
        b"v1",
        [("h", b"1"), ("hlc", t1.encode())],
        {"partition": 2},
    )
    assert inner.sent[1][3] == [("hlc", t2.encode())]
    assert p.flush(1) == 0  # the wrapped producer's own methods
    with pytest.raises(ValueError, match="one of them"):
        HlcProducer(clock)


def test_version_vectors() -> None:
    a = vvs.make({1: 2, 2: 1})
    b = vvs.bump(a, 2)
    assert b == ((1, 2), (2, 2))
    assert vvs.descends(b, a) and not vvs.descends(a, b)
    c = vvs.bump(a, 1)
    assert vvs.concurrent(b, c)
    assert vvs.merge(b, c) == ((1, 3), (2, 2))
    assert vvs.make({1: 0}) == ()
    assert vvs.decode(vvs.encode(b)) == b
    assert vvs.decode(b"") == ()
    with pytest.raises(HeaderError, match="multiple of 12 bytes"):
        vvs.decode(b"\0" * 13)
    with pytest.raises(HeaderError, match="sorted and distinct"):
        vvs.decode(vvs.encode(((2, 1),)) + vvs.encode(((1, 1),)))
