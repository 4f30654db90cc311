"""Headers, framing, the api table, and the ApiVersions unsupported-version rule."""

from __future__ import annotations

import struct

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as KioApiVersionsV0
from kio.schema.request_header.v1.header import RequestHeader as KioRequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioRequestHeaderV2
from kio.serial.readers import read_int32

from gregor.protocol import api_keys, codec, errors, headers
from gregor.protocol.exceptions import (
    CorruptFrameError,
    EncodeError,
    FrameTooLargeError,
    UnsupportedVersionError,
)
from gregor.protocol.framing import FrameSplitter, check_frame_size, read_frame_size
from gregor.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
)

from .kio_bridge import kio_decode, kio_encode


def _frame(buffers: list) -> bytearray:
    """The frame after its size prefix, checking the prefix."""
    raw = codec.join(buffers)
    (size,) = struct.unpack_from(">i", raw)
    assert size == len(raw) - 4 == codec.total_length(buffers) - 4
    return bytearray(raw[4:])


# ---------------------------------------------------------------------------------------------
# Header versions.


def test_header_versions() -> None:
    assert headers.request_header_version(3, 8) == 1
    assert headers.request_header_version(3, 9) == 2
    assert headers.response_header_version(3, 8) == 0
    assert headers.response_header_version(3, 9) == 1
    # ApiVersions: flexible from v3, but its response header is always v0.
    assert headers.request_header_version(18, 3) == 2
    assert headers.response_header_version(18, 3) == 0
    assert headers.response_header_version(18, 4) == 0
    # Above our max version, flexibility is that of our max (flexible versions are open-ended).
    assert headers.request_header_version(18, 9) == 2
    # An api we do not declare: header v1.
    assert headers.request_header_version(999, 0) == 1


@pytest.mark.parametrize("client_id", [None, "", "rdkafka", "é" * 40])
def test_request_header_bytes_match_kio(client_id: str | None) -> None:
    for version, kio_cls in ((8, KioRequestHeaderV1), (9, KioRequestHeaderV2)):
        ours = headers.encode_request_header(3, version, 12345, client_id)
        theirs = kio_encode(
            kio_cls(
                request_api_key=3,
                request_api_version=version,
                correlation_id=12345,
                client_id=client_id,
            )
        )
        assert bytes(ours) == theirs
        header, pos = headers.decode_request_header(memoryview(bytearray(ours)), len(ours))
        assert header == headers.RequestHeader(3, version, 12345, client_id)
        assert pos == len(ours)


def test_request_header_v2_skips_tagged_fields() -> None:
    raw = bytearray(struct.pack(">hhih", 3, 12, 7, 2) + b"id" + bytes([1, 5, 2]) + b"zz")
    header, pos = headers.decode_request_header(memoryview(raw), len(raw))
    assert header.client_id == "id" and pos == len(raw)


def test_response_headers() -> None:
    body = MetadataResponse()
    v8 = _frame(codec.encode_response(3, 8, 77, body))
    v9 = _frame(codec.encode_response(3, 9, 77, body))
    assert v8[:4] == v9[:4] == struct.pack(">i", 77)
    assert v9[4] == 0 and codec.decode_body(3, 9, "response", v9[5:]) == body
    assert codec.decode_body(3, 8, "response", v8[4:]) == body
    # ApiVersions v3: response header v0, straight into the body (error_code first).
    av = _frame(codec.encode_response(18, 3, 78, ApiVersionsResponse(error_code=35)))
    assert av[:6] == struct.pack(">ih", 78, 35)
    assert codec.decode_response(18, 3, av) == (78, ApiVersionsResponse(error_code=35))
    assert codec.decode_response(3, 9, v9) == (77, body)


def test_response_header_tagged_fields_are_skipped() -> None:
    body = MetadataResponse(throttle_time_ms=5)
    plain = _frame(codec.encode_response(3, 9, 77, body))
    tagged = plain[:4] + bytes([2, 0, 2]) + b"zz" + bytes([9, 0]) + plain[5:]  # two fields
    assert codec.decode_response(3, 9, plain) == codec.decode_response(3, 9, tagged) == (77, body)


@pytest.mark.parametrize("client_id", [None, "", "replica-fetcher-2"])
def test_encode_request_headers_name_each_request(client_id: str | None) -> None:
    """The same api, version and client id again and again, with any other in between."""
    for correlation_id in (1, 2):
        for key, version, other in ((1, 15, "x"), (3, 9, None), (1, 15, client_id)):
            frame = codec.join(codec.encode_request(key, version, correlation_id, other,
                                                    codec.message_class(key, "request")()))  # fmt: skip
            header, _ = codec.decode_request(memoryview(frame)[4:])
            assert header == headers.RequestHeader(key, version, correlation_id, other)


# ---------------------------------------------------------------------------------------------
# decode_request.


def test_decode_request_round_trip_with_records_as_views() -> None:
    records = bytes(range(256)) * 8
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)],
            )
        ],
    )
    buffers = codec.encode_request(0, 9, 42, "rdkafka", request)
    assert any(b is records for b in buffers)  # records are their own buffer, not copied
    frame = _frame(buffers)
    header, body = codec.decode_request(frame)
    assert header == headers.RequestHeader(0, 9, 42, "rdkafka")
    assert body == request
    view = body.topic_data[0].partition_data[0].records
    assert isinstance(view, memoryview) and view.obj is frame  # a slice of the frame, no copy
    frame[-1] ^= 0xFF
    assert view[-1] == frame[-1]


def test_decode_request_ignores_trailing_bytes() -> None:
    # librdkafka sends 3 extra bytes after some Metadata requests.
    frame = _frame(codec.encode_request(3, 4, 1, "rdkafka", MetadataRequest(topics=None)))
    header, body = codec.decode_request(frame + b"\x00\x00\x00")
    assert header.correlation_id == 1 and body.topics is None


def test_unsupported_version_detected_before_the_body() -> None:
    garbage = b"\xff" * 3
    for key, version in ((0, 2), (0, 13), (1, 3), (3, 14), (18, 5), (18, -1)):
        frame = bytearray(headers.encode_request_header(key, version, 9, "c") + garbage)
        with pytest.raises(UnsupportedVersionError) as info:
            codec.decode_request(frame)
        assert info.value.header == headers.RequestHeader(key, version, 9, "c")
        assert not api_keys.is_supported(key, version)


def test_unknown_api_key() -> None:
    frame = bytearray(headers.encode_request_header(999, 0, 9, None))
    with pytest.raises(UnsupportedVersionError, match="unsupported api key 999"):
        codec.decode_request(frame)


def test_short_request_frames() -> None:
    for raw in (b"", b"\x00\x03", b"\x00\x03\x00\x09\x00\x00\x00"):
        with pytest.raises(CorruptFrameError):
            codec.decode_request(bytearray(raw))
    frame = struct.pack(">hhih", 3, 9, 1, 10) + b"abc"  # client_id past the end
    with pytest.raises(CorruptFrameError, match="client_id"):
        codec.decode_request(bytearray(frame))


# ---------------------------------------------------------------------------------------------
# ApiVersions: the table, and the answer to a version above ours.


def test_api_table_matches_the_schemas() -> None:
    for entry in api_keys.SUPPORTED:
        api = codec.APIS.get(entry.key)
        assert api is not None, f"no schema for {entry.name}"
        assert api.name == entry.name
        assert entry.min_version in api.versions and entry.max_version in api.versions
    assert len({a.key for a in api_keys.SUPPORTED}) == len(api_keys.SUPPORTED)


def test_api_versions_fallback_is_v0_with_unsupported_version() -> None:
    frame = bytearray(headers.encode_request_header(18, 7, 5, "future-client") + b"\x00\x00")
    with pytest.raises(UnsupportedVersionError) as info:
        codec.decode_request(frame)
    correlation_id = info.value.header.correlation_id
    out = _frame(codec.encode_api_versions_fallback(correlation_id))
    cid, body = codec.decode_response(18, 0, out)
    assert cid == 5 and body.error_code == errors.UNSUPPORTED_VERSION == 35
    assert {(a.api_key, a.min_version, a.max_version) for a in body.api_keys} == {
        (a.key, a.min_version, a.max_version) for a in api_keys.SUPPORTED
    }
    # Header v0 (just the correlation id), and kio reads the rest as ApiVersionsResponse v0.
    assert read_int32(bytes(out), 0)[0] == 5
    theirs = kio_decode(KioApiVersionsV0, bytes(out[4:]))
    assert theirs.error_code.value == 35 and len(theirs.api_keys) == len(api_keys.SUPPORTED)


def test_api_versions_request_v3_decodes() -> None:
    buffers = codec.encode_request(
        18,
        3,
        1,
        "rdkafka",
        ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.3.0"),
    )
    header, body = codec.decode_request(_frame(buffers))
    assert body.client_software_name == "librdkafka"


# ---------------------------------------------------------------------------------------------
# Responses as buffers.


class FileSlice:
    """Stands in for the runtime's sendfile slice: not bytes-like, has a length."""

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd, self.position, self.length = fd, position, length

    def __len__(self) -> int:
        return self.length


def test_fetch_response_with_file_slices() -> None:
    slices = [FileSlice(7, i * 100, 1000 + i) for i in range(3)]
    response = FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t",
                partitions=[
                    FetchResponse.PartitionData(partition_index=i, high_watermark=5, records=s)
                    for i, s in enumerate(slices)
                ],
            )
        ]
    )
    for version in (4, 12, 16):
        buffers = codec.encode_response(1, version, 3, response)
        assert [b for b in buffers if isinstance(b, FileSlice)] == slices
        total = codec.total_length(buffers)
        (size,) = struct.unpack_from(">i", buffers[0])
        assert size == total - 4
        assert all(isinstance(b, FileSlice | bytearray) for b in buffers)
        # Replace each slice by its bytes and the frame decodes.
        raw = b"".join(bytes(len(b)) if isinstance(b, FileSlice) else bytes(b) for b in buffers)
        _cid, body = codec.decode_response(1, version, bytearray(raw[4:]))
        assert [len(p.records) for p in body.responses[0].partitions] == [1000, 1001, 1002]


def test_null_and_empty_records() -> None:
    for version in (4, 12):
        response = FetchResponse(
            responses=[
                FetchResponse.FetchableTopicResponse(
                    topic="t",
                    partitions=[
                        FetchResponse.PartitionData(records=None),
                        FetchResponse.PartitionData(records=b""),
                    ],
                )
            ]
        )
        buffers = codec.encode_response(1, version, 3, response)
        assert len(buffers) == 1
        _cid, body = codec.decode_response(1, version, bytearray(codec.join(buffers)[4:]))
        assert body.responses[0].partitions[0].records is None
        assert bytes(body.responses[0].partitions[1].records) == b""


def test_encode_errors_name_the_message() -> None:
    with pytest.raises(EncodeError, match="expected a MetadataResponse"):
        codec.encode_response(3, 9, 1, MetadataRequest())
    bad = MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(node_id=2**40)])
    with pytest.raises(EncodeError, match=r"brokers\[0\]\.node_id: 1099511627776 is out of range"):
        codec.encode_response(3, 9, 1, bad)
    bad = MetadataResponse(topics=[MetadataResponse.MetadataResponseTopic(name=None)])
    codec.encode_response(3, 12, 1, bad)  # nullable from v12
    with pytest.raises(
        EncodeError, match=r"topics\[0\]\.name: None, but the field is not nullable"
    ):
        codec.encode_response(3, 11, 1, bad)
    with pytest.raises(EncodeError, match="no version 14"):
        codec.encode_response(3, 14, 1, MetadataResponse())


# ---------------------------------------------------------------------------------------------
# Framing.


def test_frame_size_checks() -> None:
    assert read_frame_size(struct.pack(">i", 100), 1000) == 100
    with pytest.raises(FrameTooLargeError, match="socket.request.max.bytes"):
        read_frame_size(struct.pack(">i", 1001), 1000)
    with pytest.raises(FrameTooLargeError, match="negative"):
        check_frame_size(-5, 1000)


def test_frame_splitter_byte_by_byte() -> None:
    frames = [b"", b"a", b"hello" * 100]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    splitter = FrameSplitter(max_bytes=1000)
    got = []
    for i in range(len(stream)):
        got += [bytes(f) for f in splitter.feed(stream[i : i + 1])]
    assert got == frames and splitter.buffered_bytes == 0
    assert [bytes(f) for f in FrameSplitter(1000).feed(stream)] == frames
    with pytest.raises(FrameTooLargeError):
        FrameSplitter(max_bytes=10).feed(struct.pack(">i", 11))
