"""`gregor mirror --config mm2.properties --check`, run in this process."""

from __future__ import annotations

from pathlib import Path

import pytest

from gregor.cli.main import main

pytestmark = pytest.mark.unit

CONFIG = """\
clusters = A, B
A.bootstrap.servers = a:9092
B.bootstrap.servers = b:9092
A->B.enabled = true
A->B.topics = orders.*
A->B.sync.group.offsets.enabled = true
B.exactly.once.source.support = enabled
"""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mm2.properties"
    path.write_text(text)
    return str(path)


def test_check_prints_the_flows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, CONFIG)
    assert main(["mirror", "--config", path, "--check", "--topic", "orders", "--topic", "pay"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "  A: a:9092" in out
    assert "A->B:" in out and "B->A:" not in out
    assert "  topics: orders.*  excluding: .*[\\-\\.]internal, .*\\.replica, __.*" in out
    assert "  remote topics: A.<topic> (DefaultReplicationPolicy)" in out
    assert "  offset syncs: mm2-offset-syncs.B.internal on A, at least every 100 records" in out
    assert "  checkpoints: A.checkpoints.internal on B, every 60 s" in out
    assert "  group offsets synced to B: every 60 s" in out
    assert "  tasks.max: 1  exactly once: yes" in out
    assert "  orders -> A.orders" in out
    assert "  pay not mirrored: not matched by topics" in out
    assert out[-1] == "heartbeats: A->B, B->A"


def test_a_bad_config_is_one_line_and_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, CONFIG + "A->C.enabled = true\n")
    assert main(["mirror", "-c", path, "--check"]) == 1
    err = capsys.readouterr().err
    assert err == "gregor: A->C.enabled: unknown cluster 'C' (clusters = A, B)\n"


def test_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mirror", "-c", str(tmp_path / "nope.properties"), "--check"]) == 1
    assert "nope.properties" in capsys.readouterr().err


def test_the_shipped_example_checks(capsys: pytest.CaptureFixture[str]) -> None:
    example = Path(__file__).resolve().parents[2] / "config" / "mm2.properties"
    assert (
        main(
            [
                "mirror",
                "-c",
                str(example),
                "--check",
                "--topic",
                "orders",
                "--topic",
                "primary.orders",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert "primary->backup:" in out and "backup->primary:" in out
    assert "  orders -> primary.orders" in out
    assert "  primary.orders not mirrored: it came from primary (a cycle)" in out
    assert "  group offsets synced to backup: every 60 s" in out


def test_a_bad_metrics_address_is_one_line_and_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, CONFIG)
    assert main(["mirror", "-c", path, "--metrics", "localhost"]) == 1
    assert capsys.readouterr().err == "gregor: --metrics: not a HOST:PORT address: 'localhost'\n"
