"""The cluster configs (listeners split into client and controller listeners, the voters) and
`gregor cluster up`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gregor.broker.config import BrokerConfig
from gregor.metadata.config_defs import ConfigError

LISTENERS = "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"


def test_listeners_split_into_the_client_and_the_controller_listener() -> None:
    config = BrokerConfig.load(
        None,
        {
            "listeners": LISTENERS,
            "controller.quorum.voters": "1@127.0.0.1:9093,2@h2:9093",
            "node.id": "1",
        },
    )
    assert config.listener() == ("127.0.0.1", 9092)
    assert config.advertised() == ("127.0.0.1", 9092)
    assert config.controller_listener() == ("127.0.0.1", 9093)
    assert config.quorum_voters() == {1: ("127.0.0.1", 9093), 2: ("h2", 9093)}
    assert config.process_roles == {"broker", "controller"}
    config = BrokerConfig.load(
        None, {"advertised.listeners": "CONTROLLER://x:1,PLAINTEXT://public:19092"}
    )
    assert config.advertised() == ("public", 19092)


def test_without_voters_a_node_is_its_own_quorum() -> None:
    config = BrokerConfig.load(None, {})
    assert config.quorum_voters() is None
    assert config.controller_listener() is None
    assert config.listener() == ("127.0.0.1", 9092)


def test_bad_voters_name_the_key() -> None:
    with pytest.raises(ConfigError, match="controller.quorum.voters"):
        BrokerConfig.load(None, {"controller.quorum.voters": "1@nohost"}).quorum_voters()


def test_serve_refuses_voters_without_a_controller_listener(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gregor",
            "serve",
            "--data-dir",
            str(tmp_path),
            "--listen",
            "127.0.0.1:0",
            "--set",
            "controller.quorum.voters=1@127.0.0.1:1",
            "--log-level",
            "ERROR",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "controller.listener.names" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.cluster  # `gregor cluster up`: three nodes
def test_cluster_up_prints_the_nodes_and_ctrl_c_stops_them(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gregor",
            "cluster",
            "up",
            "--nodes",
            "3",
            "--base-dir",
            str(tmp_path),
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("Ctrl-C"):
            break
    text = "".join(lines)
    assert "node 1: broker 127.0.0.1:" in text and "node 3: broker" in text, text
    assert "bootstrap.servers=" in text
    for i in (1, 2, 3):
        assert os.path.exists(tmp_path / f"node-{i}" / "logs" / "meta.properties")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 0
