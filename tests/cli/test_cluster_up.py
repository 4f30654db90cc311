"""`gregor cluster up`: the bootstrap line comes once every broker is registered and unfenced (a
topic of replication factor 3 can be made at once), and SIGTERM stops every node even after
stdout was closed: no process is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

pytestmark = pytest.mark.cluster


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.add(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_cluster_up_is_usable_at_once_and_stops_with_stdout_closed(tmp_path: Path) -> None:
    proc, bootstrap = start_cluster_up(tmp_path, 3)
    assert proc.stdout is not None and proc.stderr is not None
    nodes: set[int] = set()
    try:
        nodes = descendants(proc.pid)
        assert len(nodes) == 3, nodes
        # At once: replication factor 3 needs all three brokers registered and unfenced.
        created = subprocess.run(
            [
                sys.executable,
                "-m",
                "gregor",
                "topics",
                "create",
                "rf3",
                "--partitions",
                "3",
                "--replication-factor",
                "3",
                "-b",
                bootstrap,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert created.returncode == 0, created.stderr
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = admin.list_topics("rf3", timeout=10).topics["rf3"]
        assert all(len(p.replicas) == 3 for p in topic.partitions.values())

        proc.stdout.close()  # `gregor cluster up | head`: whatever it prints next fails
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
        err = proc.stderr.read()
        assert "Traceback" not in err and "BrokenPipe" not in err, err
        assert [pid for pid in nodes if alive(pid)] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in nodes:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)  # left behind: failed above; not left for others


def start_cluster_up(tmp_path: Path, nodes: int) -> tuple[subprocess.Popen[str], str]:
    """`gregor cluster up --nodes N` and its bootstrap string, once it has printed it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gregor", "cluster", "up", "--nodes", str(nodes),
         "--base-dir", str(tmp_path), "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, f"cluster up ended: {proc.stderr.read()}"
        if line.startswith("bootstrap.servers="):
            return proc, line.strip().partition("=")[2]
    raise AssertionError("no bootstrap line in 120 s")


def test_a_sigkilled_cluster_up_leaves_no_node_running(tmp_path: Path) -> None:
    """SIGKILL gives `cluster up` no chance to stop its nodes: the kernel's parent-death signal
    does, within a few seconds."""
    proc, _ = start_cluster_up(tmp_path, 2)
    nodes = descendants(proc.pid)
    try:
        assert len(nodes) == 2, nodes
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 5
        while [pid for pid in nodes if alive(pid)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in nodes if alive(pid)] == []
    finally:
        for pid in nodes:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)  # left behind: failed above; not left for others
        assert proc.stderr is not None and proc.stdout is not None
        proc.stdout.close()
        proc.stderr.close()


def test_parent_death_signal_reaches_a_plain_child(tmp_path: Path) -> None:
    """The mechanism alone: a parent that arms it for a `sleep` child, then is SIGKILLed."""
    script = (
        "import signal, subprocess, sys, time\n"
        "from gregor.testing import parent_death\n"
        "child = subprocess.Popen(['sleep', '60'],"
        " preexec_fn=parent_death.preexec_fn(signal.SIGTERM))\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert alive(child)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child)
    finally:
        parent.stdout.close()
        if alive(child):
            os.kill(child, signal.SIGKILL)
