"""The shipped examples, config/server.properties and config/cluster/node-{1,2,3}.properties, stay
loadable and runnable: `gregor serve --config FILE` with only the ports and data dirs moved into
a temp dir."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.broker.config import BrokerConfig, read_properties
from gregor.testing.cluster import free_ports

CONFIG = Path(__file__).resolve().parents[2] / "config"
SERVER = CONFIG / "server.properties"
NODES = [CONFIG / "cluster" / f"node-{i}.properties" for i in (1, 2, 3)]


@pytest.mark.parametrize("path", [SERVER, *NODES], ids=lambda p: p.name)
def test_an_example_loads_without_warnings_and_runs_as_configured(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        config = BrokerConfig.load(str(path))
    assert caplog.records == []  # no unknown key
    membership = config.membership()  # roles, voters, listeners, security: all accepted
    assert membership.is_broker and membership.is_controller


def test_the_cluster_examples_agree() -> None:
    nodes = [BrokerConfig.load(str(p)) for p in NODES]
    assert [n.node_id for n in nodes] == [1, 2, 3]
    voters = nodes[0].quorum_voters()
    assert all(n.quorum_voters() == voters for n in nodes)
    assert voters == {n.node_id: n.controller_listener() for n in nodes}
    assert len({n.listener() for n in nodes}) == 3 and len({tuple(n.log_dirs) for n in nodes}) == 3


def wait_ready(proc: subprocess.Popen[str], ready: Path) -> str:
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text().strip()):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the node did not start"
        time.sleep(0.05)
    return ready.read_text().strip()


def serve(config: Path, cwd: Path, *args: str) -> tuple[subprocess.Popen[str], Path]:
    ready = cwd / f"ready-{config.stem}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gregor",
            "serve",
            "--config",
            str(config),
            "--ready-file",
            str(ready),
            "--log-level",
            "WARNING",
            *args,
        ],
        cwd=cwd,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, ready


def brokers(admin: AdminClient) -> set[int]:
    try:
        return set(admin.list_topics(timeout=10).brokers)
    except KafkaException:  # a partial answer while the nodes come up
        return set()


def roundtrip(bootstrap: str, topic: str, replicas: int) -> None:
    """A topic of the default partitions and replicas; a record produced with acks=all and read
    back by a group that commits (the offsets topic as configured)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic)])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:  # the broker answering may learn of the topic a moment after the controller
        md = admin.list_topics(topic, timeout=10).topics[topic]
        if md.error is None and md.partitions or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert {len(p.replicas) for p in md.partitions.values()} == {replicas}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, b"hello", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        msg = None
        deadline = time.monotonic() + 60
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.error() is None and msg.value() == b"hello"
        consumer.commit(msg, asynchronous=False)
    finally:
        consumer.close()


def test_a_node_starts_from_server_properties(tmp_path: Path) -> None:
    proc, ready = serve(SERVER, tmp_path, "--listen", "127.0.0.1:0")
    try:
        bootstrap = wait_ready(proc, ready)
        assert (tmp_path / "gregor-data" / "meta.properties").exists()  # log.dirs, from cwd
        roundtrip(bootstrap, "example", replicas=1)
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


@pytest.mark.cluster
def test_three_nodes_start_from_the_cluster_examples(tmp_path: Path) -> None:
    """As the files say: one cluster id, `storage format --config` on each node, then serve;
    only the ports move (the examples' 9092-9097 may be taken here)."""
    ports = free_ports(6)
    voters = ",".join(f"{i}@127.0.0.1:{ports[2 * i - 1]}" for i in (1, 2, 3))
    cluster_id = subprocess.run(
        [sys.executable, "-m", "gregor", "storage", "random-uuid"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    procs = []
    try:
        for i, path in enumerate(NODES, 1):
            subprocess.run(
                [sys.executable, "-m", "gregor", "storage", "format", "-t", cluster_id]
                + ["--config", str(path)],
                cwd=tmp_path,
                check=True,
                capture_output=True,
            )
            listeners = f"PLAINTEXT://127.0.0.1:{ports[2 * i - 2]},CONTROLLER://127.0.0.1:{ports[2 * i - 1]}"
            procs.append(
                serve(
                    path,
                    tmp_path,
                    "--set",
                    f"listeners={listeners}",
                    "--set",
                    f"controller.quorum.voters={voters}",
                )
            )
        bootstraps = [wait_ready(proc, ready) for proc, ready in procs]
        for i in (1, 2, 3):
            meta = read_properties(str(tmp_path / "gregor-data" / f"node-{i}" / "meta.properties"))
            assert (meta["cluster.id"], meta["node.id"]) == (cluster_id, str(i))
        admin = AdminClient({"bootstrap.servers": ",".join(bootstraps)})
        deadline = time.monotonic() + 60
        while len(brokers(admin)) < 3:
            assert time.monotonic() < deadline, "the three brokers did not all register"
            time.sleep(0.2)
        roundtrip(",".join(bootstraps), "example", replicas=3)
    finally:
        for proc, _ in procs:
            proc.terminate()
        for proc, _ in procs:
            assert proc.wait(60) == 0
