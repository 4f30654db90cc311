"""The OAUTHBEARER server with tokens signed here: unsecured JWS (alg none) as Kafka's default
validator accepts them, and RS256/ES256 JWTs checked against a JWKS file."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.security.oauthbearer import (
    OAuthBearerServer,
    oauthbearer_config,
    parse_jwks,
    read_jwks,
)
from gregor.security.sasl_server import AuthenticationFailed

pytestmark = pytest.mark.unit

NOW_MS = 1_700_000_000_000
NOW_S = NOW_MS // 1000
INVALID = b'{"status":"invalid_token"}'


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def part(obj: Any) -> str:
    return b64(json.dumps(obj).encode())


def unsecured(claims: dict[str, Any], header: dict[str, Any] | None = None) -> str:
    return f"{part(header or {'alg': 'none'})}.{part(claims)}."


def claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "alice", "iat": NOW_S - 10, "exp": NOW_S + 3600, **extra}


def initial(token: str, authzid: str = "", extensions: str = "") -> bytes:
    a = f"a={authzid}" if authzid else ""
    return f"n,{a},\x01auth=Bearer {token}\x01{extensions}\x01".encode()


def server(
    configs: dict[str, str] | None = None, jwks: str | None = None, now: int = NOW_MS
) -> OAuthBearerServer:
    return OAuthBearerServer(oauthbearer_config(configs or {}, jwks), lambda: now)


def accepted(srv: OAuthBearerServer, token: str, **kw: str) -> str:
    assert srv.evaluate(initial(token, **kw)) == b""
    assert srv.complete
    return str(srv.principal())


def refused(srv: OAuthBearerServer, token: str) -> str:
    assert srv.evaluate(initial(token)) == INVALID
    assert not srv.complete
    with pytest.raises(AuthenticationFailed) as failure:
        srv.evaluate(b"\x01")
    assert token not in str(failure.value)
    return str(failure.value)


# -- unsecured tokens ------------------------------------------------------------------------


def test_an_unsecured_token_authenticates_its_subject_for_its_remaining_lifetime() -> None:
    srv = server()
    assert accepted(srv, unsecured(claims()), extensions="traceId=abc\x01") == "User:alice"
    assert srv.mechanism == "OAUTHBEARER"
    assert srv.session_lifetime_ms() == 3600 * 1000
    assert srv.token_expiry_ms == (NOW_S + 3600) * 1000


def test_the_subject_claim_name_is_configurable() -> None:
    token = unsecured(claims(principal="bob"))
    assert accepted(server({"sasl.oauthbearer.sub.claim.name": "principal"}), token) == "User:bob"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (unsecured(claims(exp=NOW_S)), "expired"),
        (unsecured(claims(exp=NOW_S - 1)), "expired"),
        (unsecured(claims(iat=NOW_S + 60)), "future"),
        (unsecured(claims(iat=NOW_S + 7200)), "future"),
        (unsecured(claims(nbf=NOW_S + 60)), "not valid yet"),
        (unsecured({"sub": "alice"}), "Required claim missing: exp"),
        (unsecured(claims(exp="soon")), "incorrect type"),
        (unsecured({"iat": NOW_S, "exp": NOW_S + 60}), "principal"),
        (unsecured(claims(sub="  ")), "principal"),
        (unsecured(claims(sub=7)), "principal"),
        (unsecured(claims(), {"alg": "HS256"}), "'none'"),
        (unsecured(claims()) + "c2ln", "signature"),
        ("abc.def", "3 dot-separated"),
        (f"{part({'alg': 'none'})}.e30K{'x' * 3}.", "malformed"),
        (f"{part({'alg': 'none'})}.{b64(b'[1]')}.", "not a JSON object"),
    ],
)
def test_bad_unsecured_tokens_get_invalid_token_then_fail(token: str, reason: str) -> None:
    assert reason in refused(server(), token)


def test_clock_skew_and_audience_and_issuer_options() -> None:
    late = unsecured(claims(iat=NOW_S - 100, exp=NOW_S - 10))
    assert accepted(server({"sasl.oauthbearer.clock.skew.seconds": "30"}), late) == "User:alice"
    conf = {
        "sasl.oauthbearer.expected.audience": "kafka,other",
        "sasl.oauthbearer.expected.issuer": "https://idp",
    }
    assert "audience" in refused(server(conf), unsecured(claims(iss="https://idp")))
    assert "audience" in refused(server(conf), unsecured(claims(aud="web", iss="https://idp")))
    assert "issuer" in refused(server(conf), unsecured(claims(aud="kafka")))
    assert (
        accepted(server(conf), unsecured(claims(aud=["web", "other"], iss="https://idp")))
        == "User:alice"
    )


def test_an_authorization_id_must_be_the_tokens_principal() -> None:
    assert accepted(server(), unsecured(claims()), authzid="alice") == "User:alice"
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        server().evaluate(initial(unsecured(claims()), authzid="mallory"))


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (b"n,,\x01auth=Basic abc\x01\x01", "scheme"),
        (b"n,,\x01auth=Bearer\x01\x01", "'auth' format"),
        (b"n,,\x01foo=bar\x01\x01", "'auth' not specified"),
        (b"n,,\x01auth=Bearer a.b.\x01", "first message"),
        (b"y,,\x01auth=Bearer a.b.\x01\x01", "first message"),
        (b"n,,auth=Bearer a.b.\x01\x01", "first message"),
        (b"\xff", "first message"),
        (b"", "first message"),
    ],
)
def test_malformed_initial_responses_fail_at_once(message: bytes, reason: str) -> None:
    srv = server()
    with pytest.raises(AuthenticationFailed, match=reason):
        srv.evaluate(message)
    with pytest.raises(AuthenticationFailed):
        srv.evaluate(initial(unsecured(claims())))


def test_after_the_error_only_the_acknowledgement_is_taken_and_it_fails() -> None:
    srv = server()
    assert srv.evaluate(initial(unsecured(claims(exp=1)))) == INVALID
    with pytest.raises(AuthenticationFailed, match="x01"):
        srv.evaluate(initial(unsecured(claims())))
    assert not srv.complete


# -- signed JWTs against a JWKS file ------------------------------------------------------------


def _int_b64(n: int, size: int | None = None) -> str:
    return b64(n.to_bytes(size or (n.bit_length() + 7) // 8, "big"))


class Issuer:
    """An identity provider of the tests: an RSA and an EC P-256 key, and their JWKS."""

    def __init__(self) -> None:
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> str:
        rn = self.rsa.public_key().public_numbers()
        en = self.ec.public_key().public_numbers()
        keys = [
            {
                "kty": "RSA",
                "kid": "r1",
                "use": "sig",
                "alg": "RS256",
                "n": _int_b64(rn.n),
                "e": _int_b64(rn.e),
            },
            {
                "kty": "EC",
                "kid": "e1",
                "crv": "P-256",
                "x": _int_b64(en.x, 32),
                "y": _int_b64(en.y, 32),
            },
            {"kty": "oct", "kid": "s1", "k": "c2VjcmV0"},
        ]
        return json.dumps({"keys": keys})

    def sign(self, claims: dict[str, Any], alg: str = "RS256", kid: str | None = "r1") -> str:
        header = {"alg": alg, "typ": "JWT", **({"kid": kid} if kid else {})}
        signing_input = f"{part(header)}.{part(claims)}".encode()
        if alg == "RS256":
            sig = self.rsa.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = decode_dss_signature(self.ec.sign(signing_input, ec.ECDSA(hashes.SHA256())))
            sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signing_input.decode()}.{b64(sig)}"


@pytest.fixture(scope="module")
def idp() -> Issuer:
    return Issuer()


@pytest.fixture
def jwt_conf(idp: Issuer, tmp_path: Path) -> tuple[dict[str, str], str]:
    path = tmp_path / "jwks.json"
    path.write_text(idp.jwks())
    conf = {
        "sasl.oauthbearer.jwks.endpoint.url": path.as_uri(),
        "sasl.oauthbearer.expected.audience": "kafka",
        "sasl.oauthbearer.expected.issuer": "https://idp.example",
    }
    return conf, read_jwks(conf["sasl.oauthbearer.jwks.endpoint.url"])


def good(**extra: Any) -> dict[str, Any]:
    return claims(**{"aud": "kafka", "iss": "https://idp.example", **extra})


def test_rs256_and_es256_tokens_signed_by_a_jwks_key_authenticate(
    idp: Issuer, jwt_conf: Any
) -> None:
    conf, text = jwt_conf
    assert accepted(server(conf, text), idp.sign(good())) == "User:alice"
    assert accepted(server(conf, text), idp.sign(good(sub="bob"), "ES256", "e1")) == "User:bob"
    assert accepted(server(conf, text), idp.sign(good(), "ES256", None)) == "User:alice"
    srv = server(conf, text)
    accepted(srv, idp.sign(good()))
    assert srv.session_lifetime_ms() == 3600 * 1000


def test_the_default_clock_skew_of_jwts_is_30_seconds(idp: Issuer, jwt_conf: Any) -> None:
    conf, text = jwt_conf
    assert (
        accepted(server(conf, text), idp.sign(good(iat=NOW_S - 100, exp=NOW_S - 20)))
        == "User:alice"
    )
    assert "expired" in refused(server(conf, text), idp.sign(good(iat=NOW_S - 100, exp=NOW_S - 40)))


def test_bad_jwts_are_refused(idp: Issuer, jwt_conf: Any) -> None:
    conf, text = jwt_conf
    other = Issuer()
    forged = (
        idp.sign(good()).rsplit(".", 1)[0] + "." + idp.sign(good(sub="mallory")).rsplit(".", 1)[1]
    )
    cases = [
        (other.sign(good()), "signature"),
        (forged, "signature"),
        (idp.sign(good(), "RS256", "unknown"), "no key"),
        (idp.sign(good(), "ES256", "r1"), "no key"),
        (unsecured(good()), "algorithm"),
        (idp.sign(good(aud="web")), "audience"),
        (idp.sign(good(iss="https://evil")), "issuer"),
        (
            idp.sign(
                {"sub": "alice", "exp": NOW_S + 60, "aud": "kafka", "iss": "https://idp.example"}
            ),
            "iat",
        ),
        (idp.sign(good(iat=NOW_S - 7200, exp=NOW_S - 3600)), "expired"),
        (idp.sign({**good(), "sub": None}), "principal"),
    ]
    for token, reason in cases:
        assert reason in refused(server(conf, text), token), reason


def test_jwks_settings_are_checked_when_the_listener_is_set_up(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="file://"):
        read_jwks("https://idp.example/jwks")
    with pytest.raises(ValueError, match="keys"):
        parse_jwks("[]")
    with pytest.raises(ValueError, match="JWKS file"):
        oauthbearer_config({"sasl.oauthbearer.jwks.endpoint.url": "file:///x"})
    assert parse_jwks('{"keys": [{"kty": "oct", "k": "eA"}]}') == ()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_only_fail_with_authentication_failed_or_invalid_token(data: bytes) -> None:
    srv = server()
    try:
        answer = srv.evaluate(data)
    except AuthenticationFailed:
        return
    assert answer == INVALID
    with pytest.raises(AuthenticationFailed):
        srv.evaluate(b"\x01")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdeAZ09-_.=", max_size=120))
def test_arbitrary_bearer_tokens_are_refused_safely(token: str) -> None:
    srv = server()
    try:
        answer = srv.evaluate(initial(token))
    except AuthenticationFailed:
        return
    assert answer == INVALID and not srv.complete


def test_the_listener_factory_reads_the_jwks_once_and_makes_a_server_per_exchange(
    idp: Issuer, jwt_conf: Any, tmp_path: Path
) -> None:
    from gregor.security.oauthbearer import oauthbearer_server_factory

    conf, _text = jwt_conf
    factory = oauthbearer_server_factory(conf, lambda: NOW_MS)
    (tmp_path / "jwks.json").unlink()  # read when the factory was made, not per exchange
    first, second = factory(), factory()
    assert first is not second
    assert accepted(first, idp.sign(good())) == "User:alice"
    assert not second.complete
    unsecured_factory = oauthbearer_server_factory({}, lambda: NOW_MS)
    assert accepted(unsecured_factory(), unsecured(claims())) == "User:alice"
    with pytest.raises(FileNotFoundError):
        oauthbearer_server_factory(conf, lambda: NOW_MS)
