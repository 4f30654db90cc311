"""`gregor mirror status` and `gregor mirror --metrics` between two single-node gregor brokers
(shared by the module: each test has its own cluster aliases, so its own groups, internal and
remote topics), with `python -m gregor mirror` as a child process and, for the metrics, a real
Prometheus scraping it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor import Broker
from gregor.cli.main import main
from tests.metrics.helpers import prometheus

WAIT_S = 60.0

CONFIG = """\
clusters = {s}, {t}
{s}.bootstrap.servers = {a}
{t}.bootstrap.servers = {b}
{s}->{t}.enabled = true
{s}->{t}.topics = {topics}
replication.factor = 1
offset-syncs.topic.replication.factor = 1
checkpoints.topic.replication.factor = 1
heartbeats.topic.replication.factor = 1
refresh.topics.interval.seconds = 1
emit.heartbeats.interval.seconds = 1
emit.checkpoints.interval.seconds = 1
offset.flush.interval.ms = 200
{s}.consumer.session.timeout.ms = 6000
{s}.consumer.heartbeat.interval.ms = 500
"""


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[Broker, Broker]]:
    with Broker() as a, Broker() as b:
        yield a, b


class Mirror:
    """`python -m gregor mirror -c FILE [ARGS]` as a child process."""

    def __init__(self, config: Path, log: Path, *args: str):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        self.log = log
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gregor", "mirror", "-c", str(config), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def start_mirror(tmp_path: Path) -> Iterator[Callable[..., Mirror]]:
    started: list[Mirror] = []

    def start(config: Path, *args: str) -> Mirror:
        m = Mirror(config, tmp_path / f"mirror-{len(started)}.log", *args)
        started.append(m)
        return m

    yield start
    for m in started:
        m.kill()


def create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(timeout=30)


def produce(bootstrap: str, topic: str, partitions: list[int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, partition in enumerate(partitions):
        p.produce(topic, b"v%d" % i, partition=partition)
    assert p.flush(30) == 0


def ends(bootstrap: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        if topic not in c.list_topics(timeout=10).topics:
            return [0] * partitions
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        return [c.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in tps]
    finally:
        c.close()


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def write_config(tmp_path: Path, **values: str) -> Path:
    path = tmp_path / "mm2.properties"
    path.write_text(CONFIG.format(**values))
    return path


def status(config: Path, capsys: pytest.CaptureFixture[str], *more: str) -> dict[str, Any]:
    args = ["mirror", "status", "-c", str(config), "-o", "json", "--timeout", "10", *more]
    assert main(args) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc["flows"][0]


def rows(flow: dict[str, Any], topic: str) -> dict[int, dict[str, Any]]:
    return {p["partition"]: p for p in flow["partitions"] if p["topic"] == topic}


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        c.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        c.close()


@pytest.mark.cluster
def test_status_shows_lag_zero_then_the_records_produced_while_stopped(
    clusters: tuple[Broker, Broker],
    tmp_path: Path,
    start_mirror: Callable[..., Mirror],
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = clusters
    create(a.bootstrap, "lagging", 2)
    produce(a.bootstrap, "lagging", [0] * 12 + [1] * 8)
    commit(a.bootstrap, "app", "lagging", {0: 5})
    config = write_config(tmp_path, s="A", t="B", a=a.bootstrap, b=b.bootstrap, topics="lagging")
    mirror = start_mirror(config)

    def caught_up() -> dict[str, Any] | None:
        flow = status(config, capsys)
        lagging = rows(flow, "lagging")
        done = len(lagging) == 2 and all(r["lag"] == 0 for r in lagging.values())
        has_checkpoint = any(g["group"] == "app" for g in flow["groups"])
        return flow if done and has_checkpoint else None

    flow = wait_for("the mirror to catch up and checkpoint group app", caught_up)
    assert flow["flow"] == "A->B" and flow["exactly_once"] is False
    lagging = rows(flow, "lagging")
    assert [(r["source_end"], r["position"], r["target_end"]) for r in lagging.values()] == [
        (12, 12, 12),
        (8, 8, 8),
    ]
    assert lagging[0]["remote_topic"] == "A.lagging"
    assert flow["heartbeat_age_ms"] is not None and flow["heartbeat_age_ms"] >= 0
    (app,) = [g for g in flow["groups"] if g["group"] == "app"]
    assert app["partitions"] == 1 and app["checkpoint_age_ms"] >= 0
    assert mirror.stop() == 0

    produce(a.bootstrap, "lagging", [1] * 7)
    lagging = rows(status(config, capsys), "lagging")
    assert [
        (r["source_end"], r["position"], r["lag"], r["target_end"]) for r in lagging.values()
    ] == [
        (12, 12, 0, 12),
        (15, 8, 7, 8),
    ]
    # the same in plain text: the partition's line with its lag
    assert main(["mirror", "status", "-c", str(config), "-o", "plain"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == [
        "FLOW",
        "TOPIC",
        "PARTITION",
        "SOURCE-END",
        "POSITION",
        "LAG",
        "REMOTE-TOPIC",
        "TARGET-END",
    ]
    assert "A->B\tlagging\t1\t15\t8\t7\tA.lagging\t8" in lines


@pytest.mark.cluster
def test_status_in_exactly_once_mode_reads_the_positions_stored_on_the_target(
    clusters: tuple[Broker, Broker],
    tmp_path: Path,
    start_mirror: Callable[..., Mirror],
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = clusters
    create(a.bootstrap, "exact", 1)
    produce(a.bootstrap, "exact", [0] * 9)
    config = write_config(tmp_path, s="E", t="F", a=a.bootstrap, b=b.bootstrap, topics="exact")
    with config.open("a") as f:
        f.write("F.exactly.once.source.support = enabled\n")
    mirror = start_mirror(config)
    wait_for(
        "E.exact on F", lambda: rows(status(config, capsys), "exact").get(0, {}).get("lag") == 0
    )
    assert mirror.stop() == 0
    # the group's offsets say nothing: only the positions stored on F count
    commit(a.bootstrap, "connect-mm2-E->F", "exact", {0: 0})
    produce(a.bootstrap, "exact", [0] * 4)
    flow = status(config, capsys)
    assert flow["exactly_once"] is True
    assert rows(flow, "exact")[0]["position"] == 9 and rows(flow, "exact")[0]["lag"] == 4


@pytest.mark.client
def test_status_of_an_unreachable_cluster_is_one_line_and_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    config = write_config(tmp_path, s="A", t="B", a=closed, b=closed, topics="x")
    assert main(["mirror", "status", "-c", str(config), "--timeout", "3"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"gregor: cluster A: cannot reach {closed} (connection refused)\n"


def metrics_address(log: Path) -> str:
    found = re.search(r"metrics at http://(\S+)/metrics", log.read_text())
    return found[1] if found else ""


@pytest.mark.cluster
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="no prometheus binary")
def test_prometheus_scrapes_record_counts_equal_to_the_records_copied(
    clusters: tuple[Broker, Broker], tmp_path: Path, start_mirror: Callable[..., Mirror]
) -> None:
    a, b = clusters
    create(a.bootstrap, "scraped", 3)
    produce(a.bootstrap, "scraped", [0] * 12 + [1] * 7 + [2] * 5)
    config = write_config(tmp_path, s="P", t="Q", a=a.bootstrap, b=b.bootstrap, topics="scraped")
    mirror = start_mirror(config, "--metrics", "127.0.0.1:0")
    target = wait_for("the metrics address in the log", lambda: metrics_address(mirror.log))
    wait_for("P.scraped on Q", lambda: ends(b.bootstrap, "P.scraped", 3) == [12, 7, 5])

    with prometheus(tmp_path, [target]) as server:
        name = "kafka_connect_mirror_mirrorsourceconnector_record_count"
        promql = f'{name}{{topic="P.scraped",partition="1"}}'

        def scraped() -> list[Any]:
            result = server.query(promql)
            return result if result and result[0]["value"][1] == "7" else []

        (series,) = wait_for("Prometheus to hold the record count", scraped)
        labels = series["metric"]
        assert (labels["source"], labels["target"], labels["job"]) == ("P", "Q", "gregor")
        counts = {
            r["metric"]["partition"]: r["value"][1]
            for r in server.query(f'{name}{{topic="P.scraped"}}')
        }
        assert counts == {"0": "12", "1": "7", "2": "5"}
    assert mirror.stop() == 0


def scrape(address: str) -> dict[tuple[str, str, str, str], float]:
    """record_count per (source, target, topic, partition) from the mirror's /metrics."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    out = {}
    pattern = re.compile(
        r'^kafka_connect_mirror_mirrorsourceconnector_record_count\{partition="(\d+)",'
        r'source="(\w+)",target="(\w+)",topic="([^"]+)"\} (\S+)$',
        re.M,
    )
    for partition, source, target, topic, value in pattern.findall(text):
        out[(source, target, topic, partition)] = float(value)
    return out


@pytest.mark.cluster
def test_metrics_count_only_what_was_copied_in_an_identity_cycle(
    clusters: tuple[Broker, Broker], tmp_path: Path, start_mirror: Callable[..., Mirror]
) -> None:
    a, b = clusters
    create(a.bootstrap, "both", 1)
    create(b.bootstrap, "both", 1)
    produce(a.bootstrap, "both", [0] * 30)
    produce(b.bootstrap, "both", [0] * 20)
    config = write_config(tmp_path, s="C", t="D", a=a.bootstrap, b=b.bootstrap, topics="both")
    with config.open("a") as f:
        f.write(
            "D->C.enabled = true\nD->C.topics = both\n"
            "replication.policy.class = IdentityReplicationPolicy\n"
        )
    mirror = start_mirror(config, "--metrics", "127.0.0.1:0")
    target = wait_for("the metrics address in the log", lambda: metrics_address(mirror.log))
    wait_for("both topics to hold 50 records", lambda: ends(a.bootstrap, "both", 1) == [50])
    wait_for("both topics to hold 50 records", lambda: ends(b.bootstrap, "both", 1) == [50])
    # each flow also reads the other's 20 or 30 copies, and does not copy them back
    expected = {("C", "D", "both", "0"): 30.0, ("D", "C", "both", "0"): 20.0}

    def counted() -> bool:
        found = scrape(target)
        return all(found.get(k) == v for k, v in expected.items())

    wait_for("the record counts of both flows", counted)
    time.sleep(2)  # time enough for the copies each flow skipped to be counted, were they
    assert counted()
    assert mirror.stop() == 0


@pytest.mark.cluster
def test_status_with_the_running_mirrors_metrics_shows_latency_and_rates(
    clusters: tuple[Broker, Broker],
    tmp_path: Path,
    start_mirror: Callable[..., Mirror],
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = clusters
    create(a.bootstrap, "rated", 2)
    config = write_config(tmp_path, s="R", t="S", a=a.bootstrap, b=b.bootstrap, topics="rated")
    mirror = start_mirror(config, "--metrics", "127.0.0.1:0")
    address = wait_for("the metrics address in the log", lambda: metrics_address(mirror.log))
    produce(a.bootstrap, "rated", [0] * 30)  # partition 0 only
    wait_for("R.rated on S", lambda: ends(b.bootstrap, "R.rated", 2) == [30, 0])

    def measured() -> dict[int, dict[str, Any]]:
        found = rows(status(config, capsys, "--metrics", address), "rated")
        return found if found[0]["records_per_s"] else {}

    found = wait_for("the copies measured", measured)
    # the copies took a non-negative time from the source's timestamp to the target's ack
    assert found[0]["replication_latency_ms"] is not None
    assert found[0]["replication_latency_ms"] >= 0
    assert found[0]["bytes_per_s"] > found[0]["records_per_s"] > 0  # 30 values of 2-3 bytes
    assert (found[1]["records_per_s"], found[1]["bytes_per_s"]) == (0.0, 0.0)
    # without --metrics: no figures; an address nothing serves: one line, status 1
    assert rows(status(config, capsys), "rated")[0]["records_per_s"] is None
    assert main(["mirror", "status", "-c", str(config), "--metrics", "127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gregor: --metrics 127.0.0.1:1: cannot read") and err.count("\n") == 1
    assert main(["mirror", "status", "-c", str(config), "-o", "plain", "--metrics", address]) == 0
    header = capsys.readouterr().out.splitlines()[0].split("\t")
    assert header[-3:] == ["LATENCY-MS", "RECORDS/S", "BYTES/S"]
    assert mirror.stop() == 0
