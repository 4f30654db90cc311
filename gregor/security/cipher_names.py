"""Cipher suite names as Kafka's `ssl.cipher.suites` takes them (the IANA names Java uses,
`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`) turned into OpenSSL's (`ECDHE-RSA-AES128-GCM-SHA256`),
which is what the ssl module accepts. OpenSSL's own names pass unchanged, and TLS 1.3 suites
keep their names: OpenSSL names them as IANA does.

The mapping follows OpenSSL's naming scheme, which holds for the suites in use today (ECDHE,
DHE and RSA key exchange with AES, ChaCha20 or Camellia; OpenSSL names ARIA suites its own
way, so name those as OpenSSL does): the key exchange with dashes,
RSA key exchange left out, key sizes joined to the cipher, CBC left out, ChaCha20-Poly1305
without its hash. Whether OpenSSL knows the result is for the caller to check. Pure.
"""

from __future__ import annotations

import re

TLS13_SUITES = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
        "TLS_AES_128_CCM_8_SHA256",
    }
)
_SIZED = re.compile(r"(AES|CAMELLIA|ARIA)_(128|256)")


def openssl_name(name: str) -> str:
    """OpenSSL's name of a suite named as IANA (and Java, and Kafka) name it; other names, and
    TLS 1.3's, unchanged."""
    upper = name.strip().upper()
    if upper in TLS13_SUITES or not upper.startswith(("TLS_", "SSL_")) or "_WITH_" not in upper:
        return name.strip()
    exchange, _, cipher = upper[4:].partition("_WITH_")
    cipher = _SIZED.sub(r"\1\2", cipher).replace("_CBC", "")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    cipher = cipher.replace("CCM_8", "CCM8")
    parts = ([] if exchange == "RSA" else [exchange]) + [cipher]
    return "-".join(parts).replace("_", "-")


def is_tls13(name: str) -> bool:
    return name.strip().upper() in TLS13_SUITES
