"""The admin commands against a three-node cluster: `cluster info` lists every broker, a broker's
configs are changed on that broker, `log-dirs describe` asks each broker, and a preferred leader
election moves leadership back once the preferred replica has caught up."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from cli_helpers import gregor
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.kraft_cluster.helpers import FAST_REPLICATION, make_cluster

pytestmark = pytest.mark.cluster
QUIET = logging.getLogger("tests.cli.rdkafka.cluster")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 40) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_admin_commands_on_three_nodes(tmp_path):
    config = {**FAST_REPLICATION, "auto.leader.rebalance.enable": "false"}
    with make_cluster(tmp_path, config) as c:
        b = ["-b", c.bootstrap]

        def json_of(*args):
            return gregor(*args, *b, "-o", "json").json()

        info = wait_for(
            "three brokers", lambda: (d := json_of("cluster", "info"))["brokers"][2:] and d
        )
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "logger": QUIET})
        held = admin.describe_cluster().result()
        assert info["cluster_id"] == held.cluster_id == c.cluster_id
        # the active controller, not DescribeCluster's "any live broker"
        assert info["controller_id"] == json_of("quorum", "describe")["leader_id"]
        assert info["controller_id"] == c.active_controller()
        assert info["brokers"] == [
            {"id": i, "host": "127.0.0.1", "port": c.broker_ports[i], "rack": None}
            for i in (1, 2, 3)
        ]

        done = gregor(
            "configs",
            "alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            "2",
            "--add-config",
            "log.cleaner.backoff.ms=12345",
            *b,
        )
        assert (done.returncode, done.stdout) == (0, "altered configs of broker 2\n"), done.stderr

        def backoff(node):
            res = ConfigResource("broker", str(node))
            return admin.describe_configs([res])[res].result()["log.cleaner.backoff.ms"].value

        # committed on the controller, then seen by broker 2 once it has replicated it
        wait_for("broker 2 to take its config", lambda: backoff(2) == "12345", 15)
        assert backoff(3) == "15000"
        described = json_of("configs", "describe", "--entity-type", "brokers")
        own = [
            (d["entity_name"], [(e["name"], e["value"]) for e in d["configs"]]) for d in described
        ]
        assert own == [("1", []), ("2", [("log.cleaner.backoff.ms", "12345")]), ("3", [])]

        done = gregor(
            "topics", "create", "el", "--partitions", "1", "--replication-factor", "3", *b
        )
        assert done.returncode == 0, done.stderr

        def partition():
            # the broker asked may learn of the new topic a moment after the one that made it
            run = gregor("topics", "describe", "el", *b, "-o", "json")
            if run.returncode != 0:
                assert "does not exist" in run.stderr, run.stderr
                return {"leader": -1, "isr": []}
            [t] = run.json()
            return t["partitions"][0]

        p = wait_for(
            "a full ISR", lambda: (p := partition())["leader"] >= 0 and len(p["isr"]) == 3 and p
        )
        preferred = p["replicas"][0]
        assert p["leader"] == preferred

        dirs = json_of("log-dirs", "describe")
        assert sorted(d["broker"] for d in dirs) == [1, 2, 3]
        for d in dirs:
            assert d["log_dir"].startswith(c.data_dir(d["broker"]))
            assert [
                (q["topic"], q["partition"]) for q in d["partitions"] if q["topic"] == "el"
            ] == [("el", 0)]

        c.stop_node(preferred)
        wait_for("a new leader", lambda: partition()["leader"] not in (-1, preferred))
        c.start_node(preferred)
        wait_for("the preferred replica back in the ISR", lambda: len(partition()["isr"]) == 3)
        assert partition()["leader"] != preferred
        elected = json_of(
            "leader-election", "--election-type", "preferred", "--topic", "el", "--partition", "0"
        )
        assert elected == [{"topic": "el", "partition": 0, "result": "elected", "error": None}]
        wait_for("the preferred leader", lambda: partition()["leader"] == preferred, 15)
        again = json_of("leader-election", "--election-type", "preferred", "--all-topic-partitions")
        assert all(d["result"] != "error" for d in again)
        assert not [d for d in again if d["topic"] == "el" and d["result"] == "elected"]
