"""Java `.properties` syntax as `java.util.Properties.load` reads it."""

from __future__ import annotations

import pytest

from gregor.mirror.properties import PropertiesError, parse_properties

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
