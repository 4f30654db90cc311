"""Shared helpers for the real-client tests: deadlines, topics, and reading everything back.

A record everywhere here is `Rec(partition, offset, key, value, headers, timestamp)` with
headers a list of (str, bytes | None) pairs in wire order, so that records from every client
compare equal field by field.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar

import confluent_kafka as ck

SHARED_PARTITIONS = 4
T = TypeVar("T")


class Rec(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int


def wait_until(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `pred` until it returns something truthy; fail with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = pred()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - reported on timeout
            last_exc = exc
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what} (last error: {last_exc!r})"
            )
        time.sleep(interval)


def broker_log_problems(text: str) -> list[str]:
    """Lines of a broker log at WARNING or above, and tracebacks."""
    return [
        line
        for line in text.splitlines()
        if " WARNING " in line or " ERROR " in line or " CRITICAL " in line or "Traceback" in line
    ]


# -- confluent-kafka ----------------------------------------------------------------------------


def ensure_topic(
    bootstrap: str, topic: str, partitions: int = SHARED_PARTITIONS, timeout: float = 15.0
) -> None:
    """Have the broker auto-create `topic` (a producer's metadata request asks for it) and wait
    until every partition has a leader."""
    p = ck.Producer({"bootstrap.servers": bootstrap})

    def ready() -> bool:
        md = p.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        return (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(pm.leader >= 0 for pm in t.partitions.values())
        )

    wait_until(ready, timeout, f"topic {topic} with {partitions} partitions")


class DeliveryLog:
    """Delivery-report callback for confluent-kafka producers: every ack and every error."""

    def __init__(self) -> None:
        self.acked: list[tuple[int, int, bytes | None]] = []  # (partition, offset, value)
        self.errors: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))


def produce_all(
    producer: ck.Producer, topic: str, recs: Iterable[dict[str, Any]], on_delivery: Any = None
) -> None:
    """Produce each dict of produce() arguments, waiting for queue space instead of failing."""
    for r in recs:
        while True:
            try:
                producer.produce(topic, on_delivery=on_delivery, **r)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)


def confluent_rec(m: Any) -> Rec:
    ts_type, ts = m.timestamp()
    assert ts_type == ck.TIMESTAMP_CREATE_TIME, (
        f"timestamp type {ts_type} at {m.partition()}/{m.offset()}"
    )
    return Rec(m.partition(), m.offset(), m.key(), m.value(), list(m.headers() or []), ts)


def consumer_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        # Consumer groups are not served yet: a group.id is required by the client, but we only
        # assign() and never subscribe or commit.
        "group.id": "gregor-client-tests-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
    }
    conf.update(extra)
    return conf


def consume_confluent(
    bootstrap: str,
    topic: str,
    partitions: Iterable[int],
    count: int,
    timeout: float = 60.0,
    start_offset: int = ck.OFFSET_BEGINNING,
    **extra: Any,
) -> list[Rec]:
    """Read exactly `count` records from the given partitions (from `start_offset`); fail on a
    consumer error or if fewer arrive before the deadline. Also checks nothing more arrives
    in a short grace period after the count is reached."""
    c = ck.Consumer(consumer_conf(bootstrap, **extra))
    try:
        c.assign([ck.TopicPartition(topic, p, start_offset) for p in partitions])
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"read {len(out)} of {count} records from {topic} in {timeout}s"
                )
            for m in c.consume(10000, 0.2):
                if m.error():
                    raise AssertionError(f"consumer error: {m.error()}")
                out.append(confluent_rec(m))
        # Nothing beyond what was produced.
        extra_msgs = [m for m in c.consume(1000, 0.3) if not m.error()]
        assert not extra_msgs, (
            f"{len(extra_msgs)} unexpected extra records, first {confluent_rec(extra_msgs[0])}"
        )
        assert len(out) == count, (
            f"read {len(out)} records, expected {count}; extra from {out[count]}"
        )
        return out
    finally:
        c.close()


def by_partition(recs: Iterable[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {}
    for r in recs:
        out.setdefault(r.partition, []).append(r)
    return out


def check_exact(got: list[Rec], expected: dict[int, list[tuple[Any, ...]]]) -> None:
    """`expected`: partition -> [(key, value, headers, timestamp)] in produce order. Checks every
    field, the order within each partition, and that offsets are dense from 0."""
    parts = by_partition(got)
    assert sorted(parts) == sorted(p for p, v in expected.items() if v), (
        "partitions with data differ"
    )
    for p, exp in expected.items():
        recs = parts.get(p, [])
        assert [r.offset for r in recs] == list(range(len(exp))), (
            f"partition {p}: offsets not dense from 0"
        )
        assert len(recs) == len(exp), f"partition {p}: {len(recs)} records, expected {len(exp)}"
        for r, (key, value, headers, ts) in zip(recs, exp, strict=True):
            actual = (r.key, r.value, r.headers, r.timestamp)
            assert actual == (key, value, headers, ts), (
                f"partition {p} offset {r.offset}: {actual!r} != {(key, value, headers, ts)!r}"
            )


# -- raw protocol ---------------------------------------------------------------------------------


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def recv_frame(sock: socket.socket) -> bytes:
    """One response frame, without its size prefix."""
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    return recv_exact(sock, size)


def request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: bytes = b"tests"
) -> bytes:
    """RequestHeader v1 (non-flexible): api_key, api_version, correlation_id, client_id."""
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def parse_api_versions_v0(frame_: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """(correlation id, error code, {api_key: (min, max)}) of an ApiVersions v0-format response."""
    corr, err, n = struct.unpack_from(">ihi", frame_, 0)
    apis = {}
    for i in range(n):
        key, lo, hi = struct.unpack_from(">hhh", frame_, 10 + 6 * i)
        apis[key] = (lo, hi)
    assert len(frame_) == 10 + 6 * n, "trailing bytes after the api list"
    return corr, err, apis


def served_apis(bootstrap: str) -> dict[int, tuple[int, int]]:
    """The broker's ApiVersions table, asked on a raw socket with ApiVersions v0."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(frame(request_header(18, 0, 7)))
        corr, err, apis = parse_api_versions_v0(recv_frame(s))
    assert (corr, err) == (7, 0)
    return apis


INIT_PRODUCER_ID = 22
