"""What the resolver process does with each record read: a resolved record when the winner
changes, dead letters (with their reason and origin) for refused records and losing writes."""

from __future__ import annotations

import pytest

from gregor.clock import ManualClock
from gregor.hlc import HybridClock, Resolver, Timestamp
from gregor.hlc import version_vector as vvs
from gregor.hlc.records import Out, Record, handle

pytestmark = pytest.mark.unit

NOW = 1_000_000


def rec(key, value, ts=None, vv=None, topic="orders", offset=0, extra=()):
    headers = list(extra)
    if ts is not None:
        headers.append(("hlc", ts.encode() if isinstance(ts, Timestamp) else ts))
    if vv is not None:
        headers.append(("hlc-vv", vvs.encode(vv)))
    return Record(topic, 0, offset, key, value, headers)


def setup():
    return Resolver(), HybridClock(0, ManualClock(now_ms=NOW).now_ms, max_clock_skew_ms=5_000)


def run(record, resolver, clock, dlq="dlq"):
    return handle(record, resolver, clock, "orders.resolved", dlq)


def test_a_new_winner_is_written_with_its_headers_and_an_old_write_is_not() -> None:
    resolver, clock = setup()
    t2 = Timestamp(NOW, 2, 1)
    outs, refused = run(rec(b"k", b"v2", t2, extra=[("user", b"x")]), resolver, clock)
    assert refused is None
    assert outs == [Out("orders.resolved", b"k", b"v2", [("hlc", t2.encode())])]
    outs, _ = run(rec(b"k", b"v1", Timestamp(NOW, 1, 1), topic="B.orders"), resolver, clock)
    assert outs == []
    outs, _ = run(rec(b"k", None, Timestamp(NOW, 3, 2), topic="B.orders"), resolver, clock)
    assert outs == [Out("orders.resolved", b"k", None, [("hlc", Timestamp(NOW, 3, 2).encode())])]


@pytest.mark.parametrize(
    "record, reason",
    [
        (rec(None, b"v", Timestamp(NOW, 0, 1)), "no-key"),
        (rec(b"k", b"v", None, extra=[("other", b"1")]), "no-hlc-header"),
        (rec(b"k", b"v", b"\0" * 15), "bad-header"),
        (rec(b"k", b"v", Timestamp(NOW + 3_600_000, 0, 1)), "clock-skew"),
    ],
)
def test_refused_records_go_to_the_dead_letters_with_their_reason(record, reason) -> None:
    resolver, clock = setup()
    outs, refused = run(record, resolver, clock)
    assert refused == reason
    assert len(resolver) == 0
    [dead] = outs
    assert (dead.topic, dead.key, dead.value) == ("dlq", record.key, record.value)
    headers = dict(dead.headers)
    assert headers["hlc.dead-letter.reason"] == reason.encode()
    assert headers["hlc.dead-letter.topic"] == b"orders"
    assert headers["hlc.dead-letter.offset"] == b"0"
    assert run(record, *setup(), dlq=None) == ([], reason)  # no dead-letter topic: counted only


def test_the_loser_of_a_conflict_goes_to_the_dead_letters_with_the_winner() -> None:
    resolver, clock = setup()
    win, lose = Timestamp(NOW, 5, 1), Timestamp(NOW, 4, 2)
    run(rec(b"k", b"mine", win, vv=vvs.make({1: 1}), offset=7), resolver, clock)
    outs, _ = run(
        rec(b"k", b"theirs", lose, vv=vvs.make({2: 1}), topic="B.orders", offset=9),
        resolver,
        clock,
    )
    [dead] = outs
    headers = dict(dead.headers)
    assert (dead.key, dead.value) == (b"k", b"theirs")
    assert headers["hlc.dead-letter.reason"] == b"conflict"
    assert headers["hlc.dead-letter.topic"] == b"B.orders"
    assert headers["hlc.dead-letter.offset"] == b"9"
    assert headers["hlc.dead-letter.winner"] == win.encode()
    assert resolver.conflicts == 1
