"""The console of a 3-node cluster in Chromium: the overview names the three brokers, the
active controller and the quorum's voters with their lag, and the cluster is healthy; a topic
of replication factor 3 shows its replicas and ISR. Then a node is killed: the overview says
the cluster is unhealthy and names the broker down. Screenshots under a temp dir."""

from __future__ import annotations

import re

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.testing.cluster import LocalCluster
from tests.console.browser import Screens, chromium, console_process, needs_chromium, new_page

pytestmark = [pytest.mark.cluster, needs_chromium]


def test_the_overview_of_a_three_node_cluster(tmp_path, tmp_path_factory):
    shots = Screens(str(tmp_path_factory.mktemp("console-cluster-screenshots")))
    print(f"screenshots in {shots.directory}")
    with LocalCluster(3, base_dir=str(tmp_path / "cluster")) as cluster:
        cluster.start()
        cluster.wait_for_brokers()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("replicated", 2, 3)])["replicated"].result(30)
        controller = cluster.active_controller()
        with (
            console_process(cluster.bootstrap, "--sample-interval", "0.5") as url,
            chromium() as browser,
        ):
            errors: list[str] = []
            page = new_page(browser, errors)
            for _ in range(60):  # until every partition has its full ISR
                page.goto(url + "/")
                if page.locator("#health").inner_text() == "healthy":
                    break
                page.wait_for_timeout(500)
            assert page.locator("#health").inner_text() == "healthy"
            assert page.locator("#broker-count").inner_text() == "3"
            assert page.locator("#brokers tbody tr td:first-child").all_inner_texts() == [
                "1",
                "2",
                "3",
            ]
            assert page.locator("#controller").inner_text() == str(controller)
            assert page.locator("#quorum-leader").inner_text() == str(controller)
            roles = page.locator("#quorum tbody tr td:nth-child(2)").all_inner_texts()
            assert sorted(roles) == ["Follower", "Follower", "Leader"]
            shots.take(page, "cluster-overview")
            page.goto(url + "/topics/replicated")
            for row in page.locator("#partitions tbody tr").all():
                cells = row.locator("td").all_inner_texts()
                assert sorted(cells[2].split(", ")) == ["1", "2", "3"]  # replicas
            shots.take(page, "cluster-topic")
            victim = next(i for i in (1, 2, 3) if i != controller)
            cluster.kill(victim)
            for _ in range(120):  # until the controller fences it and the ISRs shrink
                page.goto(url + "/")
                if page.locator("#health").inner_text() == "unhealthy":
                    break
                page.wait_for_timeout(500)
            assert page.locator("#health").inner_text() == "unhealthy"
            details = page.locator("#health-details").inner_text()
            assert (
                re.search(r"Under-replicated partitions: [1-9]", details)
                or f"Brokers down: {victim}" in details
            )
            shots.take(page, "cluster-unhealthy")
            page.close()
            assert errors == []
