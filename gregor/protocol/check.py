"""Slow, thorough checks of a message value against its declaration (never on the hot path).

- `problems(message, version, value)`: every field whose value the version cannot encode (a
  wrong type, an int out of range, None where the field is not nullable), by path. The codec
  calls it only after an encode has failed, to say which field was wrong.
- `dropped_fields(message, version, value)`: fields set to something other than their default
  that the version does not carry and that are not `ignorable`. Kafka's Java codec refuses to
  encode those (UnsupportedVersionException); ours drops them silently, so handler tests can
  call this to catch a value a client of that version would never see.
"""

from __future__ import annotations

import uuid
from typing import Any

from gregor.protocol.codegen import Data, EncodedArray, default_of
from gregor.protocol.schema.dsl import Field, Message, Struct

_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def problems(message: Message, version: int, value: Any) -> list[str]:
    out: list[str] = []
    _check_struct(message.root, version, value, message.name, out)
    return out


def _check_struct(s: Struct, version: int, value: Any, path: str, out: list[str]) -> None:
    if not isinstance(value, Data):
        out.append(f"{path}: expected a {s.name}, got {type(value).__name__}")
        return
    for f in s.fields:
        if version not in f.versions:
            continue
        try:
            v = getattr(value, f.name)
        except AttributeError:
            out.append(f"{path}.{f.name}: missing")
            continue
        _check_field(f, version, v, f"{path}.{f.name}", out)


def _check_field(f: Field, version: int, v: Any, path: str, out: list[str]) -> None:
    if v is None:
        if version not in f.nullable:
            out.append(f"{path}: None, but the field is not nullable in v{version}")
        return
    if f.array:
        if not isinstance(v, list | tuple | EncodedArray):
            out.append(f"{path}: expected a list, got {type(v).__name__}")
            return
        for i, item in enumerate(v):
            _check_element(f, version, item, f"{path}[{i}]", out)
        return
    _check_element(f, version, v, path, out)


def _check_element(f: Field, version: int, v: Any, path: str, out: list[str]) -> None:
    if f.struct is not None:
        _check_struct(f.struct, version, v, path, out)
        return
    t = f.type
    if t in _RANGES:
        lo, hi = _RANGES[t]
        if not isinstance(v, int):
            out.append(f"{path}: expected an int, got {type(v).__name__}")
        elif not lo <= v <= hi:
            out.append(f"{path}: {v} is out of range for {t}")
    elif t == "bool" and not isinstance(v, bool | int):
        out.append(f"{path}: expected a bool, got {type(v).__name__}")
    elif t == "float64" and not isinstance(v, float | int):
        out.append(f"{path}: expected a float, got {type(v).__name__}")
    elif t == "string":
        if not isinstance(v, str):
            out.append(f"{path}: expected a str, got {type(v).__name__}")
        elif len(v.encode("utf-8", "surrogatepass")) > 0x7FFF:
            out.append(f"{path}: longer than 32767 bytes")
    elif t == "uuid" and not isinstance(v, uuid.UUID):
        out.append(f"{path}: expected a uuid.UUID, got {type(v).__name__}")
    elif t == "bytes" and not isinstance(v, bytes | bytearray | memoryview):
        out.append(f"{path}: expected bytes, got {type(v).__name__}")
    elif t == "records" and not hasattr(v, "__len__"):
        out.append(f"{path}: expected bytes or a sized object, got {type(v).__name__}")


def dropped_fields(message: Message, version: int, value: Any) -> list[str]:
    out: list[str] = []
    _dropped(message.root, version, value, message.name, out)
    return out


def _is_default(f: Field, v: Any) -> bool:
    d = default_of(f)
    if d is list:
        return v == []
    if isinstance(d, Struct):
        return isinstance(v, Data) and all(_is_default(g, getattr(v, g.name)) for g in d.fields)
    return bool(v == d)


def _dropped(s: Struct, version: int, value: Any, path: str, out: list[str]) -> None:
    for f in s.fields:
        v = getattr(value, f.name, None)
        p = f"{path}.{f.name}"
        if version not in f.versions:
            if not f.ignorable and not _is_default(f, v):
                out.append(f"{p}: {v!r} cannot be sent in v{version}")
        elif f.struct is not None and v is not None:
            for i, item in enumerate(v if f.array else [v]):
                _dropped(f.struct, version, item, f"{p}[{i}]" if f.array else p, out)
