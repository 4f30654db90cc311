"""Bad input to `gregor dump-log` and `gregor groups reset-offsets`: one line naming the file or
the flag (with an example for a flag), a non-zero exit status, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.testing.broker import Broker


def gregor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gregor", *args], capture_output=True, text=True, timeout=60
    )


def assert_fails(proc: subprocess.CompletedProcess[str], line: str, status: int = 1) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1] == line, proc.stderr
    assert proc.returncode == status


def test_dump_log_of_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "00000000000000000000.log"
    proc = gregor("dump-log", str(missing))
    assert_fails(proc, f"gregor: {missing}: No such file or directory")
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""


def test_dump_log_of_a_file_that_is_not_a_segment(tmp_path: Path) -> None:
    text = tmp_path / "notes.log"
    text.write_text("INFO a text log, not a log segment\n" * 20)
    claimed = 12 + int.from_bytes(text.read_bytes()[8:12], "big")  # as a batch length
    proc = gregor("dump-log", str(text))
    assert_fails(
        proc,
        f"gregor: {text}: not a log segment (no record batch at position 0: batch at position "
        f"0 claims {claimed} bytes but only 700 remain)",
    )
    assert proc.stderr.count("\n") == 1


def test_dump_log_of_a_short_file_and_a_directory(tmp_path: Path) -> None:
    short = tmp_path / "short.log"
    short.write_bytes(b"garbage")
    folder = tmp_path / "00000000000000000000.log"
    folder.mkdir()
    proc = gregor("dump-log", str(short), str(folder))
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"gregor: {short}: not a log segment (no record batch at position 0: 7 bytes at "
        "position 0 are too few for a batch header)",
        f"gregor: {folder}: Is a directory",
    ]
    assert proc.returncode == 1


def test_dump_log_of_an_index_not_named_by_its_offset(tmp_path: Path) -> None:
    index = tmp_path / "orders.index"
    index.write_bytes(b"\0" * 16)
    proc = gregor("dump-log", str(index))
    assert_fails(
        proc,
        f"gregor: {index}: not a log index: its name must be its segment's base offset, as in "
        "00000000000000000000.index",
    )


def test_dump_log_of_another_kind_of_file(tmp_path: Path) -> None:
    other = tmp_path / "meta.properties"
    other.write_text("version=1\n")
    proc = gregor("dump-log", str(other))
    assert_fails(
        proc, f"gregor: {other}: not a .log, .checkpoint, .index, .timeindex or .txnindex file"
    )


RESET = ("groups", "reset-offsets", "g", "--bootstrap-server", "127.0.0.1:1")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("--topic", "orders", "--to-datetime", "yesterday"),
            "gregor: --to-datetime: not an ISO-8601 time: 'yesterday' (e.g. 2024-05-01T12:00:00 "
            "(local time) or 2024-05-01T12:00:00+02:00)",
        ),
        (
            ("--topic", "orders:seven", "--to-earliest"),
            "gregor: --topic orders:seven: partitions must be numbers, e.g. --topic orders:0,1",
        ),
        (
            ("--topic", ":1", "--to-earliest"),
            "gregor: --topic :1: no topic named, e.g. --topic orders or --topic orders:0,1",
        ),
    ],
    ids=["datetime-yesterday", "partition-not-a-number", "no-topic"],
)
def test_reset_offsets_parse_errors_name_the_flag(args: tuple[str, ...], line: str) -> None:
    """Refused while parsing: nothing is asked of the (unreachable) bootstrap."""
    assert_fails(gregor(*RESET, *args), line)


def test_reset_offsets_of_a_partition_the_topic_lacks() -> None:
    with Broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("orders", 3, 1)])["orders"].result(15)
        base = ("groups", "reset-offsets", "g", "--bootstrap-server", broker.bootstrap)
        proc = gregor(*base, "--topic", "orders:1,7", "--to-earliest")
        assert_fails(
            proc,
            "gregor: --topic orders:1,7: topic orders has no partition 7 (it has 3: 0-2)",
        )
        proc = gregor(*base, "--topic", "nosuch", "--to-earliest")
        assert_fails(proc, "gregor: --topic nosuch: topic 'nosuch' does not exist")
        proc = gregor(*base, "--topic", "orders:1", "--to-datetime", "2024-05-01T12:00:00Z")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[1] == "g\torders\t1\t0" and "dry run" in proc.stderr
