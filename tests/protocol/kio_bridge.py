"""Test-only bridge to kio (an independent Python codec generated from Kafka's JSON specs).

`to_kio(value, schema, version, kio_class)` converts one of our message values to kio's
dataclasses, matching fields by position (both follow the spec's field order), and adjusts
our value in place where kio's richer types cannot hold it (an unknown error code becomes 0,
an int64 timestamp outside datetime's range is clamped), so both sides encode the same thing.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.serial.readers import tz_aware_from_i64
from kio.static.primitive import Records

from gregor.protocol.schema.dsl import Field, Struct

_VALID_ERRORS = {e.value for e in ErrorCode}
_MODULE_NAMES: dict[str, str] = {}


def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if (
            ch.isupper()
            and i
            and (not name[i - 1].isupper() or (i + 1 < len(name) and name[i + 1].islower()))
        ):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def kio_class(api_name: str, kind: str, version: int) -> type | None:
    module = _snake(api_name)
    try:
        mod = importlib.import_module(f"kio.schema.{module}.v{version}.{kind}")
    except ModuleNotFoundError:
        return None
    return getattr(mod, f"{api_name}{kind.capitalize()}", None)


def kio_encode(obj: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    return buf.getvalue()


def kio_decode(cls: type, data: bytes) -> Any:
    obj, _size = entity_reader(cls)(data, 0)
    return obj


def to_kio(value: Any, s: Struct, version: int, cls: type, path: str = "") -> Any:
    present = [f for f in s.fields if version in f.versions]
    kfields = dataclasses.fields(cls)
    names = [f.name for f in present]
    knames = [f.name for f in kfields]
    if len(present) != len(kfields):
        raise AssertionError(f"{path or s.name} v{version}: fields {names} vs kio {knames}")
    kwargs = {}
    for f, kf in zip(present, kfields, strict=True):
        kwargs[kf.name] = _convert(value, f, kf, version, f"{path}{s.name}.{f.name}")
    return cls(**kwargs)


def _convert(owner: Any, f: Field, kf: Any, version: int, path: str) -> Any:
    v = getattr(owner, f.name)
    fc = classify_field(kf)
    if v is None:
        return None
    if isinstance(fc, EntityTupleField):
        assert f.struct is not None, path
        return tuple(to_kio(x, f.struct, version, fc.type_, path + "[].") for x in v)
    if isinstance(fc, EntityField):
        assert f.struct is not None, path
        return to_kio(v, f.struct, version, fc.type_, path + ".")
    kafka_type = kf.metadata.get("kafka_type")
    if isinstance(fc, PrimitiveTupleField):
        return tuple(v)
    assert isinstance(fc, PrimitiveField), path
    if kafka_type == "error_code":
        if v not in _VALID_ERRORS:
            v = 0
            setattr(owner, f.name, v)
        return ErrorCode(v)
    if kafka_type == "timedelta_i32":
        return datetime.timedelta(milliseconds=v)
    if kafka_type == "timedelta_i64":
        if abs(v) > 2**40:
            v = 2**40 if v > 0 else -(2**40)
            setattr(owner, f.name, v)
        return datetime.timedelta(milliseconds=v)
    if kafka_type == "datetime_i64":
        if v == -1 and is_optional(kf):
            return None
        if not 0 <= v <= 2**41:
            v = min(max(v, 0), 2**41)
            setattr(owner, f.name, v)
        return tz_aware_from_i64(v)
    if kafka_type == "uuid" and v.int == 0 and is_optional(kf):
        return None  # kio's spelling of the zero uuid (its default for tagged uuids)
    if kafka_type == "records":
        return Records(bytes(v))
    if kafka_type == "bytes":
        return bytes(v)
    return v
