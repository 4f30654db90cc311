"""Protocol errors on raw sockets, against a private broker with socket.request.max.bytes at
1 MiB: every bad frame closes that connection only, and the broker logs the client address and
the reason, while a confluent-kafka producer and consumer on their own connections carry on.

Requests are encoded by hand with struct (an oracle independent of gregor's codec):
    int32 size | int16 api_key | int16 api_version | int32 correlation_id |
    int16 client_id length + bytes | body
"""

from __future__ import annotations

import re
import socket
import struct
import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from client_helpers import (
    consumer_conf,
    frame,
    parse_api_versions_v0,
    recv_frame,
    request_header,
    wait_until,
)

from gregor import Broker

MAX_REQUEST = 1_048_576
WITNESS = "witness"


class Witness:
    """A confluent producer and consumer kept open for the whole module: after each bad frame
    a record must still go through them, on their existing connections."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.consumer = ck.Consumer(consumer_conf(bootstrap, **{"fetch.wait.max.ms": 100}))
        self.consumer.assign([ck.TopicPartition(WITNESS, 0, 0)])
        self.next_offset = 0

    def roundtrip(self, label: str) -> None:
        errors: list = []
        self.producer.produce(
            WITNESS, value=label.encode(), partition=0, on_delivery=lambda e, m: errors.append(e)
        )
        assert self.producer.flush(10) == 0 and errors == [None], (
            f"{label}: produce failed {errors}"
        )
        deadline = time.monotonic() + 10
        while True:
            assert time.monotonic() < deadline, f"{label}: witness consumer got nothing"
            m = self.consumer.poll(0.1)
            if m is None:
                continue
            assert m.error() is None, f"{label}: witness consumer error {m.error()}"
            assert (m.offset(), m.value()) == (self.next_offset, label.encode())
            self.next_offset += 1
            return

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(5)


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(config={"socket.request.max.bytes": str(MAX_REQUEST)}, log_level="INFO") as b:
        yield b


@pytest.fixture(scope="module")
def witness(broker: Broker) -> Iterator[Witness]:
    w = Witness(broker.bootstrap)
    w.roundtrip("start")  # auto-creates the topic, connects
    yield w
    w.close()


OUR_PEERS: set[str] = set()  # client addresses of every raw socket these tests opened


def connect(broker: Broker) -> socket.socket:
    s = socket.create_connection((broker.host, broker.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    OUR_PEERS.add(peer_of(s))
    return s


def peer_of(s: socket.socket) -> str:
    """How the broker names this client: its address as "host:port"."""
    host, port = s.getsockname()[:2]
    return f"{host}:{port}"


def assert_closed_by_broker(s: socket.socket) -> None:
    """The broker closes the connection: recv sees EOF or a reset, and no response."""
    s.settimeout(10)
    try:
        data = s.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return
    except TimeoutError:
        raise AssertionError("the broker kept the connection open for 10 s") from None
    assert data == b"", f"the broker answered a bad frame with {data[:64]!r}"


def closed_line(broker: Broker, peer: str, reason: str) -> str:
    """The broker's log line about closing `peer`'s connection, which must match `reason`."""

    def find() -> str | None:
        for line in broker.read_log().splitlines():
            if peer in line and re.search(reason, line, re.IGNORECASE):
                return line
        return None

    try:
        return wait_until(find, 5, f"a log line naming {peer} and /{reason}/")
    except AssertionError:
        mine = [line for line in broker.read_log().splitlines() if peer in line]
        raise AssertionError(
            f"no log line naming {peer} and matching /{reason}/; lines naming it: {mine}"
        ) from None


def metadata_v1(corr: int, body: bytes) -> bytes:
    return request_header(3, 1, corr) + body


# name -> (bytes to send, a regex the broker's log line must match besides the client address)
BAD_FRAMES = {
    # A served API and version, body garbage: a topic array claiming 2^31-1 entries.
    "garbage-body": (
        frame(metadata_v1(1, b"\x7f\xff\xff\xff" + b"\xab" * 16)),
        r"malformed|corrupt|invalid",
    ),
    # Bytes that are no request at all (api key 0xdead).
    "garbage-frame": (frame(b"\xde\xad\xbe\xef" * 8), r"api key|malformed|unknown"),
    # A 3-byte frame: not even api_key, api_version, correlation_id.
    "truncated-header": (frame(b"\x00\x03\x00"), r"malformed|truncat|short|needs"),
    # client_id length says 1000 bytes; the frame holds 5.
    "client-id-past-end": (
        frame(struct.pack(">hhih", 18, 0, 1, 1000) + b"tests"),
        r"malformed|truncat|past|needs",
    ),
    # Metadata v1: one topic whose name length says 500 bytes; 3 follow.
    "string-past-end": (
        frame(metadata_v1(1, struct.pack(">ih", 1, 500) + b"abc")),
        r"malformed|truncat|past|needs",
    ),
    # A Produce with 0 of its body bytes.
    "empty-body": (frame(request_header(0, 9, 1)), r"malformed|truncat|needs"),
    # Size prefix above socket.request.max.bytes (the rest never comes).
    "oversized": (
        struct.pack(">i", MAX_REQUEST + 1) + b"\x00" * 64,
        r"socket\.request\.max\.bytes",
    ),
    "oversized-2GiB": (struct.pack(">i", 0x7FFFFFFF), r"socket\.request\.max\.bytes"),
    "negative-size": (struct.pack(">i", -5) + b"\x00" * 8, r"negative|invalid"),
    # An API key Kafka does not have, and one it has that this broker does not serve
    # (57 UpdateFeatures), each a well-formed header.
    "unknown-api-key": (frame(request_header(9999, 0, 1)), r"\b9999\b"),
    "unserved-api-key": (frame(request_header(57, 0, 1)), r"\b57\b|UpdateFeatures"),
    # A served API at a version below its range (Produce v2; Kafka 4 serves v3+).
    "unsupported-version": (frame(request_header(0, 2, 1) + b"\x00" * 16), r"v2|version"),
}


@pytest.mark.parametrize("case", list(BAD_FRAMES))
def test_bad_frame_closes_only_that_connection(broker: Broker, witness: Witness, case: str) -> None:
    payload, reason = BAD_FRAMES[case]
    s = connect(broker)
    peer = peer_of(s)
    try:
        s.sendall(payload)
        assert_closed_by_broker(s)
    finally:
        s.close()
    closed_line(broker, peer, reason)
    assert broker.process is not None and broker.process.poll() is None, "the broker died"
    witness.roundtrip(case)


def test_bad_frame_after_good_requests(broker: Broker, witness: Witness) -> None:
    """Responses to the requests before a bad frame still arrive, then the connection closes."""
    s = connect(broker)
    try:
        s.sendall(
            frame(request_header(18, 0, 41))
            + frame(request_header(18, 1, 42))
            + frame(b"\x00\x03\x00")
        )
        corr, err, _ = parse_api_versions_v0(recv_frame(s))
        assert (corr, err) == (41, 0)
        v1 = recv_frame(s)
        assert struct.unpack_from(">ih", v1) == (42, 0)
        assert_closed_by_broker(s)
    finally:
        s.close()
    witness.roundtrip("after-good")


def test_many_bad_connections_at_once(broker: Broker, witness: Witness) -> None:
    socks = [connect(broker) for _ in range(20)]
    try:
        for i, s in enumerate(socks):
            s.sendall(list(BAD_FRAMES.values())[i % len(BAD_FRAMES)][0])
        for s in socks:
            assert_closed_by_broker(s)
    finally:
        for s in socks:
            s.close()
    witness.roundtrip("after-many")


def test_half_sent_frame_then_client_closes(broker: Broker, witness: Witness) -> None:
    """A size prefix promising more than is ever sent, then the client goes away: the broker
    drops the partial frame without harm."""
    s = connect(broker)
    s.sendall(struct.pack(">i", 1000) + b"\x00\x12\x00\x00")
    s.close()
    witness.roundtrip("after-half-frame")


# -- ApiVersions ---------------------------------------------------------------------------------


def test_api_versions_unknown_version_gets_v0_error_response(
    broker: Broker, witness: Witness
) -> None:
    s = connect(broker)
    try:
        s.sendall(frame(request_header(18, 99, 1234)))
        corr, err, apis = parse_api_versions_v0(recv_frame(s))
        assert corr == 1234
        assert err == 35  # UNSUPPORTED_VERSION
        assert apis[18][0] == 0 and apis[18][1] >= 3  # ApiVersions itself, so the client can retry
        assert apis[0][0] <= 3 <= apis[0][1] and apis[1][0] <= 4 <= apis[1][1] and 3 in apis
        # The connection stays usable: retry with v0, get the same table without error.
        s.sendall(frame(request_header(18, 0, 1235)))
        corr, err, apis0 = parse_api_versions_v0(recv_frame(s))
        assert (corr, err, apis0) == (1235, 0, apis)
    finally:
        s.close()
    witness.roundtrip("after-apiversions-99")


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _api_versions_v3(corr: int, name: bytes, version: bytes) -> bytes:
    # Header v2: the v1 fields plus an empty tag buffer; body: compact strings, empty tag buffer.
    body = bytes([len(name) + 1]) + name + bytes([len(version) + 1]) + version + b"\x00"
    return frame(request_header(18, 3, corr) + b"\x00" + body)


def test_api_versions_v3_flexible(broker: Broker) -> None:
    s = connect(broker)
    try:
        s.sendall(_api_versions_v3(7, b"gregor-tests", b"1.0"))
        data = recv_frame(s)
        corr, err = struct.unpack_from(">ih", data)  # response header v0 even for v3 (KIP-511)
        assert (corr, err) == (7, 0)
        n, pos = _uvarint(data, 6)
        apis = {}
        for _ in range(n - 1):
            key, lo, hi = struct.unpack_from(">hhh", data, pos)
            apis[key] = (lo, hi)
            assert data[pos + 6] == 0  # no tagged fields
            pos += 7
        (throttle,) = struct.unpack_from(">i", data, pos)
        assert throttle == 0 and apis[18] == (0, 4)
        # An invalid client software name: INVALID_REQUEST (42), still answered.
        s.sendall(_api_versions_v3(8, b"bad name!", b"1.0"))
        data = recv_frame(s)
        assert struct.unpack_from(">ih", data) == (8, 42)
    finally:
        s.close()


def test_responses_in_request_order(broker: Broker, witness: Witness) -> None:
    """A long-poll fetch followed by an ApiVersions in one write: the ApiVersions answer is
    ready first but leaves after the fetch's, in request order."""
    topic = WITNESS.encode()
    fetch_body = struct.pack(">iiiib", -1, 400, 1, 1 << 20, 0)
    # At the log end, so the fetch waits its 400 ms.
    fetch_body += (
        struct.pack(">ih", 1, len(topic))
        + topic
        + struct.pack(">iiqi", 1, 0, witness.next_offset, 1 << 20)
    )
    s = connect(broker)
    try:
        t0 = time.monotonic()
        s.sendall(frame(request_header(1, 4, 501) + fetch_body) + frame(request_header(18, 0, 502)))
        first = recv_frame(s)
        waited = time.monotonic() - t0
        second = recv_frame(s)
        assert struct.unpack_from(">i", first)[0] == 501
        assert struct.unpack_from(">i", second)[0] == 502
        assert 0.3 < waited < 5, f"the long-poll fetch was answered after {waited:.3f}s"
    finally:
        s.close()


def test_no_collateral_closes(broker: Broker, witness: Witness) -> None:
    """Every connection the broker closed with a reason was one of ours (this module's bad
    frames, run before this test, plus one of its own), never the witness's; and no tracebacks."""
    s = connect(broker)
    s.sendall(BAD_FRAMES["garbage-body"][0])
    assert_closed_by_broker(s)
    closed_line(broker, peer_of(s), "malformed|corrupt|invalid")
    s.close()
    witness.roundtrip("final")
    log = broker.read_log()
    closed = re.findall(r"closing connection from (\S+?):? ", log)
    assert closed, "the broker logged no closed connections at all"
    assert set(closed) <= OUR_PEERS, (
        f"closed connections that were not ours: {set(closed) - OUR_PEERS}"
    )
    problems = [
        line for line in broker.read_log().splitlines() if "Traceback" in line or " ERROR " in line
    ]
    assert problems == [], problems
