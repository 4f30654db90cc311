"""Java `.properties` syntax as `java.util.Properties.load` reads it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.properties import PropertiesError, parse_properties

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "text,expected",
    [
        ("a=b", {"a": "b"}),
        ("a = b", {"a": "b"}),
        ("a: b", {"a": "b"}),
        ("a b", {"a": "b"}),
        ("a\t=\tb", {"a": "b"}),
        ("a==b", {"a": "=b"}),
        ("a = b  ", {"a": "b  "}),  # trailing whitespace is kept
        ("  a=b", {"a": "b"}),
        ("a", {"a": ""}),
        ("a=", {"a": ""}),
        ("A->B.enabled = true", {"A->B.enabled": "true"}),
        ("clusters = A, B  # not a comment", {"clusters": "A, B  # not a comment"}),
    ],
)
def test_key_value_separators(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_comments_and_blank_lines() -> None:
    text = "# comment\n! also a comment\n   # indented comment\n\n  \t\na=1\n"
    assert parse_properties(text) == {"a": "1"}


def test_a_comment_does_not_continue() -> None:
    assert parse_properties("# comment \\\na=1") == {"a": "1"}


def test_line_continuations() -> None:
    text = "topics = orders, \\\n          payments, \\\n   users\nnext=1"
    assert parse_properties(text) == {"topics": "orders, payments, users", "next": "1"}


def test_even_backslashes_do_not_continue() -> None:
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}


def test_continuation_at_end_of_text() -> None:
    assert parse_properties("a=x\\") == {"a": "x"}


def test_line_endings() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3\n") == {"a": "1", "b": "2", "c": "3"}


def test_escapes() -> None:
    text = r"key\ with\ spaces = tab\there" + "\n" + r"x\:y\=z = \u0041\\b\qc"
    assert parse_properties(text) == {"key with spaces": "tab\there", "x:y=z": "A\\bqc"}


def test_regex_escapes_need_doubling_as_in_java() -> None:
    assert parse_properties(r"topics.exclude = .*\\.replica") == {"topics.exclude": r".*\.replica"}


def test_later_keys_win() -> None:
    assert parse_properties("a=1\na=2") == {"a": "2"}


def test_malformed_unicode_escape_names_the_line() -> None:
    with pytest.raises(PropertiesError, match="line 2"):
        parse_properties("a=1\nb=\\u12")


def _escape(text: str, is_key: bool) -> str:
    """As Java's Properties.store writes text (non-ASCII as \\uXXXX)."""
    out = []
    for i, c in enumerate(text):
        if c == " " and (is_key or i == 0):
            out.append("\\ ")
        elif c in "\\=:#!":
            out.append("\\" + c)
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        elif not (" " <= c <= "~"):
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


text_values = st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=20)


@given(
    st.dictionaries(text_values, text_values, max_size=8),
    st.sampled_from(["=", ": ", " = ", " "]),
    st.data(),
)
def test_what_java_writes_reads_back(props: dict[str, str], sep: str, data: st.DataObject) -> None:
    lines = []
    for key, value in props.items():
        # an empty key needs a visible separator (a blank line is no property)
        line = _escape(key, True) + (sep if key or sep.strip() else "=") + _escape(value, False)
        # continue the line on an indented next one, at a cut outside an escape and before
        # anything but whitespace (a continuation drops the next line's leading whitespace)
        cut = data.draw(st.integers(1, max(len(line) - 1, 1)))
        head, tail = line[:cut], line[cut:]
        if tail and tail[0] not in " \t\f" and (len(head) - len(head.rstrip("\\"))) % 2 == 0:
            line = head + "\\\n    " + tail
        lines.append(line)
    comment = "# a comment\n\n! another\n"
    assert parse_properties(comment + "\n".join(lines)) == props
