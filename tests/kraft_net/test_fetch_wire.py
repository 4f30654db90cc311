"""KRaft's Fetch v17 written and read straight (raft/fetch_wire.py): the same bytes as the
generated codec's for the same message, the same reading of any bytes, other shapes left to it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from gregor.protocol import api_keys, codec, errors
from gregor.protocol.records.records import build_batch
from gregor.raft import fetch_wire, wire
from gregor.raft import messages as m
from gregor.raft.log import Batch, SnapshotId

FETCH = api_keys.FETCH
V = fetch_wire.VERSION
INCONSISTENT = errors.BY_NAME["INCONSISTENT_CLUSTER_ID"].code
FENCED = errors.BY_NAME["FENCED_LEADER_EPOCH"].code
REQ: Any = codec.message_class(FETCH, "request")
RESP: Any = codec.message_class(FETCH, "response")

KEPT = bytes(
    build_batch([(None, b"t" * 180), (None, b"p" * 90)], base_offset=40, partition_leader_epoch=9)
)
BATCHES = (
    Batch(100, 8, (b"leader-change",), control=True),
    Batch(101, 8, (b"a", b"", b"c" * 300)),
)

RESPONSES = [
    m.FetchResponse(
        errors.NONE,
        1,
        9,
        38,
        0,
        (Batch(40, 9, (b"t" * 180, b"p" * 90), False, KEPT),),
        None,
        None,
        5,
    ),
    m.FetchResponse(errors.NONE, 1, 9, 104, 0, BATCHES, None, None, 5),
    m.FetchResponse(errors.NONE, 1, 9, 42, 0, (), None, None, 5),
    m.FetchResponse(errors.NONE, 1, 9, 1 << 40, 1 << 33, (), None, None, 5),
    m.FetchResponse(errors.NONE, 1, 9, -1, 0, (), m.EpochEndOffset(7, 90), None, 5),
    m.FetchResponse(errors.NONE, 1, 9, -1, 0, (), m.EpochEndOffset(-1, -1), None, 5),
    m.FetchResponse(errors.NONE, 1, 9, 500, 400, (), None, SnapshotId(400, 6), 5),
    m.FetchResponse(FENCED, 2, 10, -1, 0, (), None, None, 5),
    m.FetchResponse(INCONSISTENT, -1, 9, -1, 0, (), None, None, 5),
    m.FetchResponse(errors.NONE, -1, -1, -1, -1, (), None, None, 5),
]
ENDPOINTS = [None, (1, "localhost", 9093), (3, "h" * 200, 65535)]
REQUESTS = [
    m.FetchRequest("MkU3OEVBNTcwNTJENDM2Qk", 2, 9, 1000, 8, 0, 500, 8 << 20, 5),
    m.FetchRequest(None, 3, 1, 0, 0, 0, 0, 1024, 5),
    m.FetchRequest("clüster-" + "x" * 150, -1, 1 << 30, 1 << 50, 7, 1 << 40, 10, 1, 5),
    m.FetchRequest("", 7, -1, 0, -1, -1, 0, 0, 5),
]


def _split(message: m.FetchResponse) -> tuple[int, int]:
    return wire._split_error(message.error_code)


def _generic_response(message: m.FetchResponse, endpoint: tuple[int, str, int] | None) -> object:
    body = wire._fetch_response(RESP, message, *_split(message), V)
    if endpoint is not None:
        node, host, port = endpoint
        body.node_endpoints = [RESP.NodeEndpoint(node_id=node, host=host, port=port, rack=None)]
    return body


def _buffers(out: list[object]) -> list[bytes]:
    return [bytes(b) for b in out]  # type: ignore[call-overload]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("message", RESPONSES)
def test_response_bytes_are_the_generated_codecs(
    message: m.FetchResponse, endpoint: tuple[int, str, int] | None
) -> None:
    body = wire.to_response(message, V)
    assert isinstance(body, fetch_wire.FetchResponseBody)
    if endpoint is not None:
        wire.add_leader_endpoint(body, V, endpoint[0], endpoint[1], endpoint[2])
    fast = codec.encode_response(FETCH, V, 77, body)
    assert body._generic is None  # written straight, not through the generated body
    generic = codec.encode_response(FETCH, V, 77, _generic_response(message, endpoint))
    assert _buffers(fast) == _buffers(generic)  # records stay their own buffer, as before
    # Read back by the shortcut, as the generated decoder reads it.
    _cid, view = codec.decode_response(FETCH, V, codec.join(fast)[4:])
    assert type(view) is fetch_wire.FetchResponseView
    decoded = codec.decode_body(FETCH, V, "response", codec.join(generic)[9:])
    assert wire.from_response(FETCH, V, view, 5) == wire.from_response(FETCH, V, decoded, 5)
    assert view.responses == decoded.responses  # and it reads as the generated body
    assert wire.node_endpoints(view) == ({endpoint[0]: endpoint[1:]} if endpoint else {})


@pytest.mark.parametrize("message", REQUESTS)
def test_request_bytes_are_the_generated_codecs(message: m.FetchRequest) -> None:
    key, version, body = wire.to_request(message)
    assert (key, version) == (FETCH, V) and isinstance(body, fetch_wire.FetchRequestBody)
    fast = codec.join(codec.encode_request(FETCH, V, 8, "raft-2", body))
    assert body._generic is None
    generic = codec.join(
        codec.encode_request(FETCH, V, 8, "raft-2", wire._fetch_request(REQ, message))
    )
    assert fast == generic
    _header, view = codec.decode_request(fast[4:])
    assert type(view) is fetch_wire.FetchRequestView
    assert wire.from_request(FETCH, V, view, 5) == message
    assert view.topics == codec.decode_body(FETCH, V, "request", _body_of(fast)).topics


def _body_of(request_frame: bytes) -> bytes:
    """The body of an encoded request (size prefix and header v2 of client id "raft-2" off)."""
    return request_frame[4 + 10 + len("raft-2") + 1 :]


def test_a_changed_body_is_encoded_as_changed() -> None:
    _key, _version, body = wire.to_request(REQUESTS[0])
    body.topics[0].partitions[0].fetch_offset = 4711
    _header, decoded = codec.decode_request(
        codec.join(codec.encode_request(FETCH, V, 8, "raft-2", body))[4:]
    )
    assert wire.from_request(FETCH, V, decoded, 5) == m.FetchRequest(
        "MkU3OEVBNTcwNTJENDM2Qk", 2, 9, 4711, 8, 0, 500, 8 << 20, 5
    )


def _request_frame(body: object) -> bytes:
    return codec.join(codec.encode_request(FETCH, V, 8, "raft-2", body))[4:]


def _other_shapes() -> list[object]:
    """Fetch requests the shortcut leaves to the generated decoder."""
    base = wire._fetch_request(REQ, REQUESTS[0])
    bodies = []
    for change in (
        lambda b: setattr(b.topics[0], "topic_id", uuid.UUID(int=7)),
        lambda b: b.topics[0].partitions.append(b.topics[0].partitions[0]),
        lambda b: setattr(b.topics[0].partitions[0], "partition", 1),
        lambda b: setattr(b.topics[0].partitions[0], "replica_directory_id", uuid.UUID(int=9)),
        lambda b: setattr(b, "rack_id", "rack-a"),
        lambda b: b.forgotten_topics_data.append(
            REQ.ForgottenTopic(topic_id=uuid.UUID(int=3), partitions=[1])
        ),
        lambda b: setattr(b, "topics", []),
    ):
        body = wire._fetch_request(REQ, REQUESTS[0])
        change(body)
        bodies.append(body)
    assert base is not bodies[0]
    return bodies


@pytest.mark.parametrize("body", _other_shapes())
def test_other_request_shapes_decode_as_before(body: object) -> None:
    frame = _request_frame(body)
    _header, decoded = codec.decode_request(frame)
    assert type(decoded) is REQ and decoded == codec.decode_body(
        FETCH, V, "request", _body_of(b"size" + frame)
    )


def test_other_response_shapes_decode_as_before() -> None:
    """A broker's replica fetch answer (another topic id), aborted transactions, two topics."""
    for change in (
        lambda b: setattr(b.responses[0], "topic_id", uuid.UUID(int=7)),
        lambda b: setattr(
            b.responses[0].partitions[0],
            "aborted_transactions",
            [RESP.AbortedTransaction(producer_id=1, first_offset=2)],
        ),
        lambda b: b.responses.append(b.responses[0]),
        lambda b: setattr(
            b, "node_endpoints", [RESP.NodeEndpoint(node_id=1, host="h", port=1, rack="r")] * 2
        ),
    ):
        body = _generic_response(RESPONSES[0], None)
        change(body)
        frame = codec.join(codec.encode_response(FETCH, V, 1, body))[4:]
        _cid, decoded = codec.decode_response(FETCH, V, frame)
        generic = codec.decode_body(FETCH, V, "response", frame[5:])
        if type(decoded) is fetch_wire.FetchResponseView:  # endpoints with a rack: read straight
            assert wire.node_endpoints(decoded) == wire.node_endpoints(generic)
            assert wire.from_response(FETCH, V, decoded, 1) == wire.from_response(
                FETCH, V, generic, 1
            )
        else:
            assert type(decoded) is RESP and decoded == generic


def _outcome(decode, frame: bytes) -> object:
    try:
        return decode(frame)
    except Exception as e:  # noqa: BLE001 (the same error either way: CorruptFrameError, ...)
        return type(e), str(e)


def _mutations(frame: bytes) -> list[bytes]:
    """Every cut of the frame, and every byte of it set to 0x00, 0x7f, 0x80 and 0xff."""
    out = [frame[:cut] for cut in range(len(frame))]
    for i in range(len(frame)):
        for value in (0x00, 0x7F, 0x80, 0xFF):
            out.append(frame[:i] + bytes([value]) + frame[i + 1 :])
    return out


@contextmanager
def _without_shortcuts() -> Iterator[None]:
    """The generated decoders alone, as before the shortcuts."""
    saved = dict(codec._SHORTCUTS)
    codec._SHORTCUTS.clear()
    codec._REQUEST_DECODERS.clear()
    codec._RESPONSE_DECODERS.clear()
    try:
        yield
    finally:
        codec._SHORTCUTS.update(saved)
        codec._REQUEST_DECODERS.clear()
        codec._RESPONSE_DECODERS.clear()


def _read_response(f: bytes) -> object:
    _cid, decoded = codec.decode_response(FETCH, V, f)
    return type(decoded), wire.node_endpoints(decoded), wire.from_response(FETCH, V, decoded, 1)


def _read_request(f: bytes) -> object:
    _header, decoded = codec.decode_request(f)
    return type(decoded), wire.from_request(FETCH, V, decoded, 1)


def _same_reading(frames: list[bytes], read: Callable[[bytes], object]) -> None:
    straight = [_outcome(read, f) for f in frames]
    with _without_shortcuts():
        generated = [_outcome(read, f) for f in frames]
    read_straight = 0
    for frame, a, b in zip(frames, straight, generated, strict=True):
        if isinstance(a, tuple) and a[0] in (
            fetch_wire.FetchRequestView,
            fetch_wire.FetchResponseView,
        ):
            read_straight += 1
            a = a[1:]
            b = b[1:]  # type: ignore[index]
        assert a == b, frame
    assert read_straight > len(frames) // 4  # most damage leaves a readable shape


@pytest.mark.parametrize("message", [RESPONSES[0], RESPONSES[4], RESPONSES[6], RESPONSES[8]])
def test_damaged_responses_read_as_the_generated_decoder_reads_them(
    message: m.FetchResponse,
) -> None:
    body = wire.to_response(message, V)
    wire.add_leader_endpoint(body, V, 1, "localhost", 9093)
    _same_reading(
        _mutations(codec.join(codec.encode_response(FETCH, V, 1, body))[4:]), _read_response
    )


@pytest.mark.parametrize("message", REQUESTS[:3])
def test_damaged_requests_read_as_the_generated_decoder_reads_them(message: m.FetchRequest) -> None:
    _key, _version, body = wire.to_request(message)
    _same_reading(_mutations(_request_frame(body)), _read_request)
