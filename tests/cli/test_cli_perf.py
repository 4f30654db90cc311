"""`gregor perf produce` and `gregor perf consume` against a real broker over loopback: the JSON
figures checked against what the broker holds, the client config files merged, and the failures
a user can cause reported as one line with exit status 1."""

import json
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.testing.broker import Broker
from gregor.testing.cluster import free_ports


@pytest.fixture(scope="module")
def broker():
    with Broker(config={"group.initial.rebalance.delay.ms": "0"}) as b:
        yield b


def gregor(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "gregor", "perf", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def create_topic(broker, name, partitions):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result(timeout=30)


def end_offsets(broker, topic, partitions):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "perf-test-offsets"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def values(broker, topic, count):
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"perf-test-read-{topic}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(count - len(got), 0.5) if not m.error()]
    finally:
        consumer.close()
    return got


def one_line_error(out, message):
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr
    assert out.stderr == f"gregor: {message}\n"


def check_latency(latency):
    assert set(latency) == {"avg", "p50", "p95", "p99", "p999", "max"}
    assert 0 <= latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["p999"]
    assert latency["p999"] <= latency["max"] and latency["avg"] <= latency["max"]


def test_produce_then_consume_json_figures_match_the_log(broker):
    create_topic(broker, "perf-a", 3)
    n = 3000
    out = gregor(
        "produce", "-b", broker.bootstrap, "--topic", "perf-a", "--num-records", str(n),
        "--record-size", "100", "--producer-props", "acks=all", "linger.ms=2",
        "--output", "json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    assert figures["records"] == n and figures["failed"] == 0
    assert figures["bytes"] == n * 100
    assert figures["records_per_sec"] > 0 and figures["mb_per_sec"] > 0
    assert figures["latency_ms"]["max"] > 0
    check_latency(figures["latency_ms"])
    assert sum(end_offsets(broker, "perf-a", 3)) == n

    got = gregor(
        "consume", "-b", broker.bootstrap, "--topic", "perf-a", "--messages", str(n),
        "--group", "perf-a-readers", "--output", "json",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    read = json.loads(got.stdout)
    assert read["records"] == n and read["bytes"] == n * 100
    assert read["rebalance_time_ms"] + read["fetch_time_ms"] == pytest.approx(
        read["elapsed_ms"], abs=0.01
    )
    check_latency(read["latency_ms"])
    assert read["latency_ms"]["p50"] > 0  # the records were written before the consumer ran


def test_plain_output_is_kafkas(broker):
    create_topic(broker, "perf-b", 1)
    out = gregor(
        "produce", "-b", broker.bootstrap, "--topic", "perf-b", "--num-records", "200",
        "--record-size", "10", "--throughput", "-1",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("200 records sent, ")
    assert "records/sec (" in out.stdout and "ms 99.9th." in out.stdout
    got = gregor("consume", "-b", broker.bootstrap, "--topic", "perf-b", "--messages", "200")
    assert got.returncode == 0, got.stderr
    header, row, latency = got.stdout.splitlines()
    assert header.split(", ") == [
        "start.time", "end.time", "data.consumed.in.MB", "MB.sec", "data.consumed.in.nMsg",
        "nMsg.sec", "rebalance.time.ms", "fetch.time.ms", "fetch.MB.sec", "fetch.nMsg.sec",
    ]  # fmt: skip
    assert row.split(", ")[4] == "200"
    assert latency.startswith("latency (receive time minus record timestamp): ")


def test_payload_file_records_are_its_lines(broker, tmp_path):
    create_topic(broker, "perf-c", 1)
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha\nbeta-beta\n\ngamma gamma gamma\n")
    out = gregor(
        "produce", "-b", broker.bootstrap, "--topic", "perf-c", "--num-records", "300",
        "--payload-file", str(payloads), "--output", "json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    got = values(broker, "perf-c", 300)
    assert len(got) == 300 and figures["records"] == 300
    assert set(got) == {b"alpha", b"beta-beta", b"gamma gamma gamma"}
    assert figures["bytes"] == sum(len(v) for v in got)


def test_config_files_are_merged_into_the_client(broker, tmp_path):
    create_topic(broker, "perf-d", 1)
    producer_config = tmp_path / "producer.properties"
    producer_config.write_text(f"# as Kafka's\nbootstrap.servers={broker.bootstrap}\nacks=1\n")
    out = gregor(
        "produce", "--producer.config", str(producer_config), "--topic", "perf-d",
        "--num-records", "100", "--record-size", "8", "--output", "json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["records"] == 100
    assert sum(end_offsets(broker, "perf-d", 1)) == 100

    command_config = tmp_path / "client.properties"
    command_config.write_text("no.such.client.property=1\n")
    bad = gregor(
        "consume", "-b", broker.bootstrap, "--command-config", str(command_config),
        "--topic", "perf-d", "--messages", "1",
    )  # fmt: skip
    one_line_error(
        bad,
        f"bad client setting (from --command-config {command_config}): "
        'no such configuration property: "no.such.client.property"',
    )


def test_unreachable_bootstrap_is_one_line_within_the_timeout():
    (port,) = free_ports(1)
    for verb, count in (("produce", "--num-records"), ("consume", "--messages")):
        extra = ["--record-size", "10"] if verb == "produce" else []
        started = time.monotonic()
        out = gregor(
            verb, "-b", f"127.0.0.1:{port}", "--topic", "t", count, "5", "--timeout", "2000",
            *extra,
        )  # fmt: skip
        assert time.monotonic() - started < 15
        one_line_error(out, f"cannot reach 127.0.0.1:{port} (connection refused)")


def test_unknown_topic_and_bad_values_are_one_line(broker, tmp_path):
    out = gregor("consume", "-b", broker.bootstrap, "--topic", "perf-none", "--messages", "5")
    one_line_error(
        out, "topic perf-none does not exist (create it: gregor topics create perf-none)"
    )
    out = gregor(
        "produce", "-b", broker.bootstrap, "--topic", "perf-none", "--num-records", "5",
        "--record-size", "5", "--producer-props", "acks",
    )  # fmt: skip
    one_line_error(out, "--producer-props expects KEY=VALUE, got 'acks' (e.g. acks=1)")
    missing = tmp_path / "missing.txt"
    out = gregor(
        "produce", "-b", broker.bootstrap, "--topic", "perf-none", "--num-records", "5",
        "--payload-file", str(missing),
    )  # fmt: skip
    one_line_error(out, f"--payload-file {missing}: No such file or directory")


def test_consume_timeout_reports_what_was_received(broker):
    create_topic(broker, "perf-e", 1)
    out = gregor(
        "produce", "-b", broker.bootstrap, "--topic", "perf-e", "--num-records", "50",
        "--record-size", "10",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    got = gregor(
        "consume", "-b", broker.bootstrap, "--topic", "perf-e", "--messages", "80",
        "--timeout", "2000", "--output", "json",
    )  # fmt: skip
    assert json.loads(got.stdout)["records"] == 50
    one_line_error(got, "no record for 2000 ms (--timeout): received 50 of 80 records")


def test_ctrl_c_waits_for_what_was_sent_and_prints_the_figures(broker):
    create_topic(broker, "perf-f", 1)
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "gregor", "perf", "produce", "-b", broker.bootstrap,
            "--topic", "perf-f", "--num-records", "100000", "--record-size", "10",
            "--throughput", "200", "--output", "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    # wait until some records are in the log, then interrupt
    deadline = time.monotonic() + 30
    while sum(end_offsets(broker, "perf-f", 1)) < 100 and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    figures = json.loads(out)
    assert 100 <= figures["records"] < 100000
    assert sum(end_offsets(broker, "perf-f", 1)) == figures["records"]


def test_a_closed_stdout_ends_quietly(broker):
    create_topic(broker, "perf-g", 1)
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "gregor", "perf", "produce", "-b", broker.bootstrap,
            "--topic", "perf-g", "--num-records", "10", "--record-size", "10",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    proc.stdout.close()  # as `| head -0` would, before the figures are printed
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert err == b""
