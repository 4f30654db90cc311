"""Failing well: an unreachable bootstrap, a closed stdout, Ctrl-C and bad input each end in one
line (or none) and an exit status, never a traceback or librdkafka's log lines."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from cli_helpers import gregor, one_line_error

from gregor.testing.broker import Broker

pytestmark = pytest.mark.client


def refused_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "command",
    [
        ["topics", "list"],
        ["topics", "create", "t"],
        ["groups", "list"],
        ["acls", "list"],
        ["offsets", "get", "t"],
        ["cluster", "info"],
        ["cluster", "health"],
        ["configs", "describe", "--entity-type", "topics", "--entity-name", "t"],
        ["produce", "t"],
        ["consume", "t"],
        ["quorum", "describe"],
        ["topics", "add-partitions", "t", "--partitions", "2"],
        ["groups", "describe", "g"],
        ["records", "delete", "t:0", "--before", "1"],
        ["log-dirs", "describe"],
        ["leader-election", "--election-type", "preferred", "--all-topic-partitions"],
        [
            "configs",
            "alter",
            "--entity-type",
            "topics",
            "--entity-name",
            "t",
            "--add-config",
            "a=b",
        ],
        ["quotas", "describe"],
        ["users", "scram", "describe"],
    ],
)
def test_an_unreachable_bootstrap_is_one_line_within_the_timeout(command):
    port = refused_port()
    run = gregor(*command, "-b", f"127.0.0.1:{port}", "--timeout", "5", stdin="")
    one_line_error(run, f"gregor: cannot reach 127.0.0.1:{port} (connection refused)")
    assert run.stdout == ""
    assert run.elapsed_s < 5


def test_verbose_shows_the_client_librarys_log_lines():
    port = refused_port()
    run = gregor("topics", "list", "-b", f"127.0.0.1:{port}", "--timeout", "3", "--verbose")
    assert run.returncode == 1
    lines = run.stderr.splitlines()
    assert lines[-1] == f"gregor: cannot reach 127.0.0.1:{port} (connection refused)"
    assert any("Connection refused" in line and "FAIL" in line for line in lines[:-1])


def test_a_silent_bootstrap_ends_at_the_timeout():
    with socket.socket() as server:  # accepts connections, never answers a request
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        run = gregor("topics", "list", "-b", f"127.0.0.1:{port}", "--timeout", "2")
    one_line_error(run, f"gregor: cannot reach 127.0.0.1:{port} (no answer in 2 s)")
    assert 2 <= run.elapsed_s < 6


def test_ctrl_c_exits_130_quietly():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "gregor.cli.main", "topics", "list", "-b", f"127.0.0.1:{port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(2)  # waiting for the metadata that never comes
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out, err) == (130, "", "")


def test_command_config_errors_are_one_line(tmp_path):
    missing = tmp_path / "nope.properties"
    one_line_error(
        gregor("topics", "list", "--command-config", str(missing)),
        f"gregor: --command-config {missing}: No such file or directory",
    )
    bad = tmp_path / "bad.properties"
    bad.write_text("# a comment\nno.such.setting = 1\n")
    run = gregor("topics", "list", "--command-config", str(bad))
    assert run.returncode == 1 and run.stderr.count("\n") == 1
    assert run.stderr.startswith(f"gregor: bad client setting (from --command-config {bad}): ")
    assert "no.such.setting" in run.stderr


@pytest.fixture(scope="module")
def broker():
    with Broker() as b:
        yield b


def test_a_closed_stdout_exits_quietly_with_0(broker):
    done = gregor("topics", "create", "pipe", "-b", broker.bootstrap)
    assert done.returncode == 0, done.stderr
    lines = "".join(f"{i:04d}{'x' * 1000}\n" for i in range(300))  # 300 KB: more than a pipe holds
    done = gregor("produce", "pipe", "-b", broker.bootstrap, stdin=lines)
    assert done.returncode == 0, done.stderr
    # as `gregor consume pipe --from-beginning | head -1`
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gregor.cli.main",
            "consume",
            "pipe",
            "--from-beginning",
            "-b",
            broker.bootstrap,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 0
    assert first.startswith(b"0000xxx")
    assert err == b""


def test_a_stdout_closed_from_the_start_exits_quietly_with_0(broker):
    """As `gregor topics list >&-`: stdout is not even open when the command starts."""
    for command in (["topics", "list"], ["groups", "list", "-o", "json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "gregor.cli.main", *command, "-b", broker.bootstrap],
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            preexec_fn=lambda: os.close(1),
        )
        assert (proc.returncode, proc.stderr) == (0, "")


@pytest.mark.parametrize("command", [["storage", "random-uuid"], ["completion", "bash"]])
def test_a_full_stdout_is_one_line(command):
    """As `gregor ... > /dev/full`: the write fails for want of room, said in one line."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "gregor.cli.main", *command],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert (proc.returncode, proc.stderr) == (1, "gregor: cannot write: no space left on device\n")
