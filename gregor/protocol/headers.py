"""Request and response headers, and which header version goes with which (api, version).

    RequestHeader v1 => request_api_key:int16 request_api_version:int16 correlation_id:int32
                        client_id:nullable_string          (int16 length, -1 for null)
    RequestHeader v2 => RequestHeader v1 TAG_BUFFER        (client_id stays non-compact)
    ResponseHeader v0 => correlation_id:int32
    ResponseHeader v1 => correlation_id:int32 TAG_BUFFER

A flexible request version uses request header v2 and response header v1; others v1 and v0.
The exception is ApiVersions, whose response header is always v0, so that a client that sent
a version the broker does not know can still read the error (KIP-511). The flexibility of a
version above the highest we declare is that of our highest, as in Kafka (flexible versions
are always open-ended). Request header v0 (no client_id) is only used by ControlledShutdown
v0, which Kafka 4 no longer serves; we do not read it.
"""

from __future__ import annotations

import struct

from gregor.protocol.codegen import uvarint_bytes
from gregor.protocol.exceptions import CorruptFrameError
from gregor.protocol.schema import APIS

API_VERSIONS_KEY = 18

# The first flexible version of each API we declare (absent: never flexible).
FLEXIBLE_FROM: dict[int, int] = {
    key: a.flexible.low for key, a in APIS.items() if not a.flexible.is_empty()
}

_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")


class RequestHeader:
    """A decoded request header (the same fields as Kafka's RequestHeader, snake_case)."""

    __slots__ = ("request_api_key", "request_api_version", "correlation_id", "client_id")

    def __init__(
        self,
        request_api_key: int,
        request_api_version: int,
        correlation_id: int,
        client_id: str | None = None,
    ) -> None:
        self.request_api_key = request_api_key
        self.request_api_version = request_api_version
        self.correlation_id = correlation_id
        self.client_id = client_id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RequestHeader):
            return NotImplemented
        return (
            self.request_api_key == other.request_api_key
            and self.request_api_version == other.request_api_version
            and self.correlation_id == other.correlation_id
            and self.client_id == other.client_id
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"RequestHeader(request_api_key={self.request_api_key}, "
            f"request_api_version={self.request_api_version}, "
            f"correlation_id={self.correlation_id}, client_id={self.client_id!r})"
        )


def is_flexible(api_key: int, api_version: int) -> bool:
    first = FLEXIBLE_FROM.get(api_key)
    return first is not None and api_version >= first


def request_header_version(api_key: int, api_version: int) -> int:
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


def peek_request(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request frame."""
    if len(frame) < 8:
        raise CorruptFrameError(f"request header: needs 8 bytes, frame has {len(frame)}")
    key, version, correlation = _KEY_VERSION_CORRELATION.unpack_from(frame, 0)
    return key, version, correlation


def decode_request_header(mv: memoryview, end: int) -> tuple[RequestHeader, int]:
    """The header at the start of a request frame, and the offset where the body starts."""
    if end < 10:
        raise CorruptFrameError(f"request header: needs 10 bytes, frame has {end}")
    key, version, correlation = _KEY_VERSION_CORRELATION.unpack_from(mv, 0)
    (n,) = _INT16.unpack_from(mv, 8)
    pos = 10
    client_id: str | None
    if n == -1:
        client_id = None
    elif n < 0:
        raise CorruptFrameError(f"request header: client_id: bad string length {n} at offset 8")
    elif n > end - pos:
        raise CorruptFrameError(
            f"request header: client_id: needs {n} bytes at offset 10, only {end - pos} left"
        )
    else:
        try:
            client_id = str(mv[pos : pos + n], "utf-8")
        except UnicodeDecodeError as e:
            raise CorruptFrameError(f"request header: client_id: {e}") from None
        pos += n
    if is_flexible(key, version):
        pos = skip_request_header_tags(mv, pos, end)
    return RequestHeader(key, version, correlation, client_id), pos


def _read_uvarint(mv: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 35, 7):
        if pos >= end:
            raise CorruptFrameError(f"request header: tagged fields: truncated at offset {pos}")
        b = mv[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
    raise CorruptFrameError(f"request header: tagged fields: varint too long at offset {pos}")


def skip_request_header_tags(mv: memoryview, pos: int, end: int) -> int:
    count, pos = _read_uvarint(mv, pos, end)
    for _ in range(count):
        _tag, pos = _read_uvarint(mv, pos, end)
        size, pos = _read_uvarint(mv, pos, end)
        if size > end - pos:
            raise CorruptFrameError(
                f"request header: tagged field of {size} bytes at offset {pos}, "
                f"only {end - pos} left"
            )
        pos += size
    return pos


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None
) -> bytearray:
    """The header bytes (no size prefix) for a request of this api and version."""
    buf = bytearray(_KEY_VERSION_CORRELATION.pack(api_key, api_version, correlation_id))
    if client_id is None:
        buf += b"\xff\xff"
    else:
        raw = client_id.encode()
        buf += _INT16.pack(len(raw))
        buf += raw
    if is_flexible(api_key, api_version):
        buf += uvarint_bytes(0)
    return buf
