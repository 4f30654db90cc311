"""The declaration language for Kafka messages, and its parsed model.

One API is declared by one `api(...)` call: its key, name, the versions we declare and the
first flexible version, and two text blocks, the request's fields and the response's. A block
has one line per field, children indented by two spaces under a struct or struct-array field:

    name: type [versions R] [nullable [R]] [tag N] [default V] [ignorable] [encoded]   # about

- `type` is a primitive (`int8 int16 int32 int64 uint16 uint32 float64 bool uuid string bytes
  records`), a struct name (CamelCase, with indented children, or declared once with a
  `struct Name` block at column 0 and then used by name anywhere in the message, which is
  Kafka's `commonStructs`), or `[]` before either for an array.
- `R` is a version range, absolute in the message's numbering: `3+`, `3-7`, `5` or `none`.
  A field without `versions` is in every version. A child is only on the wire in a version
  where its parent is, so most children need no `versions` of their own.
- `nullable` alone means nullable in every version of the field; `nullable 10+` from v10.
- `tag N` makes the field a tagged field (it must then be in flexible versions only); it is
  written only when its value differs from its default, and read only if present.
- `default V`: `null`, `true`, `false`, an integer, a float or a "quoted string". Without it
  the default is Kafka's: 0, false, "", empty bytes, the zero UUID, an empty list, a struct
  of defaults, and null for `records` and for nullable structs.
- `ignorable` is kept for documentation: an encoder of an older version silently drops a
  field it cannot carry, ignorable or not (Kafka's Java raises for non-ignorable ones; we leave
  that rule to the handlers' tests).
- `encoded` (an array of structs, not tagged): its value may also be a `codegen.EncodedArray`,
  the array's bytes already made for one version, which that version's encoder writes as
  they are (any other version reads its elements); for a large array a handler can keep.
- `#` starts a comment; a comment at the end of a field line is kept as the field's `about`.

Versions are Kafka's numbers, so `versions 10+` reads the same as `"versions": "10+"` in
Kafka's message specs; names are Kafka's, converted to snake_case (`TopicData` ->
`topic_data`). Parsing validates what the codec relies on (tags unique and only in flexible
versions, nullable within versions, struct names unique, no records under a tag) and raises
`SchemaError` naming the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PRIMITIVES = frozenset(
    {
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "float64",
        "bool",
        "uuid",
        "string",
        "bytes",
        "records",
    }
)


class SchemaError(ValueError):
    """A declaration that cannot be right; the message names the message and the line."""


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive range of versions; `high` None means open-ended, `low` > `high` empty."""

    low: int
    high: int | None

    @staticmethod
    def parse(text: str) -> VersionRange:
        if text == "none":
            return NO_VERSIONS
        m = re.fullmatch(r"(\d+)(\+|-(\d+))?", text)
        if m is None:
            raise SchemaError(f"bad version range {text!r}")
        low = int(m.group(1))
        if m.group(2) == "+":
            return VersionRange(low, None)
        high = int(m.group(3)) if m.group(3) else low
        if high < low:
            raise SchemaError(f"bad version range {text!r}")
        return VersionRange(low, high)

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, int):
            return False
        return self.low <= version and (self.high is None or version <= self.high)

    def is_empty(self) -> bool:
        return self.high is not None and self.high < self.low

    def intersect(self, other: VersionRange) -> VersionRange:
        low = max(self.low, other.low)
        if self.high is None:
            high = other.high
        elif other.high is None:
            high = self.high
        else:
            high = min(self.high, other.high)
        return VersionRange(low, high)

    def within(self, other: VersionRange) -> bool:
        if self.is_empty():
            return True
        if self.low < other.low:
            return False
        if other.high is None:
            return True
        return self.high is not None and self.high <= other.high

    def __str__(self) -> str:
        if self.is_empty():
            return "none"
        if self.high is None:
            return f"{self.low}+"
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


NO_VERSIONS = VersionRange(1, 0)
ALL_VERSIONS = VersionRange(0, None)

# A field's default when the declaration gives none: the caller decides from the type.
TYPE_DEFAULT = object()


@dataclass(slots=True)
class Field:
    name: str
    type: str  # a primitive or a struct name, without the [] of an array
    array: bool
    versions: VersionRange
    nullable: VersionRange
    tag: int | None
    default: object  # TYPE_DEFAULT, or the declared value (None for null)
    ignorable: bool
    about: str
    encoded: bool = False  # the value may be an EncodedArray (module docstring)
    struct: Struct | None = None  # set for struct and struct-array fields
    line: int = 0

    @property
    def is_struct(self) -> bool:
        return self.struct is not None

    def present_in(self, version: int) -> bool:
        return version in self.versions

    def nullable_in(self, version: int) -> bool:
        return version in self.nullable


@dataclass(slots=True)
class Struct:
    name: str
    fields: list[Field] = field(default_factory=list)


@dataclass(slots=True)
class Message:
    """One request or response: its root struct (named like the message) and every struct."""

    name: str
    api_key: int
    kind: str  # "request" or "response"
    versions: VersionRange
    flexible: VersionRange
    root: Struct
    structs: dict[str, Struct]

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible


@dataclass(slots=True)
class Api:
    key: int
    name: str
    versions: VersionRange
    flexible: VersionRange
    request: Message
    response: Message


_LINE = re.compile(
    r"(?P<name>[a-z][a-z0-9_]*)\s*:\s*(?P<type>(\[\])?[A-Za-z][A-Za-z0-9]*)(?P<rest>.*)"
)
_STRUCT = re.compile(r"struct\s+(?P<name>[A-Z][A-Za-z0-9]*)\s*")


def _parse_default(token: str, where: str) -> object:
    if token == "null":
        return None
    if token == "true":
        return True
    if token == "false":
        return False
    if len(token) >= 2 and token[0] == token[-1] == '"':
        return token[1:-1]
    try:
        return int(token, 0)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        raise SchemaError(f"{where}: bad default {token!r}") from None


def _parse_attrs(rest: str, where: str) -> dict[str, object]:
    tokens = re.findall(r'"[^"]*"|\S+', rest)
    attrs: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        word = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if word in ("versions", "tag", "default"):
            if nxt is None:
                raise SchemaError(f"{where}: {word} needs a value")
            attrs[word] = nxt
            i += 2
        elif word == "nullable":
            if nxt is not None and re.fullmatch(r"\d+(\+|-\d+)?|none", nxt):
                attrs["nullable"] = nxt
                i += 2
            else:
                attrs["nullable"] = ""
                i += 1
        elif word in ("ignorable", "encoded"):
            attrs[word] = True
            i += 1
        else:
            raise SchemaError(f"{where}: unknown attribute {word!r}")
    return attrs


@dataclass(slots=True)
class _RawLine:
    indent: int
    text: str
    about: str
    number: int


def _lines(text: str) -> list[_RawLine]:
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        code, _, about = raw.partition("#")
        if not code.strip():
            continue
        indent = len(code) - len(code.lstrip(" "))
        if indent % 2:
            raise SchemaError(f"line {number}: indent by two spaces: {raw!r}")
        out.append(_RawLine(indent // 2, code.strip(), about.strip(), number))
    return out


class _Parser:
    def __init__(self, name: str, versions: VersionRange, flexible: VersionRange) -> None:
        self.name = name
        self.versions = versions
        self.flexible = flexible
        self.structs: dict[str, Struct] = {}
        self.pending: list[Field] = []  # fields naming a common struct, resolved at the end

    def where(self, line: _RawLine) -> str:
        return f"{self.name} line {line.number} ({line.text!r})"

    def parse(self, text: str) -> Message:
        lines = _lines(text)
        root = Struct(self.name)
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.indent != 0:
                raise SchemaError(f"{self.where(line)}: unexpected indent")
            m = _STRUCT.fullmatch(line.text)
            if m:
                common = Struct(m.group("name"))
                self.add_struct(common, line)
                i = self.parse_fields(lines, i + 1, 1, common, ALL_VERSIONS)
            else:
                i = self.parse_fields(lines, i, 0, root, ALL_VERSIONS, stop_at_struct=True)
        for f in self.pending:
            struct = self.structs.get(f.type)
            if struct is None:
                raise SchemaError(f"{self.name} line {f.line}: unknown type {f.type!r}")
            f.struct = struct
        self.check_struct(root, ALL_VERSIONS, tagged=False)
        return Message(
            name=self.name,
            api_key=-1,
            kind="",
            versions=self.versions,
            flexible=self.flexible,
            root=root,
            structs=self.structs,
        )

    def add_struct(self, struct: Struct, line: _RawLine) -> None:
        if struct.name in self.structs or struct.name == self.name:
            raise SchemaError(f"{self.where(line)}: struct {struct.name} declared twice")
        self.structs[struct.name] = struct

    def parse_fields(
        self,
        lines: list[_RawLine],
        i: int,
        depth: int,
        into: Struct,
        parent_versions: VersionRange,
        stop_at_struct: bool = False,
    ) -> int:
        while i < len(lines) and lines[i].indent >= depth:
            line = lines[i]
            if line.indent > depth:
                raise SchemaError(f"{self.where(line)}: unexpected indent")
            if stop_at_struct and _STRUCT.fullmatch(line.text):
                return i
            f = self.parse_field(line, parent_versions)
            if any(g.name == f.name for g in into.fields):
                raise SchemaError(f"{self.where(line)}: field {f.name} declared twice")
            into.fields.append(f)
            i += 1
            has_children = i < len(lines) and lines[i].indent > depth
            if f.type in PRIMITIVES:
                if has_children:
                    raise SchemaError(f"{self.where(line)}: a {f.type} has no fields")
            elif has_children:
                struct = Struct(f.type)
                self.add_struct(struct, line)
                f.struct = struct
                i = self.parse_fields(lines, i, depth + 1, struct, f.versions)
            else:
                self.pending.append(f)
        return i

    def parse_field(self, line: _RawLine, parent_versions: VersionRange) -> Field:
        m = _LINE.fullmatch(line.text)
        if m is None:
            raise SchemaError(f"{self.where(line)}: expected 'name: type attributes'")
        type_text = m.group("type")
        array = type_text.startswith("[]")
        type_name = type_text[2:] if array else type_text
        if type_name not in PRIMITIVES and not type_name[0].isupper():
            raise SchemaError(f"{self.where(line)}: unknown type {type_name!r}")
        attrs = _parse_attrs(m.group("rest"), self.where(line))
        versions = VersionRange.parse(str(attrs.get("versions", "0+")))
        versions = versions.intersect(parent_versions).intersect(self.versions)
        if versions.is_empty():
            raise SchemaError(f"{self.where(line)}: in no declared version")
        nullable = NO_VERSIONS
        if "nullable" in attrs:
            text = str(attrs["nullable"])
            nullable = versions if text == "" else VersionRange.parse(text).intersect(versions)
        tag = int(str(attrs["tag"])) if "tag" in attrs else None
        default = (
            _parse_default(str(attrs["default"]), self.where(line))
            if "default" in attrs
            else TYPE_DEFAULT
        )
        return Field(
            name=m.group("name"),
            type=type_name,
            array=array,
            versions=versions,
            nullable=nullable,
            tag=tag,
            default=default,
            ignorable=bool(attrs.get("ignorable", False)),
            about=line.about,
            encoded=bool(attrs.get("encoded", False)),
            line=line.number,
        )

    def check_struct(self, struct: Struct, parent: VersionRange, tagged: bool) -> None:
        tags: dict[int, str] = {}
        for f in struct.fields:
            where = f"{self.name}.{struct.name}.{f.name} (line {f.line})"
            if f.tag is not None:
                if not f.versions.within(self.flexible):
                    raise SchemaError(f"{where}: tagged outside flexible versions")
                if f.tag in tags:
                    raise SchemaError(f"{where}: tag {f.tag} also used by {tags[f.tag]}")
                tags[f.tag] = f.name
            if f.type == "records" and (tagged or f.tag is not None):
                raise SchemaError(f"{where}: records cannot be tagged")
            if f.type == "records" and f.array:
                raise SchemaError(f"{where}: no arrays of records")
            if f.encoded and (f.struct is None or not f.array or tagged or f.tag is not None):
                raise SchemaError(f"{where}: only an untagged array of structs can be encoded")
            if f.default is None and not f.versions.within(f.nullable):
                raise SchemaError(f"{where}: default null needs the field nullable in all versions")
            if f.struct is not None:
                self.check_struct(f.struct, f.versions, tagged or f.tag is not None)


def parse_message(name: str, versions: str, flexible: str, text: str) -> Message:
    """Parse one request or response block (see the module docstring for the syntax)."""
    return _Parser(name, VersionRange.parse(versions), VersionRange.parse(flexible)).parse(text)


def api(key: int, name: str, versions: str, flexible: str, request: str, response: str) -> Api:
    """Declare an API: `versions` as served here, `flexible` as Kafka's `flexibleVersions`."""
    req = parse_message(name + "Request", versions, flexible, request)
    resp = parse_message(name + "Response", versions, flexible, response)
    req.api_key = resp.api_key = key
    req.kind, resp.kind = "request", "response"
    return Api(key, name, req.versions, req.flexible, req, resp)
