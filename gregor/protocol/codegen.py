"""Turns a declared message into classes and straight-line encode/decode functions.

Built once per process from `schema/`: for every struct of a message, one class (`__slots__`,
every field of every version, keyword-only `__init__` with Kafka's defaults); for every
(message, version), one decode and one encode function, generated as Python source and
`exec`'d. The source has no per-field dispatch: each field becomes the few lines that read or
write it, consecutive fixed-width fields share one precompiled `struct.Struct`, arrays become
`for` loops, and a field absent in the version becomes an assignment of its default.

Decoder contract: `decode(mv, pos, end) -> (obj, pos)`. `mv` is a memoryview of format "B";
every read is checked against `end` first and a failed check raises `CorruptFrameError` naming
the field path and the offset. `records` fields come back as `mv[pos:pos+n]` (a view, no
copy); `bytes` fields as `bytes`; strings as `str`; uuids as `uuid.UUID`. Unknown tagged
fields are skipped; a known tagged field's bytes are parsed within its declared size.

Encoder contract: `encode(obj, out, buf) -> buf`. Small fields are appended to the bytearray
`buf`; a `records` value gets its length prefix in `buf`, then `buf` and the value itself go to
the list `out` and a fresh `buf` continues. The caller appends the final `buf`. A `records`
value may be any bytes-like object, or any object with `__len__` (a file slice for sendfile),
which is placed in `out` untouched. Tagged fields are written only when they differ from their
default, in tag order.

Each class also gets `_make(**fields)`, a plain function building the same object as the
class called with those keywords: calling a class with keywords gathers them into a dict for
`__init__`, a plain function takes them as they are, so hot paths (a Fetch's answers) use it.

Generated source is cached by text per message: versions with the same wire layout (Produce
v3-v8, say) share one compiled function. `source_of()` shows what was generated.
"""

from __future__ import annotations

import linecache
import math
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from gregor.protocol.exceptions import CorruptFrameError
from gregor.protocol.schema.dsl import NO_VERSIONS, TYPE_DEFAULT, Field, Message, Struct
from gregor.protocol.uuids import uuid_from_bytes

ZERO_UUID = uuid.UUID(int=0)

_FIXED: dict[str, str] = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
    "bool": "?",
    "uuid": "16s",
}

_TYPE_DEFAULTS: dict[str, object] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "uint32": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": None,
    "uuid": ZERO_UUID,
}


class Data:
    """Base of every generated message and struct class.

    Attribute access, keyword construction, equality by value and a readable repr. The class of
    a message carries its structs as attributes: `ProduceResponse.PartitionProduceResponse`.
    """

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _structs: ClassVar[dict[str, type[Data]]] = {}

    if TYPE_CHECKING:  # the generated classes take their fields as keywords and attributes

        def __init__(self, **fields: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

        @classmethod
        def _make(cls, **fields: Any) -> Any: ...

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts and lists all the way down (records and bytes left as they are)."""
        return {f: _plain(getattr(self, f)) for f in self._fields}


def _plain(value: object) -> object:
    if isinstance(value, Data):
        return value.to_dict()
    if isinstance(value, list | EncodedArray):
        return [_plain(v) for v in value]
    return value


_UNSET: Any = type("_Unset", (), {"__repr__": lambda self: "<unset>"})()


class EncodedArray(Sequence[Any]):
    """The value of an `encoded` array field (schema/dsl.py) as its bytes for one version:
    `data` is what that version's encoder would write for the array, its length first, and is
    written as it is; `read()` gives its elements (decoded from `data`, say) to anything else
    that looks at it: readers, and an encoder of another version. `length`: its elements."""

    __slots__ = ("version", "length", "data", "_read", "_items")

    def __init__(
        self, version: int, length: int, data: bytes, read: Callable[[EncodedArray], list[Any]]
    ) -> None:
        self.version, self.length, self.data = version, length, data
        self._read = read
        self._items: list[Any] | None = None

    def items(self) -> list[Any]:
        if self._items is None:
            self._items = self._read(self)
            assert len(self._items) == self.length, "an encoded array read as another length"
        return self._items

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: Any) -> Any:
        return self.items()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EncodedArray):
            if self.version == other.version and self.data == other.data:
                return True
            return self.items() == other.items()
        if isinstance(other, list):
            return self.items() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.items())


# ---------------------------------------------------------------------------------------------
# Runtime helpers the generated code calls (rarely: only off the fast paths).


def _eof(path: str, pos: int, need: int, end: int) -> CorruptFrameError:
    return CorruptFrameError(
        f"{path}: needs {need} bytes at offset {pos}, only {max(end - pos, 0)} left"
    )


def _bad(path: str, pos: int, what: str) -> CorruptFrameError:
    return CorruptFrameError(f"{path}: {what} at offset {pos}")


def _uvarint(mv: memoryview, pos: int, end: int, path: str) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's readUnsignedVarint)."""
    if end - pos >= 3:  # the common short forms, unrolled
        b0 = mv[pos]
        if b0 < 0x80:
            return b0, pos + 1
        b1 = mv[pos + 1]
        if b1 < 0x80:
            return (b0 & 0x7F) | (b1 << 7), pos + 2
        b2 = mv[pos + 2]
        if b2 < 0x80:
            return (b0 & 0x7F) | ((b1 & 0x7F) << 7) | (b2 << 14), pos + 3
    value = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise _eof(path, pos, 1, end)
        b = mv[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise _bad(path, start, "varint longer than 5 bytes")


def _skip_tags(mv: memoryview, pos: int, end: int, count: int, path: str) -> int:
    for _ in range(count):
        _tag, pos = _uvarint(mv, pos, end, path)
        size, pos = _uvarint(mv, pos, end, path)
        if size > end - pos:
            raise _eof(path, pos, size, end)
        pos += size
    return pos


def uvarint_bytes(value: int) -> bytes:
    """Encode a non-negative int as an unsigned varint (unrolled for up to three bytes)."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"unsigned varint of negative {value}")
        return bytes((value,))
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_UUIDS: dict[bytes, uuid.UUID] = {}


def _uuid(raw: bytes) -> uuid.UUID:
    """The UUID of 16 bytes read; the same few (topic ids) come again and again, so each is
    made once (a UUID is immutable)."""
    found = _UUIDS.get(raw)
    if found is None:
        found = ZERO_UUID if raw == b"\x00" * 16 else uuid_from_bytes(raw)
        if len(_UUIDS) >= 65536:
            _UUIDS.clear()
        _UUIDS[raw] = found
    return found


def _records_len(value: Any) -> int:
    return value.nbytes if type(value) is memoryview else len(value)


_BASE_NAMESPACE: dict[str, object] = {
    "_eof": _eof,
    "_bad": _bad,
    "_uv": _uvarint,
    "_skip_tags": _skip_tags,
    "_uvb": uvarint_bytes,
    "_uuid": _uuid,
    "_rlen": _records_len,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
    "_ZERO_UUID": ZERO_UUID,
    "_UNSET": _UNSET,
    "_bytes": bytes,
    "_str": str,
    "_len": len,
    "_bytearray": bytearray,
    "_EncodedArray": EncodedArray,
}


# ---------------------------------------------------------------------------------------------
# Defaults.


def default_of(f: Field) -> object:
    """The field's default as an immutable value, or `list`/`Struct` markers for fresh ones."""
    if f.default is not TYPE_DEFAULT:
        if f.type == "uuid" and isinstance(f.default, str):
            return uuid.UUID(f.default)
        return f.default
    if f.array:
        return list
    if f.struct is not None:
        return f.struct
    return _TYPE_DEFAULTS[f.type]


# ---------------------------------------------------------------------------------------------
# Classes.


def build_classes(message: Message) -> type[Data]:
    """One class per struct of the message; the root class carries the others as attributes."""
    classes: dict[str, type[Data]] = {}
    structs = [message.root, *message.structs.values()]
    for s in structs:
        slots = tuple(f.name for f in s.fields)
        qualname = s.name if s is message.root else f"{message.name}.{s.name}"
        cls = type(
            s.name,
            (Data,),
            {
                "__slots__": slots,
                "_fields": slots,
                "__module__": "gregor.protocol.messages",
                "__qualname__": qualname,
                "__doc__": f"{message.name} struct {s.name}." if s is not message.root else None,
            },
        )
        classes[s.name] = cls
    namespace: dict[str, object] = {"_UNSET": _UNSET}
    for name, cls in classes.items():
        namespace["C_" + name] = cls
    for s in structs:
        _install_init(classes[s.name], s, namespace)
    root = classes[message.root.name]
    for name, cls in classes.items():
        if cls is not root:
            setattr(root, name, cls)
    root._structs = classes
    return root


def _install_init(cls: type[Data], s: Struct, namespace: dict[str, object]) -> None:
    params = []
    body = []
    consts: dict[str, object] = {}
    for i, f in enumerate(s.fields):
        d = default_of(f)
        if d is list:
            params.append(f"{f.name}=_UNSET")
            body.append(f"    self.{f.name} = [] if {f.name} is _UNSET else {f.name}")
        elif isinstance(d, Struct):
            params.append(f"{f.name}=_UNSET")
            body.append(f"    self.{f.name} = C_{d.name}() if {f.name} is _UNSET else {f.name}")
        else:
            name = f"_d{i}"
            consts[name] = d
            params.append(f"{f.name}={name}")
            body.append(f"    self.{f.name} = {f.name}")
    sig = ", ".join(["self", "*", *params]) if params else "self"
    src = f"def __init__({sig}):\n" + ("\n".join(body) if body else "    pass") + "\n"
    # `_make`: the same, as a plain function that returns the object (module docstring).
    make_sig = ", ".join(["*", *params]) if params else ""
    src += f"def _make({make_sig}):\n    self = _new(C_{s.name})\n"
    src += "".join(line + "\n" for line in body) + "    return self\n"
    compare = " and ".join(f"self.{f.name} == other.{f.name}" for f in s.fields) or "True"
    src += "def __eq__(self, other):\n"
    src += "    if type(other) is not type(self):\n        return NotImplemented\n"
    src += f"    return {compare}\n"
    ns = dict(namespace)
    ns.update(consts)
    ns["_new"] = object.__new__
    exec(compile(src, f"<gregor init {cls.__qualname__}>", "exec"), ns)
    for method in ("__init__", "__eq__", "_make"):
        fn = ns[method]
        fn.__qualname__ = f"{cls.__qualname__}.{method}"  # type: ignore[attr-defined]
        setattr(cls, method, staticmethod(fn) if method == "_make" else fn)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Source generation.


class _Namespace:
    """Constants shared by every function generated for one message: one name per value."""

    def __init__(self, classes: dict[str, type[Data]]) -> None:
        self.values: dict[str, object] = dict(_BASE_NAMESPACE)
        self.names: dict[tuple[str, object], str] = {}
        for name, cls in classes.items():
            self.values["C_" + name] = cls

    def const(self, kind: str, key: object, value: object) -> str:
        name = self.names.get((kind, key))
        if name is None:
            name = f"_{kind}{len(self.names)}"
            self.names[(kind, key)] = name
            self.values[name] = value
        return name

    def unpacker(self, fmt: str) -> str:
        return self.const("U", fmt, struct.Struct(">" + fmt).unpack_from)

    def packer(self, fmt: str) -> str:
        return self.const("P", fmt, struct.Struct(">" + fmt).pack)

    def path(self, text: str) -> str:
        return self.const("p", text, text)

    def value(self, v: object) -> str:
        """A Python expression for an immutable default value."""
        if v is None or isinstance(v, bool | int | str | bytes):
            return repr(v)
        if isinstance(v, float) and math.isfinite(v):
            return repr(v)
        if v == ZERO_UUID:
            return "_ZERO_UUID"
        return self.const("v", repr(v), v)

    def struct_default(self, s: Struct) -> str:
        """A shared default instance, for comparisons only (never handed out)."""
        name = "D_" + s.name
        if name not in self.values:
            cls = self.values["C_" + s.name]
            assert isinstance(cls, type)
            self.values[name] = cls()
        return name


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.counter = 0

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def var(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"


def _fixed(f: Field) -> bool:
    return not f.array and f.type in _FIXED


def _min_size(s: Struct, version: int, flexible: bool) -> int:
    """The fewest bytes one instance of the struct can take on the wire in this version."""
    total = 1 if flexible else 0
    for f in s.fields:
        if version not in f.versions or (flexible and f.tag is not None):
            continue
        if f.array or f.type in ("bytes", "records"):
            total += 1 if flexible else 4
        elif f.type == "string":
            total += 1 if flexible else 2
        elif f.type in _FIXED:
            total += struct.calcsize(">" + _FIXED[f.type])
        elif f.struct is not None:
            total += 1 if version in f.nullable else _min_size(f.struct, version, flexible)
    return total


def _element_of(f: Field) -> Field:
    """The field an array of a primitive type holds: one non-null, untagged value."""
    return Field(
        name=f.name,
        type=f.type,
        array=False,
        versions=f.versions,
        nullable=NO_VERSIONS,
        tag=None,
        default=TYPE_DEFAULT,
        ignorable=False,
        about="",
    )


class _Gen:
    """What both generators know: the message, the version, its flexibility, the names."""

    def __init__(self, message: Message, version: int, ns: _Namespace) -> None:
        self.m = message
        self.v = version
        self.flex = message.is_flexible(version)
        self.ns = ns
        self.w = _Writer()


class _DecoderGen(_Gen):
    def generate(self) -> str:
        w = self.w
        w.emit(0, "def decode(mv, pos, end):")
        w.emit(1, f"o = _new(C_{self.m.root.name})")
        self.struct_body(self.m.root, "o", "end", "", 1)
        w.emit(1, "return o, pos")
        return "\n".join(w.lines) + "\n"

    def default(self, f: Field, target: str, depth: int) -> None:
        """Assign the field's default; a struct default is built inline (no __init__ call)."""
        d = default_of(f)
        if d is list:
            self.w.emit(depth, f"{target} = []")
        elif isinstance(d, Struct):
            t = self.w.var("d")
            self.w.emit(depth, f"{t} = _new(C_{d.name})")
            for g in d.fields:
                self.default(g, f"{t}.{g.name}", depth)
            self.w.emit(depth, f"{target} = {t}")
        else:
            self.w.emit(depth, f"{target} = {self.ns.value(d)}")

    def struct_body(self, s: Struct, o: str, end: str, path: str, depth: int) -> None:
        tagged = []
        regular = []
        for f in s.fields:
            if self.v not in f.versions:
                self.default(f, f"{o}.{f.name}", depth)
            elif self.flex and f.tag is not None:
                self.default(f, f"{o}.{f.name}", depth)
                tagged.append(f)
            else:
                regular.append(f)
        run: list[Field] = []
        for f in regular:
            if _fixed(f):
                run.append(f)
                continue
            self.fixed_run(run, o, end, path, depth)
            run = []
            self.field(f, f"{o}.{f.name}", end, f"{path}{f.name}", depth)
        self.fixed_run(run, o, end, path, depth)
        if self.flex:
            self.tag_section(tagged, o, end, path, depth)

    def fixed_run(self, run: list[Field], o: str, end: str, path: str, depth: int) -> None:
        if not run:
            return
        w = self.w
        fmt = "".join(_FIXED[f.type] for f in run)
        width = struct.calcsize(">" + fmt)
        p = self.ns.path(f"{path}{run[0].name}")
        w.emit(depth, f"if {end} - pos < {width}:")
        w.emit(depth + 1, f"raise _eof({p}, pos, {width}, {end})")
        unpack = self.ns.unpacker(fmt)
        if any(f.type == "uuid" for f in run):
            temps = [self.w.var("t") for _ in run]
            w.emit(depth, f"{', '.join(temps)}, = {unpack}(mv, pos)")
            for f, t in zip(run, temps, strict=True):
                value = f"_uuid({t})" if f.type == "uuid" else t
                w.emit(depth, f"{o}.{f.name} = {value}")
        else:
            targets = ", ".join(f"{o}.{f.name}" for f in run)
            w.emit(depth, f"{targets}, = {unpack}(mv, pos)")
        w.emit(depth, f"pos += {width}")

    def length(self, target: str, end: str, p: str, depth: int, nullable: bool, what: str) -> None:
        """Read a length into `target`; leaves -1 for null (only if nullable) else >= 0."""
        w = self.w
        if self.flex:
            w.emit(depth, f"if pos >= {end}:")
            w.emit(depth + 1, f"raise _eof({p}, pos, 1, {end})")
            w.emit(depth, f"{target} = mv[pos]")
            w.emit(depth, "pos += 1")
            w.emit(depth, f"if {target} > 127:")
            # The 2-byte form inline (lengths 127 to 16,382: a produced partition's records
            # mostly); longer ones, and a varint cut by the end, in `_uv`.
            w.emit(depth + 1, f"if pos < {end} and mv[pos] < 128:")
            w.emit(depth + 2, f"{target} = ({target} & 127) | mv[pos] << 7")
            w.emit(depth + 2, "pos += 1")
            w.emit(depth + 1, "else:")
            w.emit(depth + 2, f"{target}, pos = _uv(mv, pos - 1, {end}, {p})")
            w.emit(depth, f"{target} -= 1")
            if not nullable:
                w.emit(depth, f"if {target} < 0:")
                w.emit(
                    depth + 1, f"raise _bad({p}, pos - 1, 'null {what} in a non-nullable field')"
                )
        else:
            fmt, width = ("h", 2) if what == "string" else ("i", 4)
            unpack = self.ns.unpacker(fmt)
            w.emit(depth, f"if {end} - pos < {width}:")
            w.emit(depth + 1, f"raise _eof({p}, pos, {width}, {end})")
            w.emit(depth, f"{target}, = {unpack}(mv, pos)")
            w.emit(depth, f"pos += {width}")
            w.emit(depth, f"if {target} < {-1 if nullable else 0}:")
            w.emit(depth + 1, f"raise _bad({p}, pos - {width}, 'bad {what} length %d' % {target})")

    def field(self, f: Field, target: str, end: str, path: str, depth: int) -> None:
        w = self.w
        p = self.ns.path(path)
        nullable = self.v in f.nullable
        if f.array:
            self.array(f, target, end, path, depth, nullable)
        elif f.type in ("string", "bytes", "records"):
            n = w.var("n")
            self.length(n, end, p, depth, nullable, f.type if f.type == "string" else "bytes")
            inner = depth
            if nullable:
                w.emit(depth, f"if {n} < 0:")
                w.emit(depth + 1, f"{target} = None")
                w.emit(depth, "else:")
                inner = depth + 1
            w.emit(inner, f"if {n} > {end} - pos:")
            w.emit(inner + 1, f"raise _eof({p}, pos, {n}, {end})")
            if f.type == "string":
                w.emit(inner, f"{target} = _str(mv[pos:pos + {n}], 'utf-8')")
            elif f.type == "bytes":
                w.emit(inner, f"{target} = _bytes(mv[pos:pos + {n}])")
            else:
                w.emit(inner, f"{target} = mv[pos:pos + {n}]")
            w.emit(inner, f"pos += {n}")
        elif f.struct is not None:
            inner = depth
            if nullable:
                w.emit(depth, f"if pos >= {end}:")
                w.emit(depth + 1, f"raise _eof({p}, pos, 1, {end})")
                w.emit(depth, "pos += 1")
                w.emit(depth, "if mv[pos - 1] > 127:")
                w.emit(depth + 1, f"{target} = None")
                w.emit(depth, "else:")
                inner = depth + 1
            o = w.var("o")
            w.emit(inner, f"{o} = _new(C_{f.struct.name})")
            w.emit(inner, f"{target} = {o}")
            self.struct_body(f.struct, o, end, path + ".", inner)
        else:
            # A lone fixed-width field (inside a tagged field or an array).
            fmt = _FIXED[f.type]
            width = struct.calcsize(">" + fmt)
            w.emit(depth, f"if {end} - pos < {width}:")
            w.emit(depth + 1, f"raise _eof({p}, pos, {width}, {end})")
            unpack = self.ns.unpacker(fmt)
            if f.type == "uuid":
                w.emit(depth, f"{target} = _uuid({unpack}(mv, pos)[0])")
            else:
                w.emit(depth, f"{target}, = {unpack}(mv, pos)")
            w.emit(depth, f"pos += {width}")

    def array(self, f: Field, target: str, end: str, path: str, depth: int, nullable: bool) -> None:
        w = self.w
        p = self.ns.path(path + "[]")
        n = w.var("n")
        self.length(n, end, p, depth, nullable, "array")
        inner = depth
        if nullable:
            w.emit(depth, f"if {n} < 0:")
            w.emit(depth + 1, f"{target} = None")
            w.emit(depth, "else:")
            inner = depth + 1
        if f.struct is not None:
            size = max(_min_size(f.struct, self.v, self.flex), 1)
        elif f.type in _FIXED:
            size = struct.calcsize(">" + _FIXED[f.type])
        else:
            size = 1 if self.flex else (2 if f.type == "string" else 4)
        w.emit(inner, f"if {n} * {size} > {end} - pos:")
        w.emit(inner + 1, f"raise _eof({p}, pos, {n} * {size}, {end})")
        if f.type in _FIXED and f.type != "uuid":
            code = _FIXED[f.type]
            w.emit(inner, f"{target} = list(_unpack_from('>%d{code}' % {n}, mv, pos))")
            w.emit(inner, f"pos += {n} * {size}")
            return
        lst = w.var("l")
        w.emit(inner, f"{lst} = []")
        w.emit(inner, f"{target} = {lst}")
        w.emit(inner, f"for _ in range({n}):")
        if f.struct is not None:
            o = w.var("o")
            w.emit(inner + 1, f"{o} = _new(C_{f.struct.name})")
            self.struct_body(f.struct, o, end, path + "[].", inner + 1)
            w.emit(inner + 1, f"{lst}.append({o})")
        else:
            item = w.var("x")
            element = _element_of(f)
            self.field(element, item, end, path + "[]", inner + 1)
            w.emit(inner + 1, f"{lst}.append({item})")

    def tag_section(self, tagged: list[Field], o: str, end: str, path: str, depth: int) -> None:
        w = self.w
        p = self.ns.path(path + "_tagged_fields")
        count = w.var("k")
        w.emit(depth, f"if pos >= {end}:")
        w.emit(depth + 1, f"raise _eof({p}, pos, 1, {end})")
        w.emit(depth, f"{count} = mv[pos]")
        w.emit(depth, "pos += 1")
        w.emit(depth, f"if {count}:")
        if not tagged:
            w.emit(depth + 1, f"if {count} > 127:")
            w.emit(depth + 2, f"{count}, pos = _uv(mv, pos - 1, {end}, {p})")
            w.emit(depth + 1, f"pos = _skip_tags(mv, pos, {end}, {count}, {p})")
            return
        d = depth + 1
        w.emit(d, f"if {count} > 127:")
        w.emit(d + 1, f"{count}, pos = _uv(mv, pos - 1, {end}, {p})")
        tag, size, tend = w.var("tag"), w.var("size"), w.var("tend")
        w.emit(d, f"for _ in range({count}):")
        w.emit(d + 1, f"{tag}, pos = _uv(mv, pos, {end}, {p})")
        w.emit(d + 1, f"{size}, pos = _uv(mv, pos, {end}, {p})")
        w.emit(d + 1, f"if {size} > {end} - pos:")
        w.emit(d + 2, f"raise _eof({p}, pos, {size}, {end})")
        w.emit(d + 1, f"{tend} = pos + {size}")
        keyword = "if"
        for f in sorted(tagged, key=lambda f: f.tag or 0):
            w.emit(d + 1, f"{keyword} {tag} == {f.tag}:")
            self.field(f, f"{o}.{f.name}", tend, f"{path}{f.name}", d + 2)
            keyword = "elif"
        w.emit(d + 1, f"pos = {tend}")


class _EncoderGen(_Gen):
    def generate(self) -> str:
        w = self.w
        w.emit(0, "def encode(o, out, buf):")
        self.struct_body(self.m.root, "o", "buf", 1)
        w.emit(1, "return buf")
        return "\n".join(w.lines) + "\n"

    def struct_body(self, s: Struct, o: str, buf: str, depth: int) -> None:
        tagged = []
        run: list[Field] = []
        for f in s.fields:
            if self.v not in f.versions:
                continue
            if self.flex and f.tag is not None:
                tagged.append(f)
                continue
            if _fixed(f):
                run.append(f)
                continue
            self.fixed_run(run, o, buf, depth)
            run = []
            self.field(f, f"{o}.{f.name}", buf, depth)
        self.fixed_run(run, o, buf, depth)
        if self.flex:
            self.tag_section(tagged, o, buf, depth)

    def fixed_run(self, run: list[Field], o: str, buf: str, depth: int) -> None:
        if not run:
            return
        fmt = "".join(_FIXED[f.type] for f in run)
        args = ", ".join(
            f"{o}.{f.name}.bytes" if f.type == "uuid" else f"{o}.{f.name}" for f in run
        )
        self.w.emit(depth, f"{buf} += {self.ns.packer(fmt)}({args})")

    def length(self, n: str, buf: str, depth: int, what: str) -> None:
        w = self.w
        if self.flex:
            w.emit(depth, f"if {n} < 127:")
            w.emit(depth + 1, f"{buf}.append({n} + 1)")
            w.emit(depth, "else:")
            w.emit(depth + 1, f"{buf} += _uvb({n} + 1)")
        else:
            fmt = "h" if what == "string" else "i"
            w.emit(depth, f"{buf} += {self.ns.packer(fmt)}({n})")

    def null(self, buf: str, depth: int, what: str) -> None:
        if self.flex:
            self.w.emit(depth, f"{buf}.append(0)")
        else:
            minus_one = b"\xff\xff" if what == "string" else b"\xff\xff\xff\xff"
            self.w.emit(depth, f"{buf} += {minus_one!r}")

    def field(self, f: Field, value: str, buf: str, depth: int) -> None:
        w = self.w
        nullable = self.v in f.nullable
        v = w.var("v")
        w.emit(depth, f"{v} = {value}")
        inner = depth
        if nullable:
            w.emit(depth, f"if {v} is None:")
            if f.struct is not None and not f.array:
                w.emit(depth + 1, f"{buf}.append(255)")
            else:
                self.null(buf, depth + 1, "string" if f.type == "string" and not f.array else "x")
            w.emit(depth, "else:")
            inner = depth + 1
        if f.array:
            self.array(f, v, buf, inner)
        elif f.type == "string":
            b, n = w.var("b"), w.var("n")
            w.emit(inner, f"{b} = {v}.encode()")
            w.emit(inner, f"{n} = _len({b})")
            self.length(n, buf, inner, "string")
            w.emit(inner, f"{buf} += {b}")
        elif f.type == "bytes":
            n = w.var("n")
            w.emit(inner, f"{n} = _rlen({v})")
            self.length(n, buf, inner, "bytes")
            w.emit(inner, f"{buf} += {v}")
        elif f.type == "records":
            n = w.var("n")
            w.emit(inner, f"{n} = _rlen({v})")
            self.length(n, buf, inner, "bytes")
            w.emit(inner, f"if {n}:")
            w.emit(inner + 1, f"out.append({buf})")
            w.emit(inner + 1, f"out.append({v})")
            w.emit(inner + 1, f"{buf} = _bytearray()")
        elif f.struct is not None:
            if nullable:
                w.emit(inner, f"{buf}.append(1)")
            self.struct_body(f.struct, v, buf, inner)
        else:
            fmt = _FIXED[f.type]
            arg = f"{v}.bytes" if f.type == "uuid" else v
            w.emit(inner, f"{buf} += {self.ns.packer(fmt)}({arg})")

    def array(self, f: Field, lst: str, buf: str, depth: int) -> None:
        w = self.w
        if f.encoded:  # its bytes, when made for this version (EncodedArray)
            w.emit(depth, f"if type({lst}) is _EncodedArray and {lst}.version == {self.v}:")
            w.emit(depth + 1, f"{buf} += {lst}.data")
            w.emit(depth, "else:")
            depth += 1
        n = w.var("n")
        w.emit(depth, f"{n} = _len({lst})")
        self.length(n, buf, depth, "array")
        if f.type in _FIXED and f.type != "uuid":
            w.emit(depth, f"if {n}:")
            w.emit(depth + 1, f"{buf} += _pack('>%d{_FIXED[f.type]}' % {n}, *{lst})")
            return
        item = w.var("x")
        w.emit(depth, f"for {item} in {lst}:")
        if f.struct is not None:
            self.struct_body(f.struct, item, buf, depth + 1)
        else:
            element = _element_of(f)
            self.field(element, item, buf, depth + 1)

    def differs(self, f: Field, value: str) -> str:
        d = default_of(f)
        if d is list:
            return f"{value} != []"
        if isinstance(d, Struct):
            if all(_fixed(g) and not isinstance(default_of(g), Struct) for g in d.fields):
                # A flat struct: compare its fields with their defaults inline (no __eq__ call).
                parts = [f"{value}.{g.name} != {self.ns.value(default_of(g))}" for g in d.fields]
                return "(" + " or ".join(parts) + ")"
            return f"{value} != {self.ns.struct_default(d)}"
        if d is None:
            return f"{value} is not None"
        return f"{value} != {self.ns.value(d)}"

    def tag_section(self, tagged: list[Field], o: str, buf: str, depth: int) -> None:
        w = self.w
        if not tagged:
            w.emit(depth, f"{buf}.append(0)")
            return
        ordered = sorted(tagged, key=lambda f: f.tag or 0)
        flags = [w.var("c") for _ in ordered]
        for f, c in zip(ordered, flags, strict=True):
            w.emit(depth, f"{c} = {self.differs(f, f'{o}.{f.name}')}")
        count = w.var("k")
        w.emit(depth, f"{count} = {' + '.join(flags)}")
        w.emit(depth, f"{buf}.append({count})")  # fewer than 128 tagged fields
        for f, c in zip(ordered, flags, strict=True):
            tb = w.var("tb")
            w.emit(depth, f"if {c}:")
            w.emit(depth + 1, f"{tb} = _bytearray()")
            self.field(f, f"{o}.{f.name}", tb, depth + 1)
            w.emit(depth + 1, f"{buf} += {uvarint_bytes(f.tag or 0)!r}")
            w.emit(depth + 1, f"{buf} += _uvb(_len({tb}))")
            w.emit(depth + 1, f"{buf} += {tb}")


Encoder = Callable[[Any, list[Any], bytearray], bytearray]
Decoder = Callable[[memoryview, int, int], tuple[Any, int]]


class MessageCodec:
    """Classes and per-version functions of one message; functions are compiled on first use."""

    def __init__(self, message: Message) -> None:
        self.message = message
        self.cls = build_classes(message)
        self.ns = _Namespace(self.cls._structs)
        self.ns.values["_new"] = object.__new__
        self._compiled: dict[str, Callable[..., Any]] = {}
        self._encoders: dict[int, Encoder] = {}
        self._decoders: dict[int, Decoder] = {}
        self._sources: dict[tuple[str, int], str] = {}

    def _compile(self, source: str, tag: str) -> Callable[..., Any]:
        fn = self._compiled.get(source)
        if fn is None:
            ns = self.ns.values
            filename = f"<gregor {self.message.name} {tag}>"
            exec(compile(source, filename, "exec"), ns)
            # Tracebacks through generated code show its lines.
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            made = ns.pop(source.split("(", 1)[0][4:])
            assert callable(made)
            fn = self._compiled[source] = made
        return fn

    def _check(self, version: int) -> None:
        if version not in self.message.versions:
            raise ValueError(f"{self.message.name} has no version {version}")

    def encoder(self, version: int) -> Encoder:
        fn = self._encoders.get(version)
        if fn is None:
            self._check(version)
            source = _EncoderGen(self.message, version, self.ns).generate()
            self._sources[("encode", version)] = source
            fn = self._encoders[version] = self._compile(source, f"v{version} encode")
        return fn

    def decoder(self, version: int) -> Decoder:
        fn = self._decoders.get(version)
        if fn is None:
            self._check(version)
            source = _DecoderGen(self.message, version, self.ns).generate()
            self._sources[("decode", version)] = source
            fn = self._decoders[version] = self._compile(source, f"v{version} decode")
        return fn

    def source_of(self, op: str, version: int) -> str:
        """The generated source of `encode`/`decode` for a version (for reading and debugging)."""
        (self.encoder if op == "encode" else self.decoder)(version)
        return self._sources[(op, version)]
