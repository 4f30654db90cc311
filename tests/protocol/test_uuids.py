"""uuid_from_bytes and random_uuid (protocol/uuids.py): the UUID uuid.UUID would make."""

from __future__ import annotations

import os
import uuid

import pytest

from gregor.protocol.uuids import random_uuid, uuid_from_bytes


def test_uuid_from_bytes_is_uuid_of_those_bytes() -> None:
    for raw in (
        b"\x00" * 16,
        b"\xff" * 16,
        bytes(range(16)),
        *(os.urandom(16) for _ in range(200)),
    ):
        made, expected = uuid_from_bytes(raw), uuid.UUID(bytes=raw)
        assert type(made) is uuid.UUID
        assert made == expected and hash(made) == hash(expected) and str(made) == str(expected)
        assert made.bytes == raw and made.is_safe is expected.is_safe
        assert {made: 1}[expected] == 1
        with pytest.raises(TypeError):
            made.int = 5  # type: ignore[misc]
    with pytest.raises(ValueError):
        uuid_from_bytes(b"short")


def test_random_uuid_is_a_version_4_uuid() -> None:
    made = [random_uuid() for _ in range(500)]
    assert len(set(made)) == 500
    for u in made:
        assert type(u) is uuid.UUID and u.version == 4 and u.variant == uuid.RFC_4122
        assert uuid.UUID(bytes=u.bytes, version=4) == u  # its bits are uuid4's: no change
        assert uuid.UUID(str(u)) == u
