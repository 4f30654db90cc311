"""The mechanisms as the listener's SASL registry makes them: from a listener's settings (its
`listener.name.<l>.<mechanism>.` keys first) and the extras the node gives it."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gregor.security.mechanisms import CLIENT_FACTORIES, FACTORIES, check
from gregor.security.scram import SCRAM_SHA_512, credential_from_password

pytestmark = pytest.mark.unit

NOW_MS = 1_700_000_000_000


class FakeListener:
    """The registry's view of a listener: per-listener and per-mechanism keys over bare ones."""

    def __init__(self, values: Mapping[str, str], extras: Mapping[str, Any]) -> None:
        self.values, self.extras = dict(values), dict(extras)

    def get(self, key: str, mechanism: str | None = None, default: str = "") -> str:
        keys = [f"listener.name.sasl_ssl.{mechanism.lower()}.{key}"] if mechanism else []
        for k in [*keys, f"listener.name.sasl_ssl.{key}", key]:
            if self.values.get(k):
                return self.values[k]
        return default


def token(claims: dict[str, Any]) -> bytes:
    def part(obj: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    jws = f"{part({'alg': 'none'})}.{part(claims)}."
    return f"n,,\x01auth=Bearer {jws}\x01\x01".encode()


def test_scram_servers_look_credentials_up_through_the_extras() -> None:
    cred = credential_from_password(SCRAM_SHA_512, "pw", b"salt", 4096)
    asked: list[tuple[str, str]] = []

    def lookup(user: str, mechanism: str) -> Any:
        asked.append((user, mechanism))
        return cred

    listener = FakeListener({}, {"scram_credential": lookup})
    server = FACTORIES["SCRAM-SHA-512"](listener)
    assert server.mechanism == "SCRAM-SHA-512"
    server.evaluate(b"n,,n=alice,r=abc")
    assert asked == [("alice", "SCRAM-SHA-512")]
    assert check(listener, ["SCRAM-SHA-256", "SCRAM-SHA-512"]) is None
    assert "credential lookup" in (check(FakeListener({}, {}), ["SCRAM-SHA-256"]) or "")
    client = CLIENT_FACTORIES["SCRAM-SHA-512"]({"username": "alice", "password": "pw"})
    server = FACTORIES["SCRAM-SHA-512"](listener)
    final = client.respond(server.evaluate(client.initial()))
    assert client.respond(server.evaluate(final or b"")) is None and server.complete


def test_oauthbearer_takes_the_listeners_mechanism_settings_and_the_nodes_clock() -> None:
    values = {
        "sasl.oauthbearer.sub.claim.name": "sub",
        "listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.sub.claim.name": "client_id",
    }
    listener = FakeListener(values, {"now_ms": lambda: NOW_MS})
    server = FACTORIES["OAUTHBEARER"](listener)
    claims = {"client_id": "svc", "exp": NOW_MS // 1000 + 60}
    assert server.evaluate(token(claims)) == b"" and str(server.principal()) == "User:svc"
    late = FakeListener(values, {"now_ms": lambda: NOW_MS + 61_000})
    assert FACTORIES["OAUTHBEARER"](late).evaluate(token(claims)) == b'{"status":"invalid_token"}'
    assert check(listener, ["OAUTHBEARER"]) is None
    assert "clock" in (check(FakeListener({}, {}), ["OAUTHBEARER"]) or "")


def test_a_jwks_file_that_cannot_be_read_is_a_start_up_error(tmp_path: Path) -> None:
    url = (tmp_path / "missing.json").as_uri()
    listener = FakeListener({"sasl.oauthbearer.jwks.endpoint.url": url}, {"now_ms": lambda: 0})
    assert "OAUTHBEARER" in (check(listener, ["OAUTHBEARER"]) or "")
    (tmp_path / "bad.json").write_text("{}")
    bad = FakeListener(
        {"sasl.oauthbearer.jwks.endpoint.url": (tmp_path / "bad.json").as_uri()},
        {"now_ms": lambda: 0},
    )
    assert "keys" in (check(bad, ["OAUTHBEARER"]) or "")
