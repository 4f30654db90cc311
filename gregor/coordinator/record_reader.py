"""Reading the key and value bytes of the coordinators' internal records (`__consumer_offsets`,
`__transaction_state`): Kafka's message encoding, classic (int16/int32 lengths) or flexible
(compact lengths as unsigned varints, tagged fields), every length checked against the bytes
left. A reader fails with RecordFormatError, never with an IndexError or a short read."""

from __future__ import annotations

import struct


class RecordFormatError(ValueError):
    """Bytes that are not a record we know (a damaged record, or one of another coordinator)."""


class RecordReader:
    __slots__ = ("buf", "pos", "flexible")

    def __init__(self, buf: bytes, pos: int = 0, flexible: bool = False) -> None:
        self.buf = buf
        self.pos = pos
        self.flexible = flexible

    def _take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise RecordFormatError("record ends early")
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return int(v)

    def int8(self) -> int:
        return self._take(">b")

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.buf):
                raise RecordFormatError("varint runs past the end of the record")
            byte = self.buf[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise RecordFormatError("varint too long")

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError("record ends early")
        b = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(b)

    def nullable_string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            return None
        try:
            return self.raw(n).decode()
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise RecordFormatError("null where a string is required")
        return s

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise RecordFormatError("null where bytes are required")
        return self.raw(n)

    def nullable_array_len(self) -> int:
        """The count; -1 for a null array."""
        return self.uvarint() - 1 if self.flexible else self.int32()

    def array_len(self) -> int:
        n = self.nullable_array_len()
        if n < 0:
            raise RecordFormatError("null array")
        return n

    def tags(self) -> dict[int, bytes]:
        """The tagged fields, by tag (none unless flexible)."""
        if not self.flexible:
            return {}
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.raw(self.uvarint())
        return out

    def skip_tags(self) -> None:
        self.tags()
