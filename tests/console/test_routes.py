"""The console's pages and writes against a real broker, through Starlette's TestClient: what
each page shows, and that bad input is a clear message with a 4xx, never a server error or
markup of the record's."""

from __future__ import annotations

import html
import re
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.console.conftest import commit_group, error_of, make_topic, produce, token_of

pytestmark = pytest.mark.client


def test_every_page_shows_the_cluster(kafka, console, name):
    make_topic(kafka.bootstrap, name, 3)
    produce(kafka.bootstrap, name, [(b"k1", b'{"n": 1}', 0), (b"k2", b"two", 1)], [("h1", b"v1")])
    commit_group(kafka.bootstrap, name, f"{name}-g", 2)
    overview = console.get("/")
    assert overview.status_code == 200
    assert 'id="broker-count">1<' in overview.text and 'id="health">healthy<' in overview.text
    assert 'id="quorum-leader">1<' in overview.text  # DescribeQuorum, with our own codec
    topics = console.get("/topics").text
    row = re.search(rf'<a href="/topics/{name}">{name}</a></td>\s*<td>3</td>\s*<td>1</td>', topics)
    assert row, "the topic with 3 partitions, RF 1"
    assert "__consumer_offsets" not in topics
    assert "__consumer_offsets" in console.get("/topics?internal=1").text
    topic = console.get(f"/topics/{name}").text
    assert re.search(
        r"<td><a [^>]*>1</a></td>\s*<td>1</td>\s*<td>1</td>\s*<td>1</td>\s*<td>0</td>\s*<td>1</td>",
        topic,
    )
    assert "retention.ms" in topic and "cleanup.policy" in topic
    page = console.get(f"/topics/{name}/messages").text
    assert page.count('class="record"') == 2
    assert '<pre class="value json">{\n  "n": 1\n}</pre>' in html.unescape(page)  # pretty
    assert "<strong>h1</strong>" in page and ">v1</pre>" in page
    groups = console.get("/groups").text
    assert f"{name}-g</a></td><td>EMPTY</td>" in groups
    group = console.get(f"/groups/{name}-g").text
    assert 'id="group-state">EMPTY<' in group and 'id="total-lag">0<' in group
    assert f'data-tp="{name}-0"' in group and f'data-tp="{name}-1"' in group


def test_the_browser_by_offset_timestamp_filter_and_newest_first(kafka, console, name):
    make_topic(kafka.bootstrap, name, 2)
    records = [(f"k{i}".encode(), f"value-{i}".encode(), i % 2) for i in range(10)]
    produce(kafka.bootstrap, name, records, first_timestamp_ms=int(time.time() * 1000))
    page = console.get(
        f"/topics/{name}/messages",
        params={"mode": "offset", "partition": 0, "offset": 2, "limit": 2},
    ).text
    assert re.findall(r'data-partition="0" data-offset="(\d+)"', page) == ["2", "3"]
    assert "value-4" in page and "value-6" in page and 'id="next-page"' in page
    newest = console.get(f"/topics/{name}/messages", params={"limit": 3}).text
    assert re.findall(r">value-(\d)</pre>", newest) == ["9", "8", "7"]
    filtered = console.get(f"/topics/{name}/messages", params={"value": "ue-5"}).text
    assert re.findall(r">value-(\d)</pre>", filtered) == ["5"]
    by_key = console.get(f"/topics/{name}/messages", params={"key": "k7", "partition": 1}).text
    assert re.findall(r">value-(\d)</pre>", by_key) == ["7"]
    future = int(time.time() * 1000) + 3_600_000
    late = console.get(
        f"/topics/{name}/messages", params={"mode": "timestamp", "timestamp": future}
    )
    assert late.status_code == 200 and 'id="no-records"' in late.text
    early = console.get(
        f"/topics/{name}/messages", params={"mode": "timestamp", "timestamp": 0, "partition": 1}
    )
    assert re.findall(r">value-(\d)</pre>", early.text) == ["1", "3", "5", "7", "9"]


def test_bad_input_is_a_clear_4xx(kafka, console, name):
    make_topic(kafka.bootstrap, name, 2)
    produce(kafka.bootstrap, name, [(None, b"x", 0)])
    cases = [
        (
            f"/topics/{name}/messages?partition=5",
            400,
            "partition 5 does not exist: the topic has partitions 0 to 1",
        ),
        (
            f"/topics/{name}/messages?partition=0&mode=offset&offset=99",
            400,
            "offset 99 is past the end of partition 0 (its next offset is 1)",
        ),
        (
            f"/topics/{name}/messages?limit=1000000",
            400,
            "the page size must be between 1 and 500, not 1000000",
        ),
        (f"/topics/{name}/messages?limit=abc", 400, "the page size must be a whole number"),
        (
            f"/topics/{name}/messages?partition=0&mode=offset&offset=99999999999999999999",
            400,
            "is out of range",
        ),
        (
            f"/topics/{name}/messages?mode=timestamp&timestamp=1969-12-31T00:00:00",
            400,
            "out of range (1970 onwards)",
        ),
        (
            f"/topics/{name}/messages?mode=timestamp&timestamp=99999999999999999999",
            400,
            "out of range",
        ),
        ("/topics/no-such-topic", 404, "there is no topic"),
        ("/topics/no-such-topic/messages", 404, "there is no topic"),
        ("/topics/bad%20name", 404, "is not a topic name"),
        ("/groups/no-such-group", 404, "there is no group"),
        ("/nowhere", 404, "there is no such page"),
    ]
    for url, status, message in cases:
        answer = console.get(url)
        assert answer.status_code == status, url
        assert message in html.unescape(error_of(answer.text)), url
    names = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10).topics
    assert "no-such-topic" not in names  # looking was no auto-creation


def test_html_in_a_record_is_shown_escaped(kafka, console, name):
    make_topic(kafka.bootstrap, name)
    attack = b'<script>alert("x")</script><img src=x onerror=alert(1)>'
    produce(kafka.bootstrap, name, [(b"<b>key</b>", attack, 0)], [("<i>h</i>", b"<u>v</u>")])
    answer = console.get(f"/topics/{name}/messages")
    assert answer.status_code == 200
    assert "<script>alert" not in answer.text and "<img src=x" not in answer.text
    assert (
        "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"
        in answer.text
    )
    assert "&lt;b&gt;key&lt;/b&gt;" in answer.text and "&lt;i&gt;h&lt;/i&gt;" in answer.text
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy


def test_a_read_only_console_refuses_writes_and_shows_no_forms(kafka, read_only_console, name):
    make_topic(kafka.bootstrap, name)
    page = read_only_console.get(f"/topics/{name}/messages").text
    assert 'id="produce"' not in page and "read-only" in page
    answer = read_only_console.post(f"/topics/{name}/messages", data={"value": "x", "token": "t"})
    assert answer.status_code == 403
    assert "read-only" in error_of(answer.text)
    assert (
        read_only_console.post(f"/topics/{name}/configs", data={"name": "retention.ms"}).status_code
        == 403
    )
    assert read_only_console.post(f"/groups/{name}", data={"target": "earliest"}).status_code == 403


def test_produce_from_the_form(kafka, console, name):
    make_topic(kafka.bootstrap, name, 2)
    token = token_of(console.get(f"/topics/{name}/messages").text)
    form = {
        "token": token,
        "partition": "1",
        "key": "k",
        "value": '{"a": 1}',
        "headers": "trace: 7\nsource: console",
    }
    answer = console.post(f"/topics/{name}/messages", data=form)
    assert answer.status_code == 303
    assert (
        answer.headers["location"]
        == f"/topics/{name}/messages?mode=offset&partition=1&offset=0&produced=1"
    )
    page = console.get(answer.headers["location"]).text
    assert "Produced to partition 1 at offset 0" in page
    assert "<strong>trace</strong>: <pre" in page and "<strong>source</strong>" in page
    consumer = Consumer(
        {"bootstrap.servers": kafka.bootstrap, "group.id": name, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([name])
    got = None
    for _ in range(40):
        got = consumer.poll(0.5)
        if got is not None and got.error() is None:
            break
    consumer.close()
    assert got is not None and (got.partition(), got.key(), got.value()) == (1, b"k", b'{"a": 1}')
    assert got.headers() == [("trace", b"7"), ("source", b"console")]
    bad = [
        ({**form, "token": "stale"}, 403, "token"),
        ({**form, "partition": "9"}, 400, "partition '9' does not exist"),
        ({**form, "headers": "no separator"}, 400, "a header line is"),
    ]
    for data, status, message in bad:
        answer = console.post(f"/topics/{name}/messages", data=data)
        assert answer.status_code == status and message in html.unescape(error_of(answer.text))
    assert (
        console.post(
            f"/topics/{name}/messages", data={**form, "value": "x" * 2_000_000}
        ).status_code
        == 413
    )


def test_edit_a_topic_config(kafka, console, name):
    make_topic(kafka.bootstrap, name)
    token = token_of(console.get(f"/topics/{name}").text)
    answer = console.post(
        f"/topics/{name}/configs",
        data={"token": token, "name": "retention.ms", "value": "12345", "action": "set"},
    )
    assert (
        answer.status_code == 303
        and answer.headers["location"] == f"/topics/{name}?saved=retention.ms"
    )
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    assert admin.describe_configs([resource])[resource].result(10)["retention.ms"].value == "12345"
    shown = console.get(f"/topics/{name}").text
    assert re.search(
        r'data-config="retention.ms">.*?value="12345".*?<span class="source">dynamic topic</span>',
        shown,
        re.S,
    )
    assert re.search(
        r'data-config="segment.ms">.*?<span class="source">default</span>', shown, re.S
    )
    bad = console.post(
        f"/topics/{name}/configs",
        data={"token": token, "name": "retention.ms", "value": "soon", "action": "set"},
    )
    assert bad.status_code == 400 and "retention.ms" in error_of(bad.text)
    console.post(
        f"/topics/{name}/configs", data={"token": token, "name": "retention.ms", "action": "delete"}
    )
    assert (
        admin.describe_configs([resource])[resource].result(10)["retention.ms"].value == "604800000"
    )


def test_reset_an_empty_groups_offsets_but_not_a_live_one(kafka, console, name):
    make_topic(kafka.bootstrap, name)
    produce(kafka.bootstrap, name, [(None, b"r%d" % i, 0) for i in range(5)])
    group = f"{name}-g"
    commit_group(kafka.bootstrap, name, group, 5)
    token = token_of(console.get(f"/groups/{group}").text)
    for target, offset, expected in (
        ("earliest", "", "0"),
        ("offset", "3", "3"),
        ("latest", "", "5"),
    ):
        answer = console.post(
            f"/groups/{group}", data={"token": token, "target": target, "offset": offset}
        )
        assert answer.status_code == 303
        page = console.get(answer.headers["location"]).text
        assert f"Offsets reset to {target}" in page
        assert re.search(
            rf'data-tp="{name}-0">.*?<td class="committed">{expected}</td>', page, re.S
        )
    past = console.post(
        f"/groups/{group}", data={"token": token, "target": "offset", "offset": "99"}
    )
    assert past.status_code == 400 and "offset 99 is outside" in error_of(past.text)
    member = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    member.subscribe([name])
    try:
        for _ in range(60):
            member.poll(0.5)
            if member.assignment():
                break
        assert member.assignment()
        live = console.post(f"/groups/{group}", data={"token": token, "target": "earliest"})
        assert live.status_code == 409 and "stop its consumers" in error_of(live.text)
    finally:
        member.close()


def test_rates_and_lag_are_sampled(kafka, console, name):
    make_topic(kafka.bootstrap, name)
    produce(kafka.bootstrap, name, [(None, b"x", 0)] * 3)
    commit_group(kafka.bootstrap, name, f"{name}-g", 3)
    produced = False
    for _ in range(100):  # until two samples saw the topic grow
        produce(kafka.bootstrap, name, [(None, b"y", 0)] * 20)
        time.sleep(0.25)
        topics = console.get("/topics").text
        found = re.search(rf"{name}</a></td>(?:\s*<td>[^<]*</td>){{4}}\s*<td>([\d.]+)</td>", topics)
        if found and float(found[1]) > 0:
            produced = True
            break
    assert produced, "a messages/s figure for the topic"
    overview = console.get("/").text
    assert re.search(r'id="produce-rate">[\d.]+ msg/s<', overview)
    assert "<polyline" in overview
    group = console.get(f"/groups/{name}-g").text
    assert re.search(r'id="total-lag">([1-9]\d*)<', group)  # the records produced since
    assert group.count("<polyline") == 2  # the lag chart: the total and the one partition
    assert f'<text class="legend" x="{78 + 180}" y="23">{name}-0</text>' in group
    assert "<polyline" in console.get(f"/topics/{name}").text  # the topic's messages in
