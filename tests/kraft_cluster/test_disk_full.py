"""A broker of a three-broker cluster runs out of disk under an acks=all stream: its log dir goes
offline, its heartbeats tell the controller (KIP-858), which moves every leadership it had and
takes it out of every ISR, so the stream carries on on the other two with nothing lost; once
the operator has freed space and restarted it, it catches up and rejoins the ISR."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gregor.testing.cluster import LocalCluster
from tests.kraft_cluster.helpers import FAST_REPLICATION, make_cluster, metadata_of, wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TOPIC = "stream"
FULL = 4  # the broker whose disk fills (node 1 is the only controller)
VALUE = os.urandom(16384)
# About 41 MiB on each broker: more than the 36 MiB left beside the ballast, less than 48 MiB.
RECORDS = 2500


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[tuple[LocalCluster, str]]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    logs = tmp_path / f"node-{FULL}" / "logs"
    logs.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(logs)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    ballast = str(logs / "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * (12 << 20))
    try:
        with make_cluster(tmp_path, FAST_REPLICATION, controllers=1) as c:
            yield c, ballast
    finally:
        subprocess.run(["umount", "-l", str(logs)], check=False)


def _partitions(cluster: LocalCluster, node: int) -> list[Any]:
    t = next((t for t in metadata_of(cluster, node).topics if t.name == TOPIC), None)
    return [] if t is None else sorted(t.partitions, key=lambda p: p.partition_index)


def test_a_full_disk_moves_leadership_and_loses_nothing(cluster: tuple[LocalCluster, str]) -> None:
    c, ballast = cluster
    wait_for("three brokers listed", lambda: len(metadata_of(c, 2).brokers) == 3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    spec = NewTopic(TOPIC, 3, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([spec], operation_timeout=10)[TOPIC].result(20)
    wait_for(
        "the topic on every broker", lambda: all(len(_partitions(c, n)) == 3 for n in c.broker_ids)
    )
    acked: dict[bytes, tuple[int, int]] = {}
    failed: list[str] = []
    p = confluent_kafka.Producer(
        {
            "bootstrap.servers": c.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )

    def done(err: Any, msg: Any) -> None:
        if err is None:
            acked[msg.key()] = (msg.partition(), msg.offset())
        else:
            failed.append(err.name())

    freed = False
    log_of_full = c.nodes[FULL]
    for i in range(RECORDS):
        while True:
            try:
                p.produce(TOPIC, VALUE, key=b"%d" % i, partition=i % 3, on_delivery=done)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        if not freed and "failed (" in log_of_full.read_log():
            os.unlink(ballast)  # the operator frees space at once (the dir stays offline)
            freed = True
    deadline = time.monotonic() + 120
    while len(p) and time.monotonic() < deadline:
        p.poll(0.1)
        if not freed and "failed (" in log_of_full.read_log():
            os.unlink(ballast)
            freed = True
    assert p.flush(10) == 0
    assert freed, "the disk of broker 4 never filled up:\n" + "\n".join(
        log_of_full.read_log().splitlines()[-30:]
    )
    assert failed == [] and len(acked) == RECORDS
    lines = [
        line
        for line in log_of_full.read_log().splitlines()
        if "log dir" in line and "failed (" in line
    ]
    assert len(lines) == 1, lines
    # The controller moved everything off broker 4: no leadership, no ISR membership.
    for part in _partitions(c, 2):
        assert part.leader_id != FULL and FULL not in part.isr_nodes, part
    assert "the controller knows its log dirs" in log_of_full.read_log()
    # Restarted with space, it catches up and rejoins every ISR.
    c.kill(FULL)
    for attempt in range(5):  # its port may be held a moment by another process's connection
        try:
            c.start_node(FULL)
            break
        except Exception:
            if attempt == 4:
                raise
            time.sleep(1)
    wait_for(
        "broker 4 back in every ISR",
        lambda: all(FULL in part.isr_nodes for part in _partitions(c, 2)),
        timeout_s=60,
    )
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": c.bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, i, 0) for i in range(3)])
    seen: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + 60
    while len(seen) < len(acked) and time.monotonic() < deadline:
        m = consumer.poll(1)
        if m is not None and m.error() is None:
            seen[(m.partition(), m.offset())] = m.key()
    consumer.close()
    for key, where in acked.items():
        assert seen.get(where) == key, f"{key!r} acknowledged at {where}, read {seen.get(where)!r}"
