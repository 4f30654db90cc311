"""The console in a real browser (headless Chromium through Playwright) against a running
broker and `gregor console --allow-writes`: every page opens without a script error, a click
leads from a topic to its messages, the produce form produces, a group's offsets are reset,
a record holding HTML is shown as text and never run, and the live parts refresh themselves.
Screenshots are saved under a temp dir (the path is printed)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from gregor import Broker
from tests.console.browser import Screens, chromium, console_process, needs_chromium, new_page
from tests.console.conftest import commit_group, make_topic, produce

pytestmark = [pytest.mark.client, needs_chromium]

TOPIC, GROUP = "orders", "billing"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A broker with a topic of records and an empty group, a console of it, one browser."""
    with Broker() as broker:
        make_topic(broker.bootstrap, TOPIC, 2)
        records = [
            (f"order-{i}".encode(), f'{{"order": {i}, "total": {i * 10}}}'.encode(), i % 2)
            for i in range(6)
        ]
        produce(broker.bootstrap, TOPIC, records, [("source", b"shop")])
        commit_group(broker.bootstrap, TOPIC, GROUP, 6)
        shots = Screens(str(tmp_path_factory.mktemp("console-screenshots")))
        print(f"screenshots in {shots.directory}")
        with console_process(broker.bootstrap, "--allow-writes", "--sample-interval", "0.5") as url:
            with chromium() as browser:
                yield {"broker": broker, "url": url, "browser": browser, "shots": shots}


@pytest.fixture
def page(site: dict[str, Any]) -> Iterator[Any]:
    errors: list[str] = []
    p = new_page(site["browser"], errors)
    yield p
    p.close()
    assert errors == [], "the page had script errors or blocked loads"


def test_every_page_opens(site, page):
    url, shots = site["url"], site["shots"]
    pages = {
        "/": "Cluster overview",
        "/topics": "Topics",
        f"/topics/{TOPIC}": f"Topic {TOPIC}",
        f"/topics/{TOPIC}/messages": f"Messages of {TOPIC}",
        "/groups": "Consumer groups",
        f"/groups/{GROUP}": f"Consumer group {GROUP}",
    }
    for path, heading in pages.items():
        answer = page.goto(url + path)
        assert answer.status == 200, path
        assert page.locator("h1").inner_text() == heading
        shots.take(page, "page" + path.replace("/", "_"))
    page.goto(url + "/")
    assert page.locator("#broker-count").inner_text() == "1"
    assert page.locator("#health").inner_text() == "healthy"
    assert page.locator("#quorum-leader").inner_text() == "1"


def test_click_from_a_topic_to_a_message(site, page):
    page.goto(site["url"] + "/topics")
    page.get_by_role("link", name=TOPIC, exact=True).click()
    page.wait_for_url(f"**/topics/{TOPIC}")
    assert page.locator("#partitions tbody tr").count() == 2
    page.locator("#browse").click()
    page.wait_for_url(f"**/topics/{TOPIC}/messages")
    rows = page.locator("tr.record")
    assert rows.count() == 6
    page.locator("select[name=partition]").first.select_option("1")
    page.locator("select[name=mode]").select_option("offset")
    page.locator("input[name=offset]").fill("1")
    page.locator("#query button").click()
    page.wait_for_url("**mode=offset**")
    first = page.locator("tr.record").first
    assert (
        first.get_attribute("data-partition") == "1" and first.get_attribute("data-offset") == "1"
    )
    assert '"order": 3' in first.locator("td.val").inner_text()  # pretty-printed JSON
    assert "source" in first.locator("td.headers").inner_text()
    site["shots"].take(page, "message")


def test_produce_from_the_form_and_see_it(site, page):
    page.goto(site["url"] + f"/topics/{TOPIC}/messages")
    form = page.locator("#produce")
    form.locator("select[name=partition]").select_option("0")
    form.locator("input[name=key]").fill("typed-key")
    form.locator("textarea[name=value]").fill('{"typed": true}')
    form.locator("textarea[name=headers]").fill("via: browser")
    form.get_by_role("button", name="Produce").click()
    page.wait_for_selector("#produced")
    assert re.fullmatch(
        r"Produced to partition 0 at offset \d+\.", page.locator("#produced").inner_text()
    )
    row = page.locator("tr.record").first
    assert row.locator("td.key").inner_text() == "typed-key"
    assert '"typed": true' in row.locator("td.val").inner_text()
    assert "via" in row.locator("td.headers").inner_text()
    site["shots"].take(page, "produced")


def test_reset_a_groups_offsets(site, page):
    page.goto(site["url"] + f"/groups/{GROUP}")
    assert page.locator("#group-state").inner_text() == "EMPTY"
    assert page.locator("td.committed").all_inner_texts() == ["3", "3"]
    form = page.locator("#reset")
    form.locator("select[name=target]").select_option("offset")
    form.locator("input[name=offset]").fill("1")
    form.get_by_role("button", name="Reset").click()
    page.wait_for_selector("#reset-done")
    assert page.locator("td.committed").all_inner_texts() == ["1", "1"]
    form = page.locator("#reset")
    form.locator("select[name=target]").select_option("earliest")
    form.get_by_role("button", name="Reset").click()
    page.wait_for_selector("#reset-done")
    assert page.locator("td.committed").all_inner_texts() == ["0", "0"]
    site["shots"].take(page, "group-reset")


def test_html_in_a_record_is_shown_as_text_and_never_run(site, page):
    broker: Broker = site["broker"]
    make_topic(broker.bootstrap, "html-values")
    attack = '<script>window.pwned = 1</script><img src="x" onerror="window.pwned = 2"><b>bold</b>'
    produce(broker.bootstrap, "html-values", [(b"<i>k</i>", attack.encode(), 0)])
    page.goto(site["url"] + "/topics/html-values/messages")
    value = page.locator("tr.record td.val pre")
    assert value.inner_text() == attack  # the markup, as text
    assert (
        page.locator("tr.record td.val b").count() == 0
        and page.locator("tr.record img").count() == 0
    )
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert page.locator("tr.record td.key").inner_text() == "<i>k</i>"
    site["shots"].take(page, "html-escaped")


def test_live_parts_refresh_without_a_reload(site, page):
    broker: Broker = site["broker"]
    page.goto(site["url"] + "/")
    page.evaluate("document.getElementById('live-overview').dataset.marker = 'old'")
    for _ in range(80):  # the page refreshes every 5 s; rates need two samples
        produce(broker.bootstrap, TOPIC, [(None, b"more", 0)] * 10)
        page.wait_for_timeout(500)
        replaced = page.evaluate(
            "document.getElementById('live-overview').dataset.marker !== 'old'"
        )
        if replaced and "msg/s" in page.locator("#produce-rate").inner_text():
            break
    assert page.evaluate("document.getElementById('live-overview').dataset.marker") is None
    assert re.fullmatch(r"[\d.]+ msg/s", page.locator("#produce-rate").inner_text())
    assert page.locator("svg.chart polyline").count() == 2  # produced and consumed
    site["shots"].take(page, "overview-live")
