"""The source positions of exactly-once mode, in Connect's source-offset format."""

from __future__ import annotations

import pytest

from gregor.mirror.exactly_once import offset_key, parse_offset_record

pytestmark = pytest.mark.unit


def test_offset_key_is_connects_format() -> None:
    key = offset_key("A", ("orders", 3))
    assert key == b'["MirrorSourceConnector",{"cluster":"A","partition":3,"topic":"orders"}]'
    assert parse_offset_record(key, b'{"offset":41}', "A") == (("orders", 3), 41)


def test_tombstones_other_clusters_and_garbage() -> None:
    key = offset_key("A", ("orders", 0))
    assert parse_offset_record(key, None, "A") == (("orders", 0), None)
    assert parse_offset_record(key, b'{"offset":1}', "C") is None
    assert parse_offset_record(b"not json", b"{}", "A") is None
    assert parse_offset_record(b'["Other",{"cluster":"A"}]', b'{"offset":1}', "A") is None
    assert parse_offset_record(key, b'{"nope":1}', "A") is None
