"""`gregor serve` refuses what it cannot do before it starts: one line `gregor: ...` saying what to
change, exit status 1, never a traceback (broker/preflight.py, broker/security_settings.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gregor", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_line(proc: subprocess.CompletedProcess[str], line: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr == f"gregor: {line}\n", proc.stderr
    assert proc.returncode == 1


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_listen_port_out_of_range(tmp_path: Path) -> None:
    proc = serve("--listen", "127.0.0.1:99999", "--data-dir", str(tmp_path))
    assert_one_line(
        proc,
        "--listen 127.0.0.1:99999: port 99999 is out of range (0-65535; 0 picks a free one), "
        "e.g. --listen 127.0.0.1:9092",
    )


def test_listen_without_a_port(tmp_path: Path) -> None:
    proc = serve("--listen", "localhost", "--data-dir", str(tmp_path))
    assert_one_line(proc, "--listen localhost: expected HOST:PORT, e.g. --listen 127.0.0.1:9092")


def test_listen_with_a_security_protocol(tmp_path: Path) -> None:
    """--listen names a PLAINTEXT listener only: a protocol in it is refused, never served as
    plain text."""
    proc = serve("--listen", "SASL_PLAINTEXT://127.0.0.1:0", "--data-dir", str(tmp_path))
    assert_one_line(
        proc,
        "--listen SASL_PLAINTEXT://127.0.0.1:0: expected HOST:PORT (a PLAINTEXT listener), e.g. "
        "--listen 127.0.0.1:9092; name listeners with their protocol in --set listeners=...",
    )


def test_a_listeners_port_out_of_range(tmp_path: Path) -> None:
    spec = "PLAINTEXT://127.0.0.1:70000"
    proc = serve("--set", f"listeners={spec}", "--data-dir", str(tmp_path))
    assert_one_line(
        proc,
        f"Invalid value {spec} for configuration listeners: port 70000 is out of range "
        "(0-65535; 0 picks a free one)",
    )


def test_data_dir_naming_a_file(tmp_path: Path) -> None:
    file = tmp_path / "afile"
    file.write_text("not a directory")
    proc = serve("--listen", "127.0.0.1:0", "--data-dir", str(file))
    assert_one_line(
        proc,
        f"--data-dir {file} is a file, not a directory: name a directory (it is created if "
        "missing)",
    )
    assert file.read_text() == "not a directory"


def test_data_dir_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    inside = tmp_path / "afile" / "data"
    proc = serve("--listen", "127.0.0.1:0", "--data-dir", str(inside))
    assert_one_line(
        proc,
        f"--data-dir {inside} cannot be created (Not a directory): name a directory this user "
        "can create",
    )


def test_log_dirs_naming_a_file_names_log_dirs(tmp_path: Path) -> None:
    file = tmp_path / "afile"
    file.write_text("")
    proc = serve("--listen", "127.0.0.1:0", "--set", f"log.dirs={file}")
    assert_one_line(
        proc,
        f"log.dirs {file} is a file, not a directory: name a directory (it is created if missing)",
    )


@pytest.fixture
def unwritable_dir(tmp_path: Path) -> Iterator[str]:
    """A directory this process cannot write in: root writes everywhere but in sysfs."""
    if os.geteuid() == 0:
        yield "/sys/fs"
        return
    path = tmp_path / "read-only"
    path.mkdir()
    path.chmod(0o555)
    yield str(path)
    path.chmod(0o755)


def test_unwritable_data_dir(unwritable_dir: str) -> None:
    proc = serve("--listen", "127.0.0.1:0", "--data-dir", unwritable_dir)
    assert_one_line(
        proc,
        f"--data-dir {unwritable_dir} is not writable (Permission denied): name a directory "
        "this user can write to",
    )


def test_listen_port_in_use(tmp_path: Path, taken_port: int) -> None:
    proc = serve("--listen", f"127.0.0.1:{taken_port}", "--data-dir", str(tmp_path))
    assert_one_line(
        proc,
        f"127.0.0.1:{taken_port} is already in use: pick another port with --listen HOST:PORT "
        "(port 0 picks a free one), or stop what holds it",
    )


def test_controller_port_in_use(tmp_path: Path, taken_port: int) -> None:
    proc = serve(
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path),
        "--set",
        f"listeners=CONTROLLER://127.0.0.1:{taken_port}",
        "--set",
        f"controller.quorum.voters=1@127.0.0.1:{taken_port}",
    )
    assert_one_line(
        proc,
        f"127.0.0.1:{taken_port} is already in use: pick another port with the CONTROLLER "
        "listener in listeners (port 0 picks a free one), or stop what holds it",
    )


def test_missing_config_file(tmp_path: Path) -> None:
    missing = tmp_path / "server.properties"
    proc = serve("--config", str(missing), "--data-dir", str(tmp_path))
    assert "Traceback" not in proc.stderr
    assert proc.stderr == f"gregor: --config {missing}: No such file or directory\n"
    assert proc.returncode == 2


def test_a_node_joining_a_quorum_needs_the_cluster_id(tmp_path: Path) -> None:
    """Formatting itself with a random id, it would form no cluster with its peers."""
    data = tmp_path / "data"
    voters = "1@127.0.0.1:0,2@127.0.0.1:1,3@127.0.0.1:2"
    proc = serve(
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(data),
        "--set",
        "listeners=CONTROLLER://127.0.0.1:0",
        "--set",
        f"controller.quorum.voters={voters}",
    )
    assert_one_line(
        proc,
        f"{data} is not formatted (no meta.properties) and cluster.id is not set: this node joins "
        f"a quorum (controller.quorum.voters={voters}) and must share its cluster's id; run "
        f"`gregor storage format --cluster-id ID --data-dir {data} --node-id 1` (ID: the "
        "cluster's, or a new one from `gregor storage random-uuid`), or set cluster.id=ID",
    )
    assert not (data / "meta.properties").exists()


BUILDERS = "custom principal builders are not supported"
REFUSED = "(the node would otherwise run without the security it asks for)"


@pytest.mark.parametrize(
    ("setting", "line"),
    [
        (
            "listeners=SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms: listener SASL_PLAINTEXT enables GSSAPI (Kafka's default is "
            "GSSAPI), which gregor does not support: set sasl.enabled.mechanisms to OAUTHBEARER, "
            "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        ),
        (
            "listeners=SSL://127.0.0.1:0",
            "listener SSL (SSL) needs a certificate: set ssl.keystore.location (a PEM file with "
            "the certificate chain and key)",
        ),
        (
            "principal.builder.class=com.example.PrincipalBuilder",
            f"principal.builder.class is set, but {BUILDERS}: remove it {REFUSED}",
        ),
        (
            "sasl.kerberos.service.name=kafka",
            "sasl.kerberos.service.name is set, but gregor does not support "
            f"sasl.kerberos.service.name: remove it {REFUSED}",
        ),
        (
            "security.inter.broker.protocol=SASL_SSL",
            "security.inter.broker.protocol=SASL_SSL: no client listener is named so or uses "
            "it (listeners PLAINTEXT): remove it, or set inter.broker.listener.name",
        ),
        (
            "inter.broker.listener.name=INTERNAL",
            "inter.broker.listener.name=INTERNAL must be a listener name defined in listeners: "
            "the client listeners are PLAINTEXT",
        ),
        (
            "listener.name.sasl_plaintext.plain.sasl.jaas.config=x required",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config: sasl.jaas.config must end "
            "with ';'",
        ),
        (
            "ssl.keystore.type=JKS",
            "ssl.keystore.type=JKS: gregor reads PEM only: convert it to PEM",
        ),
    ],
    ids=[
        "sasl-listener-without-mechanism",
        "ssl-listener-without-keystore",
        "principal-builder",
        "kerberos",
        "sasl-inter-broker",
        "unknown-inter-broker-listener",
        "jaas-config",
        "jks",
    ],
)
def test_security_settings_are_refused(tmp_path: Path, setting: str, line: str) -> None:
    proc = serve("--data-dir", str(tmp_path), "--set", setting)
    assert_one_line(proc, line)
    assert os.listdir(tmp_path) == []  # refused before anything was written


def test_a_listener_mapped_to_a_security_protocol_is_checked(tmp_path: Path) -> None:
    proc = serve(
        "--data-dir",
        str(tmp_path),
        "--set",
        "listeners=INTERNAL://127.0.0.1:0",
        "--set",
        "listener.security.protocol.map=INTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "--set",
        "sasl.enabled.mechanisms=PLAIN",
    )
    assert_one_line(
        proc,
        "listener INTERNAL enables PLAIN but no user: set "
        'listener.name.internal.plain.sasl.jaas.config with user_NAME="password" entries',
    )


def test_a_listener_mapped_to_plaintext_starts(tmp_path: Path) -> None:
    """The check refuses security, not listener names: INTERNAL mapped to PLAINTEXT serves."""
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gregor",
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--ready-file",
            str(ready),
            "--log-level",
            "ERROR",
            "--set",
            "listeners=INTERNAL://127.0.0.1:0",
            "--set",
            "listener.security.protocol.map=INTERNAL:PLAINTEXT",
            "--set",
            "inter.broker.listener.name=INTERNAL",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        host, _, port = _wait_for(ready, proc).rpartition(":")
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def _wait_for(ready: Path, proc: subprocess.Popen[str]) -> str:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ready.exists() and ready.read_text().strip():
            return ready.read_text().strip()
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    raise AssertionError("the node did not start")


def test_metrics_listener_port_in_use(tmp_path: Path, taken_port: int) -> None:
    proc = serve(
        "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--metrics", f"127.0.0.1:{taken_port}"
    )  # fmt: skip
    assert_one_line(
        proc,
        f"127.0.0.1:{taken_port} is already in use: pick another port with metrics.listener "
        "(--metrics HOST:PORT) (port 0 picks a free one), or stop what holds it",
    )


def test_metrics_listener_bad_value(tmp_path: Path) -> None:
    proc = serve("--data-dir", str(tmp_path), "--set", "metrics.listener=https://127.0.0.1:1")
    assert proc.stderr == (
        "gregor: Invalid value https://127.0.0.1:1 for configuration metrics.listener: "
        "expected http://HOST:PORT (port 0 to 65535), or empty for none\n"
    )
    assert proc.returncode == 2


def test_an_inter_broker_listener_not_in_listeners_is_one_line(tmp_path: Path) -> None:
    proc = serve(
        "--data-dir",
        str(tmp_path),
        "--listen",
        "127.0.0.1:0",
        "--set",
        "listeners=INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "--set",
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
        "--set",
        "inter.broker.listener.name=REPLICATION",
    )
    assert_one_line(
        proc,
        "inter.broker.listener.name=REPLICATION must be a listener name defined in listeners: "
        "the client listeners are INTERNAL,EXTERNAL",
    )
    assert os.listdir(tmp_path) == []


def test_storage_format_of_a_file_names_the_option(tmp_path: Path) -> None:
    """`gregor storage format` checks its dirs as serve does (it said "[Errno 17] File exists")."""
    file = tmp_path / "afile"
    file.write_text("not a directory")
    proc = subprocess.run(
        [sys.executable, "-m", "gregor", "storage", "format", "--data-dir", str(file)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == (
        f"gregor storage format: --data-dir {file} is a file, not a directory: name a directory "
        "(it is created if missing)\n"
    )
    props = tmp_path / "node.properties"
    props.write_text(f"node.id=1\nprocess.roles=broker,controller\nlog.dirs={file}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gregor", "storage", "format", "--config", str(props)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.startswith(f"gregor storage format: log.dirs {file} is a file, not a")
    assert file.read_text() == "not a directory"


def test_cluster_up_with_a_base_dir_that_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "afile"
    file.write_text("not a directory")
    proc = subprocess.run(
        [sys.executable, "-m", "gregor", "cluster", "up", "--nodes", "2", "--base-dir", str(file)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_one_line(
        proc,
        f"--base-dir {file} is a file, not a directory: name a directory (it is created if "
        "missing)",
    )
    assert proc.stdout == ""
