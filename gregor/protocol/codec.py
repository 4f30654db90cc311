"""The codec's entry points: frames in, (header, message) out; messages in, buffers out.

At import, every declared message gets its classes (see `codegen`); the per-version encode and
decode functions are generated on first use and cached (`compile_all()` does them all up
front, which the broker does at start-up so no request pays for it).

Broker side:
    header, request = decode_request(frame)          # frame: the bytes after the size prefix
    buffers = encode_response(api_key, api_version, header.correlation_id, response)
    writev(buffers)  # includes the 4-byte size prefix; total_length(buffers) is its length + 4

Client side (tests, tools, inter-broker): `encode_request`, `decode_response`.

Buffers: a list of bytearrays, plus each `records` value as its own element (a memoryview,
bytes, or a non-bytes object with `__len__` such as the runtime's FileSlice for sendfile).

Shortcuts, for a message shape a layer above sends and reads at a high rate (KRaft's Fetch of
`__cluster_metadata-0`): a body that is a `SelfEncoding` writes its own bytes, which must be
the generated encoder's bytes for the same message; `add_shortcut(api_key, version, kind, f)`
has the decoders of (api, version, kind) try `f(mv, pos, end)` first, which returns (body, pos)
for the shape it knows (a body that reads as the generated class would, field by field) or None
to leave the frame to the generated decoder (any other shape, and malformed bytes, which that
decoder then refuses as before).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from gregor.protocol import api_keys
from gregor.protocol.codegen import Data, Decoder, EncodedArray, Encoder, MessageCodec
from gregor.protocol.exceptions import CorruptFrameError, EncodeError, UnsupportedVersionError
from gregor.protocol.headers import (
    RequestHeader,
    decode_request_header,
    encode_request_header,
    is_flexible,
    response_header_version,
    skip_request_header_tags,
)
from gregor.protocol.schema import APIS
from gregor.protocol.schema.dsl import Api, Message

Buffer = Any  # bytes | bytearray | memoryview | an object with __len__ (FileSlice)

_CODECS: dict[tuple[int, str], MessageCodec] = {}
CLASSES: dict[str, type[Data]] = {}
for _api in APIS.values():
    for _message in (_api.request, _api.response):
        _codec = MessageCodec(_message)
        _CODECS[(_api.key, _message.kind)] = _codec
        CLASSES[_message.name] = _codec.cls

CODEC_KEYS: tuple[tuple[int, str], ...] = tuple(_CODECS)

_SIZE = struct.Struct(">i")
_SIZE_CORRELATION = struct.Struct(">ii")
_HEADER = struct.Struct(">hhih")
_new_header = object.__new__

# Hot-path caches, keyed by _slot(api_key, api_version).
_REQUEST_DECODERS: dict[int, tuple[Decoder, str, bool]] = {}
_RESPONSE_ENCODERS: dict[int, tuple[Encoder, bool, str]] = {}
_REQUEST_ENCODERS: dict[int, tuple[Encoder, str]] = {}
_RESPONSE_DECODERS: dict[int, tuple[Decoder, bool, str]] = {}
_HEADER_TAILS: dict[tuple[int, int, str | None], bytes] = {}
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
Shortcut = Callable[[memoryview, int, int], "tuple[Any, int] | None"]
_SHORTCUTS: dict[tuple[str, int], Shortcut] = {}


class SelfEncoding:
    """A body that writes its own bytes: `encode_into(version, out, buf)` does what the
    generated encoder of its message does (appends to buf, puts records as their own elements
    of out) and returns the buffer to go on with."""

    __slots__ = ()

    def encode_into(self, version: int, out: list[Buffer], buf: bytearray) -> bytearray:
        raise NotImplementedError


def add_shortcut(api_key: int, api_version: int, kind: str, decode: Shortcut) -> None:
    """Have (api, version, kind)'s decoders try `decode(mv, pos, end) -> (body, pos) | None`
    first (module docstring)."""
    slot = _slot(api_key, api_version)
    _SHORTCUTS[(kind, slot)] = decode
    (_REQUEST_DECODERS if kind == "request" else _RESPONSE_DECODERS).pop(slot, None)


def _shortcut_first(kind: str, slot: int, generated: Decoder) -> Decoder:
    """The generated decoder, or one that tries the shortcut of (kind, slot) before it."""
    shortcut = _SHORTCUTS.get((kind, slot))
    if shortcut is None:
        return generated

    def decode(mv: memoryview, pos: int, end: int) -> tuple[Any, int]:
        found = shortcut(mv, pos, end)
        return found if found is not None else generated(mv, pos, end)

    return decode


def _slot(api_key: int, api_version: int) -> int:
    return (api_key << 16) | (api_version & 0xFFFF)


# ---------------------------------------------------------------------------------------------
# Classes.


def api(api_key: int) -> Api:
    """The declaration of an API (KeyError if we declare none)."""
    return APIS[api_key]


def codec_for(api_key: int, kind: str) -> MessageCodec:
    """The codec of an API's "request" or "response" (KeyError if undeclared)."""
    return _CODECS[(api_key, kind)]


def message_class(api_key: int, kind: str) -> type[Data]:
    """The class of an API's "request" or "response", e.g. (0, "response") -> ProduceResponse."""
    return _CODECS[(api_key, kind)].cls


def message_class_by_name(name: str) -> type[Data]:
    """A message class by Kafka's name, e.g. "ProduceResponse" (KeyError if unknown)."""
    return CLASSES[name]


def struct_class(message_name: str, struct_name: str) -> type[Data]:
    """A struct class of a message, e.g. ("ProduceResponse", "PartitionProduceResponse")."""
    return CLASSES[message_name]._structs[struct_name]


def message_schema(api_key: int, kind: str) -> Message:
    return _CODECS[(api_key, kind)].message


# ---------------------------------------------------------------------------------------------
# Buffers.


def total_length(buffers: Sequence[Buffer]) -> int:
    """The number of bytes a list of buffers (as returned by the encoders) will write."""
    total = 0
    for b in buffers:
        total += b.nbytes if type(b) is memoryview else len(b)
    return total


def join(buffers: Sequence[Buffer]) -> bytes:
    """All buffers as one bytes (tests and tools only: the broker writes them with writev)."""
    return b"".join(
        bytes(b) if not isinstance(b, bytes | bytearray | memoryview) else b for b in buffers
    )


# ---------------------------------------------------------------------------------------------
# Broker side.


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Any]:
    """Decode a request frame (the bytes after its size prefix) into (header, body).

    The body's `records` fields are views into `frame`, so keep the frame alive and unchanged
    while the request is used. Trailing bytes after the body are ignored (librdkafka sends some).
    Raises `UnsupportedVersionError` (with the header) for an api or version not in
    `api_keys.SUPPORTED`, before decoding the body; `CorruptFrameError` for malformed bytes.
    """
    mv = frame if type(frame) is memoryview else memoryview(frame)
    end = mv.nbytes
    if end < 10:
        raise CorruptFrameError(f"request header: needs 10 bytes, frame has {end}")
    # The header, inline (this is the hot path): key, version, correlation id, client id.
    key, version, correlation_id, n = _HEADER.unpack_from(mv, 0)
    entry = _REQUEST_DECODERS.get((key << 16) | (version & 0xFFFF))  # (`_slot`, inline)
    if entry is None:
        entry = _request_decoder(mv, end, key, version)
    decode, name, flexible = entry
    pos = 10
    client_id: str | None = None
    if n >= 0:
        if n > end - 10:
            raise CorruptFrameError(
                f"request header: client_id: needs {n} bytes at offset 10, only {end - 10} left"
            )
        try:
            client_id = str(mv[10 : 10 + n], "utf-8")
        except UnicodeDecodeError as e:
            raise CorruptFrameError(f"request header: client_id: {e}") from None
        pos += n
    elif n != -1:
        raise CorruptFrameError(f"request header: client_id: bad string length {n} at offset 8")
    if flexible:
        if pos < end and mv[pos] == 0:
            pos += 1
        else:
            pos = skip_request_header_tags(mv, pos, end)
    header = _new_header(RequestHeader)
    header.request_api_key = key
    header.request_api_version = version
    header.correlation_id = correlation_id
    header.client_id = client_id
    try:
        body, _ = decode(mv, pos, end)
    except CorruptFrameError as e:
        raise CorruptFrameError(f"{name} v{version}: {e}") from None
    except Exception as e:  # a safety net: the generated code checks every length first
        raise CorruptFrameError(f"{name} v{version}: {type(e).__name__}: {e}") from None
    return header, body


def _request_decoder(mv: memoryview, end: int, key: int, version: int) -> tuple[Decoder, str, bool]:
    codec = _CODECS.get((key, "request"))
    if codec is None or not api_keys.is_supported(key, version):
        header, _ = decode_request_header(mv, end)
        entry = api_keys.BY_KEY.get(key)
        if entry is None or codec is None:
            raise UnsupportedVersionError(header, f"unsupported api key {key} (version {version})")
        raise UnsupportedVersionError(
            header,
            f"unsupported {entry.name} version {version} "
            f"(supported {entry.min_version}-{entry.max_version})",
        )
    slot = _slot(key, version)
    decode = _shortcut_first("request", slot, codec.decoder(version))
    result = (decode, codec.message.name, is_flexible(key, version))
    _REQUEST_DECODERS[slot] = result
    return result


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> list[Buffer]:
    """Size prefix, response header and body, as a list of buffers to write in order."""
    entry = _RESPONSE_ENCODERS.get((api_key << 16) | (api_version & 0xFFFF))  # (`_slot`)
    if entry is None:
        entry = _response_encoder(api_key, api_version)
    encode, tagged_header, name = entry
    buf = bytearray(_SIZE_CORRELATION.pack(0, correlation_id))
    if tagged_header:
        buf.append(0)
    return _framed(encode, name, api_version, body, buf)


def _framed(
    encode: Encoder, name: str, api_version: int, body: Any, buf: bytearray
) -> list[Buffer]:
    """`body` encoded after the header in `buf` (4 bytes left for the size first), the size
    written: the buffers to write in order."""
    out: list[Buffer] = []
    try:
        if isinstance(body, SelfEncoding):
            buf = body.encode_into(api_version, out, buf)
        else:
            buf = encode(body, out, buf)
    except Exception as e:
        raise _encode_error(name, api_version, body, e) from e
    if out:
        out.append(buf)
        _SIZE.pack_into(out[0], 0, total_length(out) - 4)
        return out
    _SIZE.pack_into(buf, 0, len(buf) - 4)  # (one buffer, the common case)
    return [buf]


def _response_encoder(api_key: int, api_version: int) -> tuple[Encoder, bool, str]:
    codec = _CODECS.get((api_key, "response"))
    if codec is None:
        raise EncodeError(f"no response declared for api key {api_key}")
    if api_version not in codec.message.versions:
        raise EncodeError(f"{codec.message.name} has no version {api_version}")
    result = (
        codec.encoder(api_version),
        response_header_version(api_key, api_version) == 1,
        codec.message.name,
    )
    _RESPONSE_ENCODERS[_slot(api_key, api_version)] = result
    return result


def _encode_error(name: str, version: int, body: Any, error: Exception) -> EncodeError:
    """Say which field was wrong: re-walk the value against the schema (only on failure)."""
    from gregor.protocol.check import problems

    expected = CLASSES.get(name)
    if expected is not None and type(body) is not expected:
        return EncodeError(f"{name} v{version}: expected a {name}, got {type(body).__name__}")
    found: list[str] = []
    for codec in _CODECS.values():
        if codec.message.name == name:
            found = problems(codec.message, version, body)
    detail = "; ".join(found[:3]) if found else f"{type(error).__name__}: {error}"
    return EncodeError(f"{name} v{version}: {detail}")


def api_versions_body(error_code: int = 0, throttle_time_ms: int = 0) -> Any:
    """An ApiVersionsResponse listing `api_keys.SUPPORTED` (features left to the caller)."""
    cls = message_class(api_keys.API_VERSIONS, "response")
    row = cls._structs["ApiVersion"]
    return cls(
        error_code=error_code,
        api_keys=[
            row(api_key=a.key, min_version=a.min_version, max_version=a.max_version)
            for a in api_keys.SUPPORTED
        ],
        throttle_time_ms=throttle_time_ms,
    )


def encode_api_versions_fallback(correlation_id: int) -> list[Buffer]:
    """The answer to an ApiVersions request of a version above ours: v0 format, header v0,
    UNSUPPORTED_VERSION (35) and our api list, so the client retries with a version we serve."""
    from gregor.protocol.errors import UNSUPPORTED_VERSION

    return encode_response(
        api_keys.API_VERSIONS, 0, correlation_id, api_versions_body(UNSUPPORTED_VERSION)
    )


# ---------------------------------------------------------------------------------------------
# Client side, and bodies without headers.


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any
) -> list[Buffer]:
    """Size prefix, request header and body, as a list of buffers to write in order."""
    slot = (api_key << 16) | (api_version & 0xFFFF)  # (`_slot`, inline)
    entry = _REQUEST_ENCODERS.get(slot)
    if entry is None:
        entry = _request_encoder(api_key, api_version)
    encode, name = entry
    buf = bytearray(4)
    buf += _request_header(api_key, api_version, correlation_id, client_id)
    return _framed(encode, name, api_version, body, buf)


def _request_encoder(api_key: int, api_version: int) -> tuple[Encoder, str]:
    codec = _CODECS[(api_key, "request")]
    result = (codec.encoder(api_version), codec.message.name)
    _REQUEST_ENCODERS[_slot(api_key, api_version)] = result
    return result


def _request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """`encode_request_header`, its bytes after the correlation id kept per (api, version,
    client id): a client sends the same ones again and again."""
    key = (api_key, api_version, client_id)
    tail = _HEADER_TAILS.get(key)
    if tail is None:
        tail = bytes(encode_request_header(api_key, api_version, 0, client_id)[8:])
        if len(_HEADER_TAILS) >= 1024:
            _HEADER_TAILS.clear()
        _HEADER_TAILS[key] = tail
    return _KEY_VERSION_CORRELATION.pack(api_key, api_version, correlation_id) + tail


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, Any]:
    """Decode a response frame (after its size prefix) into (correlation_id, body)."""
    entry = _RESPONSE_DECODERS.get((api_key << 16) | (api_version & 0xFFFF))  # (`_slot`)
    if entry is None:
        entry = _response_decoder(api_key, api_version)
    decode, tagged_header, name = entry
    mv = frame if type(frame) is memoryview else memoryview(frame)
    end = mv.nbytes
    if end < 4:
        raise CorruptFrameError(f"response header: needs 4 bytes, frame has {end}")
    (correlation_id,) = _SIZE.unpack_from(mv, 0)
    pos = 4
    if tagged_header:
        if end > 4 and mv[4] == 0:  # no tagged fields, as nearly always
            pos = 5
        else:
            pos = _skip_header_tags(mv, pos, end)
    return correlation_id, _decode_guarded(decode, mv, pos, end, name, api_version)


def _response_decoder(api_key: int, api_version: int) -> tuple[Decoder, bool, str]:
    codec = _CODECS[(api_key, "response")]
    slot = _slot(api_key, api_version)
    result = (
        _shortcut_first("response", slot, codec.decoder(api_version)),
        response_header_version(api_key, api_version) == 1,
        codec.message.name,
    )
    _RESPONSE_DECODERS[slot] = result
    return result


def _skip_header_tags(mv: memoryview, pos: int, end: int) -> int:
    from gregor.protocol.codegen import _skip_tags, _uvarint

    path = "response header._tagged_fields"
    count, pos = _uvarint(mv, pos, end, path)
    return _skip_tags(mv, pos, end, count, path)


def _decode_guarded(
    decode: Decoder, mv: memoryview, pos: int, end: int, name: str, version: int
) -> Any:
    try:
        body, _ = decode(mv, pos, end)
    except CorruptFrameError as e:
        raise CorruptFrameError(f"{name} v{version}: {e}") from None
    except Exception as e:
        raise CorruptFrameError(f"{name} v{version}: {type(e).__name__}: {e}") from None
    return body


def encode_body(api_key: int, api_version: int, kind: str, body: Any) -> list[Buffer]:
    """Just the body (no header, no size prefix) as a list of buffers."""
    codec = _CODECS[(api_key, kind)]
    encode = codec.encoder(api_version)
    out: list[Buffer] = []
    try:
        if isinstance(body, SelfEncoding):
            buf = body.encode_into(api_version, out, bytearray())
        else:
            buf = encode(body, out, bytearray())
    except Exception as e:
        raise _encode_error(codec.message.name, api_version, body, e) from e
    out.append(buf)
    return out


def decode_body(
    api_key: int, api_version: int, kind: str, data: bytes | bytearray | memoryview
) -> Any:
    """Just a body (no header); trailing bytes are ignored."""
    codec = _CODECS[(api_key, kind)]
    mv = data if type(data) is memoryview else memoryview(data)
    return _decode_guarded(
        codec.decoder(api_version), mv, 0, mv.nbytes, codec.message.name, api_version
    )


def compile_all() -> int:
    """Generate every declared version's encoder and decoder now; returns how many."""
    count = 0
    for codec in _CODECS.values():
        versions = codec.message.versions
        assert versions.high is not None
        for v in range(versions.low, versions.high + 1):
            codec.encoder(v)
            codec.decoder(v)
            count += 2
    return count


__all__ = [
    "APIS",
    "CLASSES",
    "CODEC_KEYS",
    "CorruptFrameError",
    "EncodeError",
    "EncodedArray",
    "RequestHeader",
    "SelfEncoding",
    "UnsupportedVersionError",
    "add_shortcut",
    "api",
    "api_versions_body",
    "codec_for",
    "compile_all",
    "decode_body",
    "decode_request",
    "decode_response",
    "encode_api_versions_fallback",
    "encode_body",
    "encode_request",
    "encode_response",
    "is_flexible",
    "join",
    "message_class",
    "message_class_by_name",
    "struct_class",
    "total_length",
]
