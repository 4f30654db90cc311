"""A principal as a forwarded request's Envelope carries it (Kafka's DefaultPrincipalData,
written by DefaultKafkaPrincipalBuilder.serialize), so the controller authorizes the client,
not the broker that forwarded it.

    data => version:int16 (0)  type:compact_string  name:compact_string
            token_authenticated:bool  tagged_fields:uvarint (0)

A compact string is its length + 1 as an unsigned varint, then its UTF-8 bytes.
"""

from __future__ import annotations

from gregor.security.principal import KafkaPrincipal


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("varint too long")


def serialize(principal: KafkaPrincipal) -> bytes:
    out = bytearray(b"\x00\x00")
    for text in (principal.principal_type, principal.name):
        raw = text.encode()
        out += _uvarint(len(raw) + 1) + raw
    out += b"\x00\x00"  # not token-authenticated; no tagged fields
    return bytes(out)


def deserialize(data: bytes) -> KafkaPrincipal:
    """ValueError if `data` is not a version-0 DefaultPrincipalData."""
    try:
        if data[:2] != b"\x00\x00":
            raise ValueError("unknown principal data version")
        pos, texts = 2, []
        for _ in range(2):
            n, pos = _read_uvarint(data, pos)
            if n == 0:
                raise ValueError("null principal field")
            texts.append(data[pos : pos + n - 1].decode())
            pos += n - 1
        if pos + 2 > len(data):
            raise ValueError("truncated principal data")
    except IndexError:
        raise ValueError("truncated principal data") from None
    return KafkaPrincipal(texts[0], texts[1])
