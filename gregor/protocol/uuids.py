"""UUIDs made without `uuid.UUID.__init__`, for the ids made on every metadata commit.

    uuid_from_bytes(raw)     # == uuid.UUID(bytes=raw): a topic id read off the wire
    random_uuid()            # as uuid.uuid4(): a new topic's id

`UUID.__init__` takes five ways of giving the value and checks which one was given, and its
version argument rewrites bits: some 6 µs a UUID on CPython 3.11, where these two store the
same two slots (`int`, and `is_safe` as SafeUUID.unknown, what __init__ sets when not told)
through the slots' own descriptors, about a third of it. The object is a plain `uuid.UUID`,
equal, hashed, printed and immutable as any other.
"""

from __future__ import annotations

import os
import uuid

_new = object.__new__
_UUID = uuid.UUID
_set_int = uuid.UUID.__dict__["int"].__set__
_set_is_safe = uuid.UUID.__dict__["is_safe"].__set__
_UNKNOWN = uuid.SafeUUID.unknown
_from_bytes = int.from_bytes
# uuid4: RFC 4122 variant (bits 62-63 of the low half: 10), version 4 (bits 76-79)
_CLEAR = ~((0xC000 << 48) | (0xF000 << 64))
_SET = (0x8000 << 48) | (4 << 76)


def uuid_from_bytes(raw: bytes) -> uuid.UUID:
    """`uuid.UUID(bytes=raw)` for 16 bytes (big-endian, as Kafka writes a Uuid)."""
    if len(raw) != 16:
        raise ValueError("bytes is not a 16-char string")
    u = _new(_UUID)
    _set_int(u, _from_bytes(raw, "big"))
    _set_is_safe(u, _UNKNOWN)
    return u


def random_uuid() -> uuid.UUID:
    """A random (version 4) UUID, as `uuid.uuid4()`."""
    u = _new(_UUID)
    _set_int(u, (_from_bytes(os.urandom(16), "big") & _CLEAR) | _SET)
    _set_is_safe(u, _UNKNOWN)
    return u
