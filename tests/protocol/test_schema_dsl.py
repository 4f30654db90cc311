"""The declaration language: what it accepts, what it refuses, and how defaults come out."""

from __future__ import annotations

import uuid

import pytest

from gregor.protocol import api_keys, codec
from gregor.protocol.codegen import MessageCodec
from gregor.protocol.schema import ALL
from gregor.protocol.schema.dsl import (
    SchemaError,
    VersionRange,
    api,
    parse_message,
)


def test_version_ranges() -> None:
    assert 5 in VersionRange.parse("3+") and 2 not in VersionRange.parse("3+")
    assert 7 in VersionRange.parse("3-7") and 8 not in VersionRange.parse("3-7")
    assert list(filter(VersionRange.parse("5").__contains__, range(10))) == [5]
    assert VersionRange.parse("none").is_empty()
    assert str(VersionRange.parse("3-7").intersect(VersionRange.parse("5+"))) == "5-7"
    for bad in ("", "x", "5-3", "+3", "3++"):
        with pytest.raises(SchemaError):
            VersionRange.parse(bad)


def _message(text: str, versions: str = "0-5", flexible: str = "3+") -> MessageCodec:
    msg = parse_message("TestMessage", versions, flexible, text)
    msg.api_key, msg.kind = 999, "request"
    return MessageCodec(msg)


def test_defaults_and_structs() -> None:
    c = _message(
        """
a: int32 default -1
b: string nullable default null
c: []Item versions 1+
  x: int16
  y: bool default true
d: Inner tag 0 versions 3+   # a tagged struct
  z: int64 default 7
e: uuid
f: records nullable
g: []int32 nullable default null
h: Shared
struct Shared
  s: string default "hi"
"""
    )
    obj = c.cls()
    assert (obj.a, obj.b, obj.c, obj.e, obj.f, obj.g) == (
        -1,
        None,
        [],
        uuid.UUID(int=0),
        None,
        None,
    )
    assert obj.d == c.cls.Inner(z=7) and obj.h.s == "hi"
    assert c.cls.Item().y is True
    assert c.cls().c is not c.cls().c  # fresh lists
    assert c.message.root.fields[3].about == "a tagged struct"
    made = c.cls._make(a=5, f=b"r")  # (the plain-function constructor of hot paths)
    assert type(made) is c.cls and made == c.cls(a=5, f=b"r")
    assert made.c is not c.cls._make().c and made.d == c.cls.Inner(z=7)


def test_make_builds_what_the_class_builds_for_every_struct() -> None:
    for key, kind in ((k, kind) for k in api_keys.BY_KEY for kind in ("request", "response")):
        for cls in codec.message_class(key, kind)._structs.values():
            assert cls._make() == cls(), cls.__qualname__


def test_absent_fields_are_defaults_after_decoding() -> None:
    c = _message("a: int32\nb: int32 versions 2+ default 9\n")
    value = c.cls(a=1, b=5)
    out: list = []
    raw = c.encoder(1)(value, out, bytearray())
    decoded, pos = c.decoder(1)(memoryview(raw), 0, len(raw))
    assert (decoded.a, decoded.b, pos) == (1, 9, 4)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("a int32", "expected 'name: type attributes'"),
        ("a: int33", "unknown type"),
        ("a: Missing", "unknown type 'Missing'"),
        ("a: int32 frob", "unknown attribute 'frob'"),
        ("a: int32\na: int64", "declared twice"),
        ("a: int32\n b: int32", "indent by two spaces"),
        ("a: int32\n  b: int32", "a int32 has no fields"),
        ("a: int32 tag 0", "tagged outside flexible versions"),
        ("a: int32 tag 0 versions 3+\nb: int32 tag 0 versions 3+", "tag 0 also used by a"),
        ("a: records tag 0 versions 3+", "records cannot be tagged"),
        ("a: string default null", "default null needs the field nullable"),
        ("a: int32 versions 7+", "in no declared version"),
        ("a: []S\n  x: int8\nb: []S\n  y: int8", "struct S declared twice"),
        ("a: int32 default abc", "bad default"),
        ("a: []int32 encoded", "only an untagged array of structs can be encoded"),
        ("a: S encoded\n  x: int8", "only an untagged array of structs can be encoded"),
        ("a: []S encoded tag 0 versions 3+\n  x: int8", "only an untagged array of structs"),
    ],
)
def test_refused_declarations(text: str, error: str) -> None:
    with pytest.raises(SchemaError, match=error):
        parse_message("TestMessage", "0-5", "3+", text)


def test_declarations_cover_the_served_table() -> None:
    assert {a.key for a in ALL} == {a.key for a in api_keys.SUPPORTED}
    for a in ALL:
        entry = api_keys.BY_KEY[a.key]
        assert (a.versions.low, a.versions.high) == (entry.min_version, entry.max_version)
        assert a.name == entry.name
        assert a.request.name == a.name + "Request" and a.response.name == a.name + "Response"


def test_schema_modules_open_with_their_versions() -> None:
    import importlib

    for a in ALL:
        module = importlib.import_module(
            "gregor.protocol.schema."
            + "".join(
                "_" + ch.lower() if ch.isupper() and i else ch.lower()
                for i, ch in enumerate(a.name)
            )
        )
        assert module.__doc__ and module.__doc__.startswith(f"{a.name} (key {a.key})")


def test_class_lookup() -> None:
    from gregor.protocol.messages import ProduceResponse

    assert codec.message_class(0, "response") is ProduceResponse
    assert codec.message_class_by_name("ProduceResponse") is ProduceResponse
    assert codec.struct_class("ProduceResponse", "PartitionProduceResponse") is (
        ProduceResponse.PartitionProduceResponse
    )
    with pytest.raises(TypeError):
        ProduceResponse(no_such_field=1)
    with pytest.raises(TypeError):
        ProduceResponse([])  # keywords only
    p = ProduceResponse.PartitionProduceResponse(index=3)
    assert (p.index, p.base_offset, p.log_append_time_ms, p.error_message) == (3, 0, -1, None)
    assert p.to_dict()["current_leader"] == {"leader_id": -1, "leader_epoch": -1}


def test_unused_api_declaration_helper() -> None:
    a = api(key=999, name="Test", versions="0-1", flexible="1+", request="x: int8", response="")
    assert a.request.kind == "request" and a.response.root.fields == []


def test_dropped_fields_like_kafkas_unsupported_version_check() -> None:
    from gregor.protocol.check import dropped_fields
    from gregor.protocol.messages import MetadataResponse

    schema = codec.message_schema(3, "response")
    value = MetadataResponse(
        cluster_authorized_operations=5,
        throttle_time_ms=100,  # ignorable: dropped before v3 without complaint
        topics=[MetadataResponse.MetadataResponseTopic(topic_authorized_operations=3)],
    )
    assert dropped_fields(schema, 2, value) == [
        "MetadataResponse.topics[0].topic_authorized_operations: 3 cannot be sent in v2",
        "MetadataResponse.cluster_authorized_operations: 5 cannot be sent in v2",
    ]
    assert dropped_fields(schema, 9, value) == []
    assert dropped_fields(schema, 11, value) == [
        "MetadataResponse.cluster_authorized_operations: 5 cannot be sent in v11"
    ]


def test_an_encoded_array_is_written_as_its_bytes_in_its_version_only() -> None:
    """`encoded`: the value may be an EncodedArray, its bytes written as they are by the
    encoder of its version; others (and readers) see its elements."""
    c = _message("a: int8\nitems: []Item encoded\n  x: int32\n  y: int8 versions 2+")
    item = c.cls._structs["Item"]
    elements = [item(x=1, y=2), item(x=3, y=4)]
    made = {v: c.encoder(v)(c.cls(a=7, items=elements), [], bytearray()) for v in range(6)}
    for v in range(6):
        tags = b"\x00" if v >= 3 else b""  # the message's own tagged fields (none), flexible
        data = bytes(made[v][1 : len(made[v]) - len(tags)])  # the array's bytes in version v
        read_as = list(elements if v >= 2 else [item(x=1), item(x=3)])
        array = codec.EncodedArray(v, 2, data, lambda _, r=read_as: r)
        assert c.encoder(v)(c.cls(a=7, items=array), [], bytearray()) == made[v]
        # a stand-in for other bytes: written by its own version only
        marked = codec.EncodedArray(v, 2, b"!" + data, lambda _, r=read_as: r)
        assert c.encoder(v)(c.cls(a=7, items=marked), [], bytearray()) == b"\x07!" + data + tags
        other = 4 if v < 4 else 1
        got = c.encoder(other)(c.cls(a=7, items=marked), [], bytearray())
        assert got == c.encoder(other)(c.cls(a=7, items=read_as), [], bytearray())
        assert marked == read_as and list(marked) == read_as and marked[1] == read_as[1]
        assert c.cls(a=7, items=marked).to_dict()["items"] == [e.to_dict() for e in read_as]
