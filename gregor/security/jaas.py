"""`sasl.jaas.config` values, as Kafka's JaasConfig reads them (one login module):

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

A module class, a control flag (required, requisite, sufficient, optional), `key=value` options
(a value in double quotes may hold spaces, `\\"` and `\\\\`), and a closing `;`. Pure; a
malformed value is a ValueError whose message never repeats an option's value (passwords).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
_TOKEN = re.compile(r'\s*(?:([A-Za-z0-9_.$-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)|([^\s=;"]+)|(;))')


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str]


def parse_jaas(text: str) -> LoginModule:
    """The login module of a `sasl.jaas.config` value; ValueError if malformed."""
    words: list[str] = []
    options: dict[str, str] = {}
    pos, ended = 0, False
    text = text.strip()
    while pos < len(text):
        found = _TOKEN.match(text, pos)
        if found is None or ended:
            raise ValueError(f"sasl.jaas.config is malformed near character {pos}")
        key, value, word, semicolon = found.groups()
        if key is not None:
            options[key] = _unquote(value)
        elif word is not None:
            if options:
                raise ValueError(f"sasl.jaas.config: unexpected word after options at {pos}")
            words.append(word)
        elif semicolon:
            ended = True
        pos = found.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if not ended:
        raise ValueError("sasl.jaas.config must end with ';'")
    if len(words) != 2 or words[1].lower() not in FLAGS:
        raise ValueError(
            "sasl.jaas.config must be `<LoginModule class> <required|requisite|sufficient|"
            "optional> key=value ...;`"
        )
    return LoginModule(words[0], words[1].lower(), options)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value
