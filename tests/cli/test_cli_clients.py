"""`gregor topics`, `gregor produce` and `gregor consume` against a real broker."""

import json
import subprocess
import sys

import pytest

from gregor.testing.broker import Broker


@pytest.fixture(scope="module")
def broker():
    with Broker() as b:
        yield b


def gregor(broker, *args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "gregor", *args, "-b", broker.bootstrap],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_topics_create_list_describe_alter_delete(broker):
    out = gregor(
        broker, "topics", "create", "cli-a", "--partitions", "3", "--config", "retention.ms=5000"
    )
    assert out.returncode == 0, out.stderr
    assert "cli-a" in gregor(broker, "topics", "list").stdout.split()
    again = gregor(broker, "topics", "create", "cli-a", "--partitions", "3")
    assert again.returncode == 1
    assert again.stderr == "error: cannot create topic cli-a: topic 'cli-a' already exists\n"
    assert (
        gregor(
            broker, "topics", "alter-config", "cli-a", "--set", "cleanup.policy=compact"
        ).returncode
        == 0
    )
    desc = gregor(broker, "topics", "describe", "cli-a", "--output", "json")
    assert desc.returncode == 0, desc.stderr
    [topic] = json.loads(desc.stdout)
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
    # Only overrides are listed: a default such as segment.bytes is not.
    assert topic["configs"] == {"retention.ms": "5000", "cleanup.policy": "compact"}
    assert gregor(broker, "topics", "delete", "cli-a").returncode == 0
    assert "cli-a" not in gregor(broker, "topics", "list").stdout.split()


def test_produce_lines_then_consume_json(broker):
    assert gregor(broker, "topics", "create", "cli-b", "--partitions", "1").returncode == 0
    lines = "".join(f"key{i}:value {i}\n" for i in range(50))
    out = gregor(
        broker,
        "produce",
        "cli-b",
        "--key-separator",
        ":",
        "--headers",
        "source=cli,n=1",
        stdin=lines,
    )
    assert out.returncode == 0, out.stderr
    got = gregor(
        broker, "consume", "cli-b", "--from-beginning", "--max-messages", "50", "--format", "json"
    )
    assert got.returncode == 0, got.stderr
    records = [json.loads(line) for line in got.stdout.splitlines()]
    assert [r["offset"] for r in records] == list(range(50))
    assert [(r["key"], r["value"]) for r in records] == [
        (f"key{i}", f"value {i}") for i in range(50)
    ]
    assert records[0]["headers"] == {"source": "cli", "n": "1"}


def test_consume_output_json_and_plain(broker):
    assert gregor(broker, "topics", "create", "cli-c", "--partitions", "1").returncode == 0
    lines = "".join(f"k{i}|v{i}\n" for i in range(5))
    out = gregor(broker, "produce", "cli-c", "--key-separator", "|", stdin=lines)
    assert out.returncode == 0, out.stderr
    got = gregor(
        broker, "consume", "cli-c", "--from-beginning", "--max-messages", "5", "-o", "json"
    )
    assert got.returncode == 0, got.stderr
    records = [json.loads(line) for line in got.stdout.splitlines()]
    assert [(r["topic"], r["partition"], r["offset"]) for r in records] == [
        ("cli-c", 0, i) for i in range(5)
    ]
    assert [(r["key"], r["value"], r["headers"]) for r in records] == [
        (f"k{i}", f"v{i}", {}) for i in range(5)
    ]
    assert all(isinstance(r["timestamp"], int) and r["timestamp"] > 0 for r in records)
    # --output json and --format json print the same lines
    same = gregor(
        broker, "consume", "cli-c", "--from-beginning", "--max-messages", "5", "--format", "json"
    )
    assert same.stdout == got.stdout
    # --output wins over --format; kv stays a plain variant
    plain = gregor(
        broker,
        "consume",
        "cli-c",
        "--from-beginning",
        "--max-messages",
        "5",
        "--format",
        "json",
        "-o",
        "plain",
    )
    assert plain.stdout == "".join(f"v{i}\n" for i in range(5))
    kv = gregor(
        broker,
        "consume",
        "cli-c",
        "--from-beginning",
        "--max-messages",
        "5",
        "--format",
        "kv",
        "--output",
        "plain",
    )
    assert kv.stdout == "".join(f"k{i}\tv{i}\n" for i in range(5))


def test_a_missing_topic_or_partition_is_one_line(broker):
    assert gregor(broker, "topics", "create", "cli-d", "--partitions", "2").returncode == 0
    missing = gregor(broker, "consume", "cli-nosuch", "--max-messages", "1")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == (
        "gregor: topic cli-nosuch: unknown topic or partition (UNKNOWN_TOPIC_OR_PART)\n"
    )
    beyond = gregor(broker, "consume", "cli-d", "--partition", "1", "--partition", "5")
    assert (beyond.returncode, beyond.stdout) == (1, "")
    assert beyond.stderr == (
        "gregor: --partition 5: topic cli-d has no partition 5 (it has 2: 0-1)\n"
    )
    sent = gregor(broker, "produce", "cli-d", "--partition", "2", stdin="x\n")
    assert (sent.returncode, sent.stdout) == (1, "")
    assert sent.stderr == "gregor: --partition 2: topic cli-d has no partition 2 (it has 2: 0-1)\n"


def test_produce_keeps_the_bytes_of_lines_that_are_not_utf8(broker):
    """Each line's bytes as read (a CRLF end is a line end too), read back by a real consumer."""
    from confluent_kafka import Consumer

    assert gregor(broker, "topics", "create", "cli-bin", "--partitions", "1").returncode == 0
    done = subprocess.run(
        [sys.executable, "-m", "gregor", "produce", "cli-bin", "--key-separator", ":"]
        + ["-b", broker.bootstrap],
        input=b"\xff\xfe\nk\xff:v\r\nplain\nno end",
        capture_output=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, b"produced 4 records to cli-bin\n")
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "bin", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["cli-bin"])
    got = []
    for _ in range(100):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.key(), msg.value()))
        if len(got) == 4:
            break
    consumer.close()
    assert got == [(None, b"\xff\xfe"), (b"k\xff", b"v"), (None, b"plain"), (None, b"no end")]


def test_a_header_that_is_not_key_value_is_one_line(broker):
    done = gregor(broker, "produce", "cli-b", "--headers", "source=cli,oops", stdin="x\n")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "gregor: --headers: 'oops' is not KEY=VALUE, e.g. --headers source=cli,n=1\n"
    )
