"""`gregor cluster health` on a three-node cluster with a topic of replication factor 3:
healthy (exit 0); one node SIGKILLed: unhealthy (exit 1), that node down (fenced, DescribeCluster
v2) and every partition under-replicated; the node restarted: `--watch --exit-when-healthy`
returns 0 once the cluster has healed."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
from cli_helpers import Run, gregor

from tests.kraft_cluster.helpers import FAST_REPLICATION, make_cluster

TOPIC = "health-rf3"


def health(bootstrap: str, *args: str) -> tuple[Run, Any]:
    run = gregor("cluster", "health", "-b", bootstrap, "-o", "json", *args)
    assert run.returncode in (0, 1), run.stderr
    assert run.stderr == "", run.stderr
    return run, json.loads(run.stdout)


def until(what: str, check: Any, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def topic_partitions(parts: list[dict[str, Any]]) -> list[int]:
    return sorted(p["partition"] for p in parts if p["topic"] == TOPIC)


@pytest.mark.cluster
def test_health_through_a_sigkill_and_a_restart(tmp_path):
    with make_cluster(tmp_path, FAST_REPLICATION) as c:
        b = c.bootstrap
        c.wait_for_brokers()
        made = gregor(
            "topics", "create", TOPIC, "--partitions", "3", "--replication-factor", "3", "-b", b
        )
        assert made.returncode == 0, made.stderr

        def healthy() -> Any:
            run, doc = health(b)
            return doc if run.returncode == 0 else None

        doc = until("a healthy cluster", healthy)
        assert doc["is_healthy"] is True and doc["unhealthy_reasons"] == []
        assert doc["all_nodes"] == [1, 2, 3] and doc["nodes_down"] == []
        assert doc["not_checked"] == []
        assert [n["fenced"] for n in doc["nodes"]] == [False, False, False]
        assert [n["roles"] for n in doc["nodes"]] == [["broker", "voter"]] * 3
        leader = c.active_controller()
        assert doc["controller_id"] == leader == doc["quorum"]["leader_id"]
        assert sorted(r["node"] for r in doc["quorum"]["replicas"]) == [1, 2, 3]
        assert doc["under_replicated_count"] == doc["leaderless_count"] == 0

        victim = next(i for i in c.ids if i != leader)
        c.kill(victim)

        def victim_down() -> Any:
            run, doc = health(b)
            fenced = [n for n in doc["nodes"] if n["id"] == victim and n["fenced"]]
            under = topic_partitions(doc["under_replicated_partitions"])
            return (run, doc) if fenced and under == [0, 1, 2] else None

        run, doc = until(f"node {victim} fenced and {TOPIC} under-replicated", victim_down)
        assert run.returncode == 1
        assert doc["is_healthy"] is False
        assert doc["nodes_down"] == [victim]
        assert doc["all_nodes"] == [1, 2, 3]
        [down] = [n for n in doc["nodes"] if n["down"]]
        assert "fenced" in down["why"]
        assert any(r.startswith(f"node {victim} is down") for r in doc["unhealthy_reasons"])
        assert any("under-replicated" in r for r in doc["unhealthy_reasons"])
        for p in doc["under_replicated_partitions"]:
            assert victim in p["replicas"] and victim not in p["isr"] and p["leader"] != victim
        assert doc["leaderless_count"] == 0  # the survivors lead every partition

        plain = gregor("cluster", "health", "-b", b, "-o", "plain")
        assert plain.returncode == 1, plain.stderr
        assert "healthy\tno\n" in plain.stdout
        assert f"nodes down\t{victim}\n" in plain.stdout

        c.start_node(victim)
        watched = gregor(
            "cluster", "health", "-b", b, "-o", "json", "--watch", "--exit-when-healthy",
            "--interval", "0.5",
        )  # fmt: skip
        assert watched.returncode == 0, watched.stderr
        rounds = [json.loads(line) for line in watched.stdout.splitlines()]
        assert [r["is_healthy"] for r in rounds][-1] is True
        assert all(r["is_healthy"] is False for r in rounds[:-1])
        assert rounds[-1]["nodes_down"] == [] and rounds[-1]["under_replicated_count"] == 0


@pytest.mark.client
def test_a_watch_goes_on_through_unreachable_rounds_one_line_each():
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gregor.cli.main", "cluster", "health", "-b", f"127.0.0.1:{port}",
         "--watch", "--exit-when-healthy", "--interval", "0.2", "--timeout", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        lines = [proc.stderr.readline() for _ in range(3)]
    finally:
        proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=30)
    assert lines == [f"gregor: cannot reach 127.0.0.1:{port} (connection refused)\n"] * 3
    assert proc.returncode == 130 and out == "" and "Traceback" not in rest
