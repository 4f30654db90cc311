"""The console's pure parts: how values are shown, the browser's query checks, rates and lag
from samples, the SVG charts and the listener form."""

from __future__ import annotations

import pytest

from gregor.console import browse, charts, history, values
from gregor.console.errors import BadInput
from gregor.console.settings import MAX_PAGE_SIZE, parse_listen

pytestmark = pytest.mark.unit


def test_values_json_pretty_text_as_is_binary_as_hex_and_null():
    assert values.show(b'{"a":[1,2]}') == values.Shown(
        "json", '{\n  "a": [\n    1,\n    2\n  ]\n}', 11
    )
    assert values.show(b"plain <b>text</b>").kind == "text"
    assert values.show(b"42").kind == "text"  # a JSON scalar is shown as the text it is
    shown = values.show(b"\x00\x01\xffAB")
    assert shown.kind == "binary"
    assert shown.text == "00000000: " + "0001 ff41 42".ljust(39) + "  ...AB"
    assert values.show(None) == values.Shown("null", "null", 0)


def test_values_long_ones_are_cut_on_a_character_boundary():
    data = "é".encode() * values.MAX_SHOWN  # two bytes each: the cut falls inside one
    shown = values.show(data)
    assert shown.kind == "text" and shown.truncated and shown.size == len(data)
    assert set(shown.text) == {"é"}
    assert values.show(b"\x00" * (values.MAX_SHOWN + 5)).truncated


def test_matches_is_a_byte_substring_test():
    assert values.matches(b"order-17", "der-1")
    assert not values.matches(b"order-17", "x")
    assert not values.matches(None, "x")
    assert values.matches(None, "")


def test_parse_query_defaults_and_modes():
    q = browse.parse_query({}, 3)
    assert (q.mode, q.partition, q.limit, q.filtered) == ("newest", None, 50, False)
    q = browse.parse_query({"mode": "offset", "partition": "2", "offset": "7", "limit": "5"}, 3)
    assert (q.partition, q.offset, q.limit) == (2, 7, 5)
    q = browse.parse_query({"mode": "timestamp", "timestamp": "1970-01-01T00:00:01"}, 1)
    assert q.timestamp_ms == 1000
    assert browse.parse_query({"mode": "timestamp", "timestamp": "1234"}, 1).timestamp_ms == 1234


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"partition": "3"}, "partition 3 does not exist: the topic has partitions 0 to 2"),
        ({"partition": "x"}, "the partition must be a whole number"),
        ({"limit": str(MAX_PAGE_SIZE + 1)}, f"between 1 and {MAX_PAGE_SIZE}"),
        ({"limit": "0"}, f"between 1 and {MAX_PAGE_SIZE}"),
        ({"mode": "offset", "offset": "1"}, "needs one partition"),
        ({"mode": "offset", "partition": "0"}, "needs an offset"),
        ({"mode": "timestamp"}, "needs a time"),
        ({"mode": "timestamp", "timestamp": "yesterday"}, "is not a time"),
        ({"mode": "<script>"}, "mode must be one of"),
        ({"mode": "offset", "partition": "0", "offset": str(1 << 63)}, "out of range"),
        ({"mode": "timestamp", "timestamp": "-1"}, "out of range"),
    ],
)
def test_parse_query_refuses_bad_input(params, message):
    with pytest.raises(BadInput, match=message):
        browse.parse_query(params, 3)


def test_rates_from_samples_and_lag_per_group():
    h = history.History(10)
    h.add(history.reduce(1000, {("a", 0): 10, ("a", 1): 0}, {"g": {("a", 0): 5}}))
    assert h.topic_rates() == {} and h.throughput() == []
    h.add(history.reduce(3000, {("a", 0): 30, ("a", 1): 20}, {"g": {("a", 0): 25}}))
    assert h.topic_rates() == {"a": 20.0}  # 40 records in 2 s
    assert h.throughput() == [(3000, 20.0, 10.0)]  # the group committed 20 more in 2 s
    assert h.lag("g") == [(1000, 5.0), (3000, 5.0)]
    assert h.topic_throughput("a") == [(3000, 20.0)] and h.topic_throughput("b") == []
    assert h.partition_lag("g", 5) == {("a", 0): [(1000, 5.0), (3000, 5.0)]}
    assert h.partition_lag("nobody", 5) == {}
    h.add(history.reduce(4000, {("a", 0): 0, ("a", 1): 0}, {"g": {("a", 0): 0}}))
    assert h.throughput()[-1] == (4000, 0.0, 0.0)  # a topic made anew is no negative rate
    h.add(history.reduce(4000, {}, {}))  # the same time again: no rate from it
    assert len(h.samples) == 3


def test_history_is_bounded():
    h = history.History(3)
    for t in range(10):
        h.add(history.reduce(t * 1000, {("a", 0): t}, {}))
    assert [s.now_ms for s in h.samples] == [7000, 8000, 9000]


def test_charts_escape_labels_and_scale_to_a_round_maximum():
    assert [charts.nice_max(v) for v in (0, 1, 3, 7, 11, 240, 2600)] == [1, 1, 5, 10, 20, 250, 5000]
    svg = str(charts.line_chart([("<b>", [(0, 0.0), (1000, 7.0)])], "msg/s", "a & b"))
    assert "&lt;b&gt;" in svg and "a &amp; b" in svg and "<b>" not in svg
    assert 'points="56.0,172.0 628.0,60.0"' in svg  # 7 of 10 up the 160-pixel plot
    assert "collecting samples" in str(charts.line_chart([("x", [(5, 1.0)])], "", "t"))
    two = str(charts.line_chart([("a", [(0, 1.0), (1000, 1.0)]), ("b", [(500, 2.0)])], "", "t"))
    assert 'class="series-1" fill="none" points="342.0,12.0"' in two  # b's one point, midway


def test_parse_listen():
    assert parse_listen("http://127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_listen("localhost:0/") == ("localhost", 0)
    assert parse_listen("http://[::1]:80") == ("::1", 80)
    for bad in ("https://a:1", "a", "a:99999", ":80"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_sessions_end_when_idle_and_the_oldest_go_first():
    from gregor.console import login

    now = [0.0]
    sessions = login.Sessions(now_s=lambda: now[0])
    first, dropped = sessions.add("alice", "clients of alice")  # type: ignore[arg-type]
    assert dropped == [] and sessions.get(first).user == "alice"
    assert sessions.get("forged") is None and sessions.get(None) is None
    now[0] += login.IDLE_S - 1
    assert sessions.get(first) is not None  # a page keeps it alive
    now[0] += login.IDLE_S + 1
    assert sessions.get(first) is None
    ids = [sessions.add(f"u{i}", f"c{i}")[0] for i in range(login.MAX_SESSIONS)]  # type: ignore[arg-type]
    sessions.get(ids[0])  # used: no longer the least recently used
    _, dropped = sessions.add("late", "c-late")  # type: ignore[arg-type]
    assert dropped == ["c1"] and sessions.get(ids[1]) is None and sessions.get(ids[0]) is not None
    assert sessions.remove(ids[0]) == "c0" and sessions.get(ids[0]) is None
