"""MirrorMaker 2's record formats, byte for byte, so that gregor and Apache Kafka's MirrorMaker
read each other's heartbeats, offset syncs and checkpoints.

Each key and value is a Kafka protocol `Struct` (the encoding of request fields, not a Connect
schema): fields one after another, no tags, no field names on the wire.

    STRING => length:int16 utf8:bytes[length]     INT16/INT32/INT64 => big-endian, signed

    Heartbeat   key   => sourceClusterAlias:STRING targetClusterAlias:STRING
                value => version:INT16 timestamp:INT64
    OffsetSync  key   => topic:STRING partition:INT32
                value => upstreamOffset:INT64 offset:INT64          (no version)
    Checkpoint  key   => group:STRING topic:STRING partition:INT32
                value => version:INT16 upstreamOffset:INT64 offset:INT64 metadata:STRING

The "version header" of heartbeats and checkpoints is the leading INT16 of the value (version 0
today), not a record header. Decoding reads the version-0 fields whatever the version says and
ignores bytes after them, as Kafka's reader does, so a newer writer's extra fields are skipped.
A short or malformed buffer raises `FormatError` (Kafka's `SchemaException`), which readers of
these topics skip, as MirrorClient does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

VERSION = 0
_INT_FORMATS = {"int16": ">h", "int32": ">i", "int64": ">q"}
_STRING_MAX = 0x7FFF


class FormatError(ValueError):
    """A key or value that is not a MirrorMaker record of the expected kind."""


def _encode(fields: list[tuple[str, object]]) -> bytes:
    out = bytearray()
    for kind, value in fields:
        if kind == "string":
            data = str(value).encode()
            if len(data) > _STRING_MAX:
                raise FormatError(f"string of {len(data)} bytes is longer than {_STRING_MAX}")
            out += struct.pack(">h", len(data)) + data
        else:
            out += struct.pack(_INT_FORMATS[kind], value)
    return bytes(out)


def _decode(data: bytes, kinds: list[str]) -> list[Any]:
    values: list[Any] = []
    pos = 0
    try:
        for kind in kinds:
            if kind == "string":
                (length,) = struct.unpack_from(">h", data, pos)
                pos += 2
                if length < 0:
                    raise FormatError(f"string length {length} cannot be negative")
                if pos + length > len(data):
                    raise FormatError(f"string of {length} bytes but {len(data) - pos} remain")
                values.append(data[pos : pos + length].decode())
                pos += length
            else:
                fmt = _INT_FORMATS[kind]
                values.append(struct.unpack_from(fmt, data, pos)[0])
                pos += struct.calcsize(fmt)
    except struct.error as e:
        raise FormatError(f"truncated at byte {pos} of {len(data)}") from e
    except UnicodeDecodeError as e:
        raise FormatError(f"string at byte {pos} is not UTF-8") from e
    return values


@dataclass(frozen=True)
class Heartbeat:
    """Emitted into the target of each flow's heartbeat connector every
    `emit.heartbeats.interval.seconds`, and mirrored onwards like any topic."""

    source_cluster_alias: str
    target_cluster_alias: str
    timestamp: int

    def record_key(self) -> bytes:
        return _encode(
            [("string", self.source_cluster_alias), ("string", self.target_cluster_alias)]
        )

    def record_value(self) -> bytes:
        return _encode([("int16", VERSION), ("int64", self.timestamp)])

    @classmethod
    def from_record(cls, key: bytes, value: bytes) -> Heartbeat:
        source, target = _decode(key, ["string", "string"])
        _version, timestamp = _decode(value, ["int16", "int64"])
        return cls(str(source), str(target), int(timestamp))


@dataclass(frozen=True)
class OffsetSync:
    """Upstream offset -> downstream offset of one source partition, written to the
    `mm2-offset-syncs.<alias>.internal` topic (partition 0)."""

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def record_key(self) -> bytes:
        return _encode([("string", self.topic), ("int32", self.partition)])

    def record_value(self) -> bytes:
        return _encode([("int64", self.upstream_offset), ("int64", self.downstream_offset)])

    @classmethod
    def from_record(cls, key: bytes, value: bytes) -> OffsetSync:
        topic, partition = _decode(key, ["string", "int32"])
        upstream, downstream = _decode(value, ["int64", "int64"])
        return cls(str(topic), int(partition), int(upstream), int(downstream))


@dataclass(frozen=True)
class Checkpoint:
    """A source group's committed offset on one partition, translated for the target, written
    to the target's `<source alias>.checkpoints.internal` topic. `topic` is the name on the
    target (`A.orders`)."""

    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def record_key(self) -> bytes:
        return _encode([("string", self.group), ("string", self.topic), ("int32", self.partition)])

    def record_value(self) -> bytes:
        return _encode(
            [
                ("int16", VERSION),
                ("int64", self.upstream_offset),
                ("int64", self.downstream_offset),
                ("string", self.metadata or ""),
            ]
        )

    @classmethod
    def from_record(cls, key: bytes, value: bytes) -> Checkpoint:
        group, topic, partition = _decode(key, ["string", "string", "int32"])
        _version, upstream, downstream, metadata = _decode(
            value, ["int16", "int64", "int64", "string"]
        )
        return cls(
            str(group), str(topic), int(partition), int(upstream), int(downstream), str(metadata)
        )
