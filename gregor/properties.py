"""Java's `.properties` syntax (`java.util.Properties.load`): `server.properties`, client
config files (`--command-config`) and `mm2.properties`.

- A logical line is one or more natural lines (ended by `\\n`, `\\r` or `\\r\\n`); a natural line
  ending in an odd number of backslashes continues on the next, whose leading whitespace is
  dropped.
- A blank line, or one whose first non-whitespace character is `#` or `!`, is ignored (a comment
  does not continue). `#` later in a line is part of the value.
- The key runs to the first unescaped `=`, `:` or whitespace; then whitespace, at most one `=` or
  `:`, and whitespace again are skipped; the rest, trailing whitespace included, is the value.
- Escapes: `\\t \\n \\r \\f`, `\\uXXXX`, and a backslash before any other character stands for
  that character (`\\=`, `\\:`, `\\ `, `\\\\`). A later line overrides an earlier one's key.

Whitespace means space, tab and form feed. Text is read as UTF-8 (Java reads an InputStream as
ISO-8859-1; for the ASCII files MirrorMaker users write the two agree).
"""

from __future__ import annotations

import re

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_NATURAL_LINE = re.compile(r"\r\n|\r|\n")


class PropertiesError(ValueError):
    """Malformed properties text; the message names the line."""


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, logical line) pairs with continuations joined and comments gone."""
    out: list[tuple[int, str]] = []
    lines = _NATURAL_LINE.split(text)
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(_WHITESPACE)
            i += 1
        out.append((number, line))
    return out


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _unescape(raw: str, number: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        i += 1
        if c != "\\" or i >= len(raw):
            out.append(c)
            continue
        c = raw[i]
        i += 1
        if c == "u":
            digits = raw[i : i + 4]
            if len(digits) < 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError(f"line {number}: malformed \\uxxxx escape")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)


def _split_key(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of a logical line."""
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _WHITESPACE:
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":") and rest:
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse_properties(text: str) -> dict[str, str]:
    """The key-value pairs of a properties text, later keys overriding earlier ones."""
    props: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split_key(line)
        props[_unescape(key, number)] = _unescape(value, number)
    return props
