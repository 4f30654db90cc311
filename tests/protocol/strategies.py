"""Hypothesis strategies derived from our declarations: a message value for (api, kind, version).

Only fields present in the version are drawn; the others keep their defaults, which is what a
decoder gives back for them, so `decode(encode(x)) == x` holds for every drawn value.
"""

from __future__ import annotations

import os
import uuid
from functools import cache
from typing import Any

from hypothesis import strategies as st

from gregor.protocol import codec
from gregor.protocol.codegen import ZERO_UUID
from gregor.protocol.schema.dsl import Field, Struct

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
UUIDS = st.one_of(st.just(ZERO_UUID), st.uuids().map(lambda u: uuid.UUID(bytes=u.bytes)))


def _int(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)  # hypothesis favours small values and the bounds by itself


def _scalar(f: Field) -> st.SearchStrategy[Any]:
    t = f.type
    if t in _INTS:
        return _int(*_INTS[t])
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "bool":
        return st.booleans()
    if t == "uuid":
        return UUIDS
    if t == "string":
        return TEXT
    if t == "bytes":
        return st.binary(max_size=16)
    if t == "records":
        return st.binary(max_size=40)
    raise AssertionError(t)


def field_strategy(f: Field, version: int, max_list: int) -> st.SearchStrategy[Any]:
    if f.struct is not None:
        element = struct_strategy(f.struct, version, max_list)
    else:
        element = _scalar(f)
    if f.array:
        value: st.SearchStrategy[Any] = st.lists(element, max_size=max_list)
    else:
        value = element
    if version in f.nullable:
        value = st.one_of(st.none(), value)
    return value


def struct_strategy(s: Struct, version: int, max_list: int, cls: Any = None) -> Any:
    if cls is None:
        cls = _class_of(s)
    kwargs = {
        f.name: field_strategy(f, version, max_list) for f in s.fields if version in f.versions
    }
    return st.builds(cls, **kwargs)


_STRUCT_CLASSES: dict[int, Any] = {}


def _class_of(s: Struct) -> Any:
    return _STRUCT_CLASSES[id(s)]


def _register(api_key: int, kind: str) -> None:
    c = codec.codec_for(api_key, kind)
    msg = c.message
    _STRUCT_CLASSES[id(msg.root)] = c.cls
    for name, s in msg.structs.items():
        _STRUCT_CLASSES[id(s)] = c.cls._structs[name]


for _key in codec.CODEC_KEYS:
    _register(*_key)


@cache
def message_strategy(api_key: int, kind: str, version: int, max_list: int = 3) -> Any:
    msg = codec.codec_for(api_key, kind).message
    return struct_strategy(msg.root, version, max_list)


def all_cases() -> list[tuple[int, str, int]]:
    """Every (api_key, kind, version) we declare."""
    out = []
    for key, api in sorted(codec.APIS.items()):
        assert api.versions.high is not None
        for version in range(api.versions.low, api.versions.high + 1):
            for kind in ("request", "response"):
                out.append((key, kind, version))
    return out


def case_id(case: tuple[int, str, int]) -> str:
    key, kind, version = case
    return f"{codec.APIS[key].name}{kind.capitalize()}-v{version}"


# ---------------------------------------------------------------------------------------------
# A fast seeded generator (no shrinking) for the oracle comparisons, where many examples per
# version are cheap to check and a failure prints the value anyway.

_ERROR_CODES = [0, 0, 0, 1, 3, 6, 35, 42, 74, 87, -1]


def random_value(api_key: int, kind: str, version: int, rng: Any, max_list: int = 3) -> Any:
    msg = codec.codec_for(api_key, kind).message
    return _random_struct(msg.root, version, rng, max_list)


def _random_struct(s: Struct, version: int, rng: Any, max_list: int) -> Any:
    cls = _class_of(s)
    kwargs = {}
    for f in s.fields:
        if version in f.versions:
            kwargs[f.name] = _random_field(f, version, rng, max_list)
    return cls(**kwargs)


def _random_field(f: Field, version: int, rng: Any, max_list: int) -> Any:
    if version in f.nullable and rng.random() < 0.2:
        return None
    if f.array:
        return [_random_element(f, version, rng, max_list) for _ in range(rng.randint(0, max_list))]
    return _random_element(f, version, rng, max_list)


def _random_element(f: Field, version: int, rng: Any, max_list: int) -> Any:
    if f.struct is not None:
        return _random_struct(f.struct, version, rng, max_list)
    t = f.type
    if t in _INTS:
        lo, hi = _INTS[t]
        if f.name.endswith("error_code"):
            return rng.choice(_ERROR_CODES)
        r = rng.random()
        if r < 0.5:
            return rng.randint(max(lo, -1), min(hi, 1000))
        if r < 0.6:
            return rng.choice([lo, hi])
        return rng.randint(lo, hi)
    if t == "float64":
        return rng.choice([0.0, 1.5, -2.25, 1e300, rng.random()])
    if t == "bool":
        return rng.random() < 0.5
    if t == "uuid":
        return ZERO_UUID if rng.random() < 0.3 else uuid.UUID(int=rng.getrandbits(128))
    if t == "string":
        return "".join(rng.choice("abcxyz-_.é漢") for _ in range(rng.randint(0, 10)))
    if t in ("bytes", "records"):
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 30)))
    raise AssertionError(t)


def examples(fast: int) -> int:
    """How many examples a property test runs: `fast` by default, 20x with
    GREGOR_PROTOCOL_THOROUGH=1 (for a deeper run before a release or after a schema change)."""
    return fast * 20 if os.environ.get("GREGOR_PROTOCOL_THOROUGH") else fast
