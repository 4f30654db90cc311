"""The KRaft metadata records in Kafka's framing: what one record of `__cluster_metadata` holds.

    record => frameVersion:uvarint (1)  apiKey:uvarint  version:uvarint  body

The body is the record's flexible encoding at that version (`record_schema.py` declares every
record and the version we write). Unsigned varints are 7 bits a byte, low group first, high bit
set on every byte but the last. Reading is strict, as Kafka's MetadataRecordSerde: frame version
0 (the 2.8 preview) and anything but 1 is refused, each header number must fit an int16, an
unknown api key or version is refused, and bytes left after the body are an error.

    rec = TopicRecord(name="orders", topic_id=uuid.uuid4())
    data = encode(rec)              # b"\\x01\\x02\\x00" + body
    decode(data) == rec             # MetadataRecordError on anything else

The classes are generated from the declarations (fields as keyword arguments and attributes,
snake_case, equality by value); fields left out take their declared defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gregor.metadata import record_schema
from gregor.metadata.record_schema import RecordSchema
from gregor.protocol.codegen import Data, MessageCodec, uvarint_bytes
from gregor.protocol.exceptions import CorruptFrameError

FRAME_VERSION = 1

Record = Data


class MetadataRecordError(ValueError):
    """Bytes that are not a metadata record we can read, or a record we cannot write."""


class _Type:
    __slots__ = ("schema", "codec", "header", "written", "write_encoder")

    def __init__(self, schema: RecordSchema) -> None:
        self.schema = schema
        self.codec = MessageCodec(schema.message)
        self.header = uvarint_bytes(FRAME_VERSION) + uvarint_bytes(schema.api_key)
        # the header of the version we write, whole (it is a version of the type: checked once)
        assert schema.write_version in schema.message.versions, schema.name
        self.written = self.header + uvarint_bytes(schema.write_version)
        self.write_encoder: Any = None  # of the version we write, once first used


_BY_KEY: dict[int, _Type] = {}
_BY_CLASS: dict[type, _Type] = {}
for _schema in record_schema.ALL:
    _t = _Type(_schema)
    _BY_KEY[_schema.api_key] = _t
    _BY_CLASS[_t.codec.cls] = _t


def compile_all() -> int:
    """Generate every record type's encoders and decoders now (a server's start): the first
    CreateTopics then does not hold the event loop while its records' codecs are made (about
    8 ms); returns how many."""
    count = 0
    for t in _BY_KEY.values():
        versions = t.schema.message.versions
        assert versions.high is not None
        for v in range(versions.low, versions.high + 1):
            t.codec.encoder(v)
            t.codec.decoder(v)
            count += 2
    return count


def record_class(api_key: int) -> type[Data]:
    return _BY_KEY[api_key].codec.cls


RegisterBrokerRecord: Any = record_class(0)
UnregisterBrokerRecord: Any = record_class(1)
TopicRecord: Any = record_class(2)
PartitionRecord: Any = record_class(3)
ConfigRecord: Any = record_class(4)
PartitionChangeRecord: Any = record_class(5)
FenceBrokerRecord: Any = record_class(7)
UnfenceBrokerRecord: Any = record_class(8)
RemoveTopicRecord: Any = record_class(9)
FeatureLevelRecord: Any = record_class(12)
ProducerIdsRecord: Any = record_class(15)
BrokerRegistrationChangeRecord: Any = record_class(17)
NoOpRecord: Any = record_class(20)
UserScramCredentialRecord: Any = record_class(11)
RemoveUserScramCredentialRecord: Any = record_class(22)
ClientQuotaRecord: Any = record_class(14)
BeginTransactionRecord: Any = record_class(23)
EndTransactionRecord: Any = record_class(24)
AbortTransactionRecord: Any = record_class(25)

# ACLs
AccessControlEntryRecord: Any = record_class(18)
RemoveAccessControlEntryRecord: Any = record_class(19)

# Struct classes inside records.
BrokerEndpoint: Any = RegisterBrokerRecord.BrokerEndpoint
BrokerFeature: Any = RegisterBrokerRecord.BrokerFeature

API_KEYS: tuple[int, ...] = tuple(sorted(_BY_KEY))


def api_key_of(record: Data) -> int:
    t = _BY_CLASS.get(type(record))
    if t is None:
        raise MetadataRecordError(f"{type(record).__name__} is not a metadata record")
    return t.schema.api_key


def write_version(api_key: int) -> int:
    """The version we write of a record type."""
    return _BY_KEY[api_key].schema.write_version


def encode(record: Data, version: int | None = None) -> bytes:
    """The framed record, at `version` (default: the version we write of its type)."""
    t = _BY_CLASS.get(type(record))
    if t is None:
        raise MetadataRecordError(f"{type(record).__name__} is not a metadata record")
    if version is None:
        v, buf, encoder = t.schema.write_version, bytearray(t.written), t.write_encoder
        if encoder is None:
            encoder = t.write_encoder = t.codec.encoder(v)
    else:
        v = version
        if v not in t.schema.message.versions:
            raise MetadataRecordError(f"{t.schema.name} has no version {v}")
        buf = bytearray(t.header)
        buf += uvarint_bytes(v)
        encoder = t.codec.encoder(v)
    try:
        buf = encoder(record, [], buf)
    except Exception as exc:
        raise MetadataRecordError(f"cannot encode {t.schema.name} v{v}: {exc}") from exc
    return bytes(buf)


def _header_number(mv: memoryview, pos: int, what: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(mv):
            raise MetadataRecordError(f"metadata record truncated in its {what}")
        byte = mv[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 28:
            raise MetadataRecordError(f"metadata record {what} is a varint longer than 5 bytes")
    if value > 0x7FFF:
        raise MetadataRecordError(f"metadata record {what} {value} does not fit an int16")
    return value, pos


def decode_with_version(data: bytes | bytearray | memoryview) -> tuple[Data, int]:
    """The record and the version it was written at."""
    mv = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
    if len(mv) >= 3 and mv[0] == FRAME_VERSION and mv[1] < 0x80 and mv[2] < 0x80:
        # the usual header: frame version 1, type and version a byte each
        return _decode_body(mv, mv[1], mv[2], 3)
    frame, pos = _header_number(mv, 0, "frame version")
    if frame == 0:
        raise MetadataRecordError(
            "metadata record with frame version 0 (the KRaft preview of Kafka 2.8) cannot be read"
        )
    if frame != FRAME_VERSION:
        raise MetadataRecordError(
            f"unknown metadata record frame version {frame} (only {FRAME_VERSION} is supported)"
        )
    api_key, pos = _header_number(mv, pos, "type")
    version, pos = _header_number(mv, pos, "version")
    return _decode_body(mv, api_key, version, pos)


# (type, version) -> (its decoder, the type's name), for the versions met so far: every node
# decodes each committed record it did not append, and one lookup here replaces the checks
# and the decoder's lookup each record would cost.
_DECODERS: dict[tuple[int, int], tuple[Callable[..., tuple[Data, int]], str]] = {}


def _decoder_of(api_key: int, version: int) -> tuple[Callable[..., tuple[Data, int]], str]:
    t = _BY_KEY.get(api_key)
    if t is None:
        raise MetadataRecordError(f"unknown metadata record type {api_key}")
    if version not in t.schema.message.versions:
        raise MetadataRecordError(f"{t.schema.name} has no version {version}")
    found = _DECODERS[(api_key, version)] = (t.codec.decoder(version), t.schema.name)
    return found


def _decode_body(mv: memoryview, api_key: int, version: int, pos: int) -> tuple[Data, int]:
    decoder, name = _DECODERS.get((api_key, version)) or _decoder_of(api_key, version)
    try:
        record, end = decoder(mv, pos, len(mv))
    except CorruptFrameError as exc:
        raise MetadataRecordError(f"{name} v{version}: {exc}") from None
    except Exception as exc:
        raise MetadataRecordError(f"{name} v{version}: {type(exc).__name__}: {exc}") from None
    if end != len(mv):
        raise MetadataRecordError(f"{len(mv) - end} byte(s) of garbage after {name} v{version}")
    return record, version


def decode(data: bytes | bytearray | memoryview) -> Data:
    """The record in `data` (one whole framed record). MetadataRecordError if it is not one."""
    if type(data) is bytes and len(data) >= 3 and data[0] == FRAME_VERSION:
        api_key, version = data[1], data[2]
        found = _DECODERS.get((api_key, version)) if api_key < 0x80 and version < 0x80 else None
        if found is not None:  # the usual header of a type met before: no layer between
            try:
                record, end = found[0](memoryview(data), 3, len(data))
            except Exception:
                pass  # said as decode_with_version says it
            else:
                if end == len(data):
                    return record
    return decode_with_version(data)[0]
