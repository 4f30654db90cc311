"""Dedicated roles: controller-only nodes (`process.roles=controller`, the voters, a controller
listener only) and broker-only nodes (`process.roles=broker`, observers of the metadata quorum,
no controller listener), as separate `gregor serve` processes with real clients.

One controller and two brokers: the brokers register, Metadata names exactly them, a topic made
with AdminClient through a broker (forwarded to the controller) is placed on the brokers only and
served by both, a consumer group works (its `__consumer_offsets` made through the controller);
DescribeQuorum shows the brokers as observers with their fetch offsets. Broker 3
there knows only `controller.quorum.bootstrap.servers` (no voters). Three controllers and one
broker: SIGKILL of the active controller does not stop produce and consume on the broker, and a
topic can be made once a new controller is elected. Then the config errors, one line each.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.broker.config import BrokerConfig
from gregor.cli.main import main as cli_main
from gregor.cli.quorum import fetch_quorum
from gregor.metadata.config_defs import ConfigError
from gregor.protocol import api_keys
from gregor.protocol.messages import MetadataRequest
from gregor.testing.cluster import LocalCluster
from tests.kraft_broker.helpers import Raw
from tests.kraft_cluster.helpers import (
    admin,
    create,
    create_acknowledged,
    make_cluster,
    metadata_of,
    wait_for,
)

confluent_kafka = pytest.importorskip("confluent_kafka")

FAST = {"broker.session.timeout.ms": "6000", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def one_controller(tmp_path: Path) -> Iterator[LocalCluster]:
    """Controller 1; broker 2 (controller.quorum.voters), broker 3 (bootstrap servers only)."""
    with make_cluster(tmp_path, FAST, 2, controllers=1, bootstrap_only=[3]) as c:
        yield c


def brokers_seen_by(cluster: LocalCluster, node: int) -> set[int]:
    return {b.node_id for b in metadata_of(cluster, node).brokers}


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        producer.produce(topic, key=v.encode(), value=v.encode())
    assert producer.flush(15) == 0


def consume(bootstrap: str, topic: str, partitions: int, count: int) -> list[str]:
    """`count` values read from the start of every partition (assigned: no group needed)."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "roles", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[str] = []
    deadline = time.monotonic() + 20
    while len(values) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value().decode())
    consumer.close()
    return values


def observers_caught_up(bootstrap: str) -> Any:
    part = fetch_quorum(bootstrap)
    caught_up = part.observers and all(
        o.log_end_offset == part.high_watermark for o in part.observers
    )
    return part if caught_up else None


def test_one_controller_two_brokers_one_found_through_bootstrap_servers(
    one_controller: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    c = one_controller
    for node in c.broker_ids:
        wait_for(f"both brokers seen by {node}", lambda n=node: brokers_seen_by(c, n) == {2, 3})
    create(admin(c.bootstrap_of(3)), "orders", partitions=2)  # through the bootstrap-only broker
    for node in c.broker_ids:
        wait_for(
            f"orders on {node}",
            lambda n=node: any(t.name == "orders" for t in metadata_of(c, n).topics),
        )
    md = metadata_of(c, 2)
    assert sorted((b.node_id, b.port) for b in md.brokers) == sorted(c.broker_ports.items())
    orders = next(t for t in md.topics if t.name == "orders")
    assert sorted(p.leader_id for p in orders.partitions) == [2, 3]
    assert (
        md.controller_id == 2
    )  # the broker asked (a live broker; any of them forwards admin writes)

    # produce through each broker, consume through each: both brokers serve
    sent = [f"a{i}" for i in range(20)] + [f"b{i}" for i in range(20)]
    produce(c.bootstrap_of(2), "orders", sent[:20])
    produce(c.bootstrap_of(3), "orders", sent[20:])
    for node in c.broker_ids:
        assert sorted(consume(c.bootstrap_of(node), "orders", 2, 40)) == sorted(sent)
    assert not glob.glob(os.path.join(c.data_dir(1), "logs", "orders-*"))  # none on the controller

    # a consumer group: the broker has __consumer_offsets made through the controller
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": c.bootstrap_of(3),
            "group.id": "g",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["orders"])
    values: list[str] = []
    deadline = time.monotonic() + 30
    while len(values) < 40 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            values.append(msg.value().decode())
    consumer.commit(asynchronous=False)
    committed = consumer.committed(
        [confluent_kafka.TopicPartition("orders", p) for p in range(2)], timeout=10
    )
    consumer.close()
    assert sorted(values) == sorted(sent)
    assert sum(tp.offset for tp in committed) == 40

    # auto-creation through a broker-only node: forwarded to the controller
    asked = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="auto-roles")],
        allow_auto_topic_creation=True,
    )

    def auto_created() -> bool:
        with Raw(c.bootstrap_of(3)) as raw:
            return bool(raw.call(api_keys.METADATA, 12, asked).topics[0].error_code == 0)

    wait_for("auto-roles made through broker 3", auto_created)

    # the controller has no client listener: its only port serves the controller APIs
    with Raw(f"{c.host}:{c.controller_ports[1]}") as raw, pytest.raises(ConnectionError):
        raw.call(
            api_keys.METADATA, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False)
        )

    # DescribeQuorum through a broker (forwarded to the leader) and from the controller itself
    for bootstrap in (c.bootstrap_of(3), f"{c.host}:{c.controller_ports[1]}"):
        part = wait_for("observers caught up", lambda b=bootstrap: observers_caught_up(b))
        assert [v.replica_id for v in part.current_voters] == [1]
        assert sorted(o.replica_id for o in part.observers) == [2, 3]
        assert all(o.log_end_offset > 0 and o.last_fetch_timestamp > 0 for o in part.observers)
    assert cli_main(["quorum", "describe", "-b", c.bootstrap_of(2)]) == 0
    table = capsys.readouterr().out
    roles = {line.split()[0]: line.split()[1] for line in table.splitlines()[4:]}
    assert roles == {"node": "role", "1": "Leader", "2": "Observer", "3": "Observer"}


def test_killing_the_active_controller_of_three_leaves_the_broker_serving(tmp_path: Path) -> None:
    with make_cluster(tmp_path, FAST, 1, controllers=3, bootstrap_only=[4]) as c:
        run_failover(c)


def run_failover(c: LocalCluster) -> None:
    broker = c.bootstrap_of(4)
    wait_for("the broker registered", lambda: brokers_seen_by(c, 4) == {4})
    create(admin(broker), "before")
    wait_for(
        "before on the broker", lambda: any(t.name == "before" for t in metadata_of(c, 4).topics)
    )
    first = wait_for("a leader", lambda: fetch_quorum(broker).leader_id)

    delivered: list[tuple[float, str]] = []
    failed: list[str] = []
    stop = threading.Event()

    def produce_loop() -> None:
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": broker, "acks": "all", "linger.ms": 0}
        )

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                delivered.append((time.monotonic(), msg.value().decode()))
            else:
                failed.append(str(err))

        n = 0
        while not stop.is_set():
            producer.produce("before", value=f"v{n}".encode(), on_delivery=on_delivery)
            producer.poll(0)
            time.sleep(0.02)  # a steady trickle, about 50 a second
            n += 1
        producer.flush(15)

    worker = threading.Thread(target=produce_loop, daemon=True)
    worker.start()
    wait_for("deliveries", lambda: len(delivered) >= 5)
    killed_at = time.monotonic()
    c.kill(first)

    def new_leader() -> int | None:
        leader = int(fetch_quorum(broker).leader_id)
        return leader if leader not in (first, -1) else None

    second = wait_for("a new leader", new_leader, 30)
    elected_at = time.monotonic()
    wait_for(
        "a topic made after the election", lambda: create_acknowledged(admin(broker), "after"), 30
    )
    time.sleep(0.5)
    stop.set()
    worker.join(30)

    assert second in c.controller_ids and second != first  # whichever controller led first
    assert failed == []
    assert any(killed_at < t < elected_at for t, _ in delivered)  # served while no controller was
    values = [v for _, v in delivered]
    assert consume(broker, "before", 1, len(values)) == values
    produce(broker, "after", ["x"])
    assert consume(broker, "after", 1, 1) == ["x"]
    during = sum(1 for t, _ in delivered if killed_at < t < elected_at)
    print(
        f"dedicated controllers: the broker saw a new leader {elected_at - killed_at:.2f}s after the kill; {during} produce(s) acknowledged meanwhile"
    )


def test_membership_from_the_configs() -> None:
    def membership(**values: str) -> Any:
        return BrokerConfig.load(
            None, {k.replace("_", "."): v for k, v in values.items()}
        ).membership()

    alone = membership()
    assert not alone.networked and alone.roles == {"broker", "controller"}
    broker = membership(
        process_roles="broker",
        node_id="4",
        controller_quorum_bootstrap_servers="c1:9093, [::1]:9094",
    )
    assert broker.networked and broker.voters is None and not broker.is_controller
    assert broker.bootstrap == [("c1", 9093), ("::1", 9094)]
    controller = membership(
        process_roles="controller",
        controller_quorum_voters="1@c1:9093,2@c2:9093",
        listeners="CONTROLLER://c1:9093",
    )
    assert controller.controller_listener == ("c1", 9093) and not controller.is_broker
    with pytest.raises(ConfigError, match="dynamic quorum"):
        membership(
            controller_quorum_bootstrap_servers="c1:9093",
            listeners="PLAINTEXT://h:1,CONTROLLER://h:2",
        )
    with pytest.raises(
        ConfigError, match="controller.quorum.bootstrap.servers: expected host:port"
    ):
        membership(process_roles="broker", node_id="4", controller_quorum_bootstrap_servers="c1")


def serve_error(tmp_path: Path, *settings: str) -> subprocess.CompletedProcess[str]:
    args = [
        sys.executable,
        "-m",
        "gregor",
        "serve",
        "--data-dir",
        str(tmp_path / "data"),
        "--log-level",
        "ERROR",
    ]
    for s in settings:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


VOTERS = "controller.quorum.voters=1@127.0.0.1:1"
CONTROLLER_ONLY = "listeners=CONTROLLER://127.0.0.1:1"


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        (
            ("process.roles=controller", VOTERS, "listeners=PLAINTEXT://127.0.0.1:0"),
            "controller.listener.names",
        ),
        (
            ("process.roles=broker", VOTERS, "listeners=PLAINTEXT://127.0.0.1:0"),
            "must not be among controller.quorum.voters",
        ),
        (
            ("process.roles=controller", VOTERS, f"{CONTROLLER_ONLY},PLAINTEXT://127.0.0.1:0"),
            "may only hold controller listeners",
        ),
        (
            ("process.roles=broker", "node.id=4", "listeners=PLAINTEXT://127.0.0.1:0"),
            "controller.quorum.bootstrap.servers",
        ),
        (("process.roles=broker,observer", VOTERS), "process.roles"),
    ],
    ids=[
        "controller-without-controller-listener",
        "broker-among-voters",
        "controller-with-client-listener",
        "broker-without-voters-or-bootstrap",
        "unknown-role",
    ],
)
def test_a_bad_combination_of_roles_is_one_line_and_exit_1(
    tmp_path: Path, settings: tuple[str, ...], says: str
) -> None:
    proc = serve_error(tmp_path, *settings)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
    assert not os.path.exists(tmp_path / "data" / "meta.properties")  # refused before anything


@pytest.mark.cluster  # `gregor cluster up`: several nodes
def test_cluster_up_with_dedicated_controllers(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gregor", "cluster", "up", "--nodes", "1", "--controllers", "1"]
        + ["--base-dir", str(tmp_path), "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line or line.startswith("Ctrl-C"):
            break
        lines.append(line)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0
    text = "".join(lines)
    assert "1 controller(s), 1 broker(s)" in text, text
    node1, node2 = (
        next(li.split(" data ")[0] for li in lines if li.startswith(f"  node {i}:")) for i in (1, 2)
    )
    assert "controller 127.0.0.1:" in node1 and "broker" not in node1
    assert "broker 127.0.0.1:" in node2 and "controller" not in node2
    port = int(node2.split("broker 127.0.0.1:")[1].split()[0])
    assert f"bootstrap.servers=127.0.0.1:{port}\n" in text
