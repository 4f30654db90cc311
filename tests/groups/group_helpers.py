"""Helpers for the consumer group tests: producing numbered records, confluent-kafka group
members driven from the test's thread, and waiting on conditions while they run.

A record's value is its number ("17"), produced round-robin over the partitions, so a test
knows exactly which records exist and can check each was consumed once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

T = TypeVar("T")

BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
    "num.partitions": "6",
}
SESSION_MS = 6000
FAST = {
    "session.timeout.ms": SESSION_MS,
    "heartbeat.interval.ms": 300,
    "max.poll.interval.ms": 30000,
    "topic.metadata.refresh.interval.ms": 2000,
    "fetch.wait.max.ms": 100,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "retry.backoff.ms": 50,
}


def wait_until(
    pred: Callable[[], T],
    timeout: float,
    what: str,
    pump: Callable[[], Any] | None = None,
    interval: float = 0.05,
) -> T:
    """Call `pump` (e.g. poll the consumers) and `pred` until `pred` is truthy; fail after
    `timeout` s naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        if pump is not None:
            pump()
        result = pred()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        if pump is None:
            time.sleep(interval)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(15)


def produce(bootstrap: str, topic: str, start: int, count: int, partitions: int) -> None:
    """Records start..start+count-1, record i to partition i % partitions; all acknowledged."""
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for i in range(start, start + count):
        while True:
            try:
                p.produce(
                    topic, value=str(i).encode(), partition=i % partitions, on_delivery=report
                )
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0, "records left unacknowledged"
    assert not errors, errors[:5]


class LogCounter:
    """Counts one client's librdkafka log lines that report given errors (a client's view of the
    group), by the error's name or by librdkafka's wording of it. librdkafka writes its log to
    stderr itself (no Python logger: a logger callback takes the GIL from librdkafka's threads,
    which can deadlock its close()); each line names the client as `<client.id>#consumer-N`."""

    PATTERNS = {
        "UNKNOWN_MEMBER_ID": ("UNKNOWN_MEMBER_ID", "Unknown member"),
        "ILLEGAL_GENERATION": ("ILLEGAL_GENERATION", "generation id is not valid"),
    }

    def __init__(self, client_id: str) -> None:
        self.tag = f"|{client_id}#"
        self.counts = dict.fromkeys(self.PATTERNS, 0)
        self.lines = 0

    def feed(self, stderr: str) -> None:
        """Count this client's lines in the captured stderr of the test."""
        for line in stderr.splitlines():
            if self.tag not in line:
                continue
            self.lines += 1
            for name, words in self.PATTERNS.items():
                if any(w in line for w in words):
                    self.counts[name] += 1


class Member:
    """A confluent-kafka consumer in a group, polled from the test thread by `pump`. It keeps
    every record it got and every assignment change its rebalance callbacks saw."""

    def __init__(self, bootstrap: str, group: str, topic: str, **conf: Any) -> None:
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **FAST,
        }
        config.update(conf)
        self.logs: LogCounter | None = None
        if "debug" in config:
            config.setdefault("client.id", f"member-{id(self)}")
            self.logs = LogCounter(str(config["client.id"]))
        self.consumer = ck.Consumer(config)
        self.records: list[tuple[int, int, int]] = []  # (partition, offset, number)
        self.assigns = 0
        self.revokes = 0
        self.errors: list[str] = []
        self.closed = False
        self.close_hangs = 0
        self.consumer.subscribe(
            [topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.assigns += 1

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self.revokes += 1

    def poll(self, timeout: float = 0.0) -> None:
        if self.closed:
            return
        for m in self.consumer.consume(500, timeout):
            if m.error():
                if m.error().code() != ck.KafkaError._PARTITION_EOF:
                    self.errors.append(str(m.error()))
                continue
            self.records.append((m.partition(), m.offset(), int(m.value())))

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def commit(self) -> None:
        self.consumer.commit(asynchronous=False)

    def close(self, timeout_s: float = 30.0) -> None:
        """Close (leaving the group), but never hang the suite: librdkafka's close() can block
        forever in its own termination (confluent-kafka-python issue #1667), so it runs on a
        daemon thread. A close that does not return is recorded in `close_hangs`; the broker
        then evicts the member after its session timeout, which the callers wait for anyway."""
        if not self.closed:
            t = threading.Thread(target=self.consumer.close, daemon=True)
            t.start()
            t.join(timeout_s)
            if t.is_alive():
                self.close_hangs += 1
            self.closed = True


def pump(members: Iterable[Member], timeout: float = 0.02) -> Callable[[], None]:
    live = list(members)

    def run() -> None:
        for m in live:
            m.poll(timeout)

    return run


def balanced(members: list[Member], partitions: int) -> bool:
    """Every member has partitions, none shared, all covered."""
    seen: list[int] = []
    for m in members:
        ps = m.partitions()
        if not ps:
            return False
        seen += ps
    return sorted(seen) == list(range(partitions))


def numbers(records: Iterable[tuple[int, int, int]]) -> list[int]:
    return sorted(n for _, _, n in records)


class ProcessMember:
    """`member_process.py` in a child process: its latest reported assignment, and SIGKILL."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, session_ms: int, instance: str | None = None
    ) -> None:
        import os
        import subprocess
        import sys
        import threading

        script = os.path.join(os.path.dirname(__file__), "member_process.py")
        args = [sys.executable, script, bootstrap, group, topic, str(session_ms)]
        if instance is not None:
            args.append(instance)
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.assignments: list[set[int]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("ASSIGNED"):
                parts = line.split()[1:]
                self.assignments.append({int(p) for p in parts[0].split(",")} if parts else set())

    def partitions(self) -> set[int]:
        return self.assignments[-1] if self.assignments else set()

    def kill(self) -> None:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
