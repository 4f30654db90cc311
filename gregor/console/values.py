"""How a record's key, value and header values are shown: JSON pretty-printed, other UTF-8
text as it is, anything else (or text with control characters) as hex; long values cut at
MAX_SHOWN bytes with the page saying so. Pure: the templates escape what this returns."""

from __future__ import annotations

import json
from dataclasses import dataclass

MAX_SHOWN = 16 * 1024
_ALLOWED_CONTROLS = frozenset("\t\n\r")


@dataclass(frozen=True)
class Shown:
    kind: str  # null, json, text or binary
    text: str
    size: int
    truncated: bool = False


def show(data: bytes | None) -> Shown:
    if data is None:
        return Shown("null", "null", 0)
    size = len(data)
    cut = data[:MAX_SHOWN]
    text = _utf8(cut, cut_short=size > MAX_SHOWN)
    if text is None or any(c < " " and c not in _ALLOWED_CONTROLS for c in text):
        return Shown("binary", hex_dump(cut), size, size > MAX_SHOWN)
    if size <= MAX_SHOWN:
        try:
            parsed = json.loads(text)
        except ValueError:
            pass
        else:
            if isinstance(parsed, dict | list):
                return Shown("json", json.dumps(parsed, indent=2, ensure_ascii=False), size)
    return Shown("text", text, size, size > MAX_SHOWN)


def _utf8(data: bytes, cut_short: bool) -> str | None:
    """`data` as UTF-8, or None; a cut value may end inside a character (up to 3 bytes)."""
    for drop in range(4 if cut_short else 1):
        try:
            return data[: len(data) - drop].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def hex_dump(data: bytes) -> str:
    """Sixteen bytes a line: offset, hex pairs, printable ASCII (as `xxd` shows them)."""
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at : at + 16]
        pairs = " ".join(chunk[i : i + 2].hex() for i in range(0, len(chunk), 2))
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}: {pairs:<39}  {ascii_}")
    return "\n".join(lines)


def matches(data: bytes | None, needle: str) -> bool:
    """Whether `needle` (text) occurs in `data`, compared as UTF-8 bytes."""
    return not needle or (data is not None and needle.encode("utf-8") in data)
