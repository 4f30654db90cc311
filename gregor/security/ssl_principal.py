"""The principal of a mutual-TLS client: its certificate's distinguished name, mapped by
`ssl.principal.mapping.rules` as Kafka's SslPrincipalMapper. Pure.

The name is RFC 2253's, most specific first, as Kafka (Java's X500Principal) prints it:
`CN=alice,OU=eng,O=Example,C=US`. Rules are tried in order; the first that applies wins:

    DEFAULT                          the whole name
    RULE:pattern/replacement/[L|U]   when `pattern` matches the whole name: `replacement`, with
                                     $1, $2... its groups, then lower- (L) or upper-cased (U)

    ssl.principal.mapping.rules=RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT

A name no rule applies to fails the authentication (ValueError), as in Kafka.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# Python's attribute names (ssl.getpeercert) -> RFC 2253's keywords.
_KEYWORDS = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
    "emailAddress": "EMAILADDRESS",
}
_SPECIAL = re.compile(r'([,+"\\<>;])')


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        out = self.pattern.sub(self.replacement, dn, count=1)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def distinguished_name(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """RFC 2253 form of `ssl.getpeercert()["subject"]` (whose RDNs come least specific first)."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    value = _SPECIAL.sub(r"\\\1", value)
    if value.startswith((" ", "#")):
        value = "\\" + value
    if value.endswith(" ") and not value.endswith("\\ "):
        value = value[:-1] + "\\ "
    return value


def parse_rules(text: str) -> list[Rule]:
    """The rules of `ssl.principal.mapping.rules` (DEFAULT when empty); ValueError if bad."""
    rules: list[Rule] = []
    pos, n = 0, len(text)
    while pos < n:
        while pos < n and text[pos] in " \t\n,":
            pos += 1
        if pos >= n:
            break
        if text.startswith("DEFAULT", pos):
            rules.append(Rule(None))
            pos += len("DEFAULT")
        elif text.startswith("RULE:", pos):
            pattern, pos = _until_slash(text, pos + len("RULE:"))
            replacement, pos = _until_slash(text, pos)
            case = text[pos] if pos < n and text[pos] in "LU" else ""
            pos += len(case)
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {exc}"
                ) from None
            rules.append(Rule(compiled, _java_replacement(replacement), case))
        else:
            raise ValueError(f"ssl.principal.mapping.rules: invalid rule at {text[pos:]!r}")
        while pos < n and text[pos] not in ",":
            if not text[pos].isspace():
                raise ValueError(f"ssl.principal.mapping.rules: invalid rule at {text[pos:]!r}")
            pos += 1
    return rules or [Rule(None)]


def _until_slash(text: str, pos: int) -> tuple[str, int]:
    out = []
    while pos < len(text) and text[pos] != "/":
        if text[pos] == "\\" and pos + 1 < len(text) and text[pos + 1] == "/":
            pos += 1
        out.append(text[pos])
        pos += 1
    if pos >= len(text):
        raise ValueError("ssl.principal.mapping.rules: a RULE needs RULE:pattern/replacement/")
    return "".join(out), pos + 1


def _java_replacement(replacement: str) -> str:
    """Java's `$1` group references as Python's `\\g<1>` (a backslash stays literal)."""
    return re.sub(r"\$(\d+)", r"\\g<\1>", replacement.replace("\\", "\\\\"))


def map_principal_name(dn: str, rules: Sequence[Rule]) -> str:
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    raise ValueError(f"No rules apply to {dn}, rules {len(rules)}")
