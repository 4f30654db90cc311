"""A hybrid logical clock timestamp and its record header `hlc`.

Header `hlc` (16 bytes, big-endian, unsigned):

    physical_ms:uint64  logical:uint32  node_id:uint32

physical_ms is milliseconds since the epoch (the greatest wall-clock time the writing node had
seen), logical counts events within that millisecond, node_id names the writer. Timestamps
order as the tuple (physical_ms, logical, node_id); because every field is unsigned and
big-endian, the 16 header bytes compare byte for byte in the same order.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

HEADER = "hlc"
HEADER_SIZE = 16
MAX_PHYSICAL_MS = 2**64 - 1
MAX_LOGICAL = 2**32 - 1
MAX_NODE_ID = 2**32 - 1

_LAYOUT = struct.Struct(">QII")
assert _LAYOUT.size == HEADER_SIZE


class HeaderError(ValueError):
    """A header that is not what its name promises (its length or layout)."""


class Timestamp(NamedTuple):
    """(physical_ms, logical, node_id): compares in that order, node id last as the tie-break."""

    physical_ms: int
    logical: int
    node_id: int

    def encode(self) -> bytes:
        """The 16 bytes of the `hlc` header."""
        if not 0 <= self.physical_ms <= MAX_PHYSICAL_MS:
            raise ValueError(f"physical_ms out of range (0 to 2^64-1): {self.physical_ms}")
        if not 0 <= self.logical <= MAX_LOGICAL:
            raise ValueError(f"logical out of range (0 to 2^32-1): {self.logical}")
        if not 0 <= self.node_id <= MAX_NODE_ID:
            raise ValueError(f"node_id out of range (0 to 2^32-1): {self.node_id}")
        return _LAYOUT.pack(self.physical_ms, self.logical, self.node_id)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview | None) -> Timestamp:
        """A timestamp from the 16 bytes of an `hlc` header."""
        if data is None:
            raise HeaderError(f"header {HEADER!r} has no value (expected {HEADER_SIZE} bytes)")
        if len(data) != HEADER_SIZE:
            raise HeaderError(
                f"header {HEADER!r} must be {HEADER_SIZE} bytes "
                f"(physical_ms:8 logical:4 node_id:4), got {len(data)}"
            )
        return cls(*_LAYOUT.unpack(data))

    def __str__(self) -> str:
        return f"{self.physical_ms}.{self.logical}@{self.node_id}"


def find_header(headers: object, name: str = HEADER) -> bytes | None:
    """The value of the last header called `name` in confluent-kafka's (or any client's) header
    shapes: a list of (name, value) pairs, a dict, or None."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, dict) else headers
    found: bytes | None = None
    for key, value in pairs:  # type: ignore[attr-defined]
        if key == name:
            found = value.encode() if isinstance(value, str) else value
    return found
