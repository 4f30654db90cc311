"""Byte comparison with kio, an independent codec generated from Kafka's own JSON specs.

For every API, version and direction that kio has: build random values from our schema, encode
them with both, compare the bytes; decode kio's bytes with ours and compare the values; decode
our bytes with kio and encode again, which must give the same bytes. Field order and count are
checked along the way (kio's dataclasses follow the spec's field order).
"""

from __future__ import annotations

import random

import pytest

from gregor.protocol import codec

from .kio_bridge import kio_class, kio_decode, kio_encode, to_kio
from .strategies import all_cases, case_id, examples, random_value

EXAMPLES = examples(12)

CASES = [c for c in all_cases() if kio_class(codec.APIS[c[0]].name, c[1], c[2]) is not None]


def test_kio_covers_every_case() -> None:
    missing = [case_id(c) for c in all_cases() if c not in CASES]
    assert missing == []


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_same_bytes_as_kio(case: tuple[int, str, int]) -> None:
    key, kind, version = case
    api = codec.APIS[key]
    cls = kio_class(api.name, kind, version)
    assert cls is not None
    schema = codec.message_schema(key, kind)
    rng = random.Random(f"{key}-{kind}-{version}")
    for _ in range(EXAMPLES):
        value = random_value(key, kind, version, rng)
        theirs = to_kio(value, schema.root, version, cls)  # may adjust `value` to fit kio's types
        their_bytes = kio_encode(theirs)
        our_bytes = codec.join(codec.encode_body(key, version, kind, value))
        assert our_bytes == their_bytes, (value, theirs)
        assert codec.decode_body(key, version, kind, bytearray(their_bytes)) == value
        assert kio_encode(kio_decode(cls, our_bytes)) == our_bytes
