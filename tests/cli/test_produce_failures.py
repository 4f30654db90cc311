"""`gregor produce`: a line too large for the topic is reported by number and size while the lines
around it are delivered (exit 1); Ctrl-C delivers what was read and says how many (exit 130)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.testing.broker import Broker


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker() as b:
        yield b


def create(broker: Broker, topic: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(15)


def values(broker: Broker, topic: str) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(out) < end and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
        return out
    finally:
        consumer.close()


def produce(broker: Broker, topic: str, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gregor", "produce", topic, "-b", broker.bootstrap],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_line_above_max_message_bytes_is_reported_and_the_others_delivered(
    broker: Broker,
) -> None:
    create(broker, "small", **{"max.message.bytes": "2000"})
    before = [f"a{i:03d}" + "a" * 296 for i in range(10)]  # 3,000 bytes: more than one batch
    after = [f"b{i:03d}" + "b" * 296 for i in range(10)]
    proc = produce(broker, "small", "\n".join([*before, "X" * 3000, *after]) + "\n")
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        "gregor: line 11 (3070 bytes as a record batch) is larger than max.message.bytes of "
        "small (2000 bytes): not sent",
        "gregor: 1 of 21 records were not delivered to small",
    ]
    assert proc.returncode == 1
    assert values(broker, "small") == [line.encode() for line in [*before, *after]]


def test_a_line_above_librdkafkas_own_limit_but_within_the_topics_is_delivered(
    broker: Broker,
) -> None:
    """librdkafka refuses records above 1,000,000 bytes unless told; the topic's default takes
    1,048,588."""
    create(broker, "big")
    lines = ["first", "Y" * 1_040_000, "last"]
    proc = produce(broker, "big", "\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "produced 3 records to big\n"
    assert values(broker, "big") == [line.encode() for line in lines]


def test_ctrl_c_delivers_what_was_read_and_says_how_many(broker: Broker) -> None:
    create(broker, "interrupted")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gregor", "produce", "interrupted", "-b", broker.bootstrap],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.write("".join(f"line {i}\n" for i in range(5)))
    proc.stdin.flush()  # stdin stays open: the command waits for more
    time.sleep(3)  # read, and (linger.ms 5) most likely sent already; flushed in any case
    proc.send_signal(signal.SIGINT)
    status = proc.wait(60)
    err = proc.stderr.read()
    proc.stdin.close()
    assert "Traceback" not in err
    assert err == "gregor: interrupted: 5 of the 5 records read were delivered to interrupted\n"
    assert status == 130
    assert values(broker, "interrupted") == [f"line {i}".encode() for i in range(5)]
