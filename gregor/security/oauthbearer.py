"""OAUTHBEARER (RFC 7628, KIP-255/KIP-768): the server side, as Kafka's OAuthBearerSaslServer.

The client's one message carries a bearer token:

    n,[a=authzid],\\x01auth=Bearer <token>\\x01[key=value\\x01]*\\x01

A valid token completes the exchange (empty answer) with the principal from its subject claim.
An invalid one is answered, as Kafka does, with the JSON challenge `{"status":"invalid_token"}`;
the client acknowledges it with a lone `\\x01` and the exchange then fails. A malformed message
fails at once. Two validators, chosen by the listener's config:

    unsecured (the default, as Kafka's OAuthBearerUnsecuredValidatorCallbackHandler): an
        unsigned JWS `base64url(header).base64url(claims).` with `"alg":"none"`
    JWT (`sasl.oauthbearer.jwks.endpoint.url=file:///...`, as Kafka's
        OAuthBearerValidatorCallbackHandler): RS256/384/512 or ES256/384/512, signed by a key
        of the JWKS file (chosen by `kid`), never `none`; `iat` is required

Both require the subject claim (`sasl.oauthbearer.sub.claim.name`, default `sub`, a non-empty
string) and `exp`; they refuse a token expired or issued in the future by more than the clock
skew (`sasl.oauthbearer.clock.skew.seconds`: 30 for JWTs, 0 for unsecured tokens unless set),
one not yet valid (`nbf`), one without an audience in `sasl.oauthbearer.expected.audience` (when
set) and one whose `iss` is not `sasl.oauthbearer.expected.issuer` (when set). Pure: the time
comes from the clock the server is given, the JWKS as text (`read_jwks` reads the file once,
when the listener is set up). `session_lifetime_ms` is how long the token has left (KIP-368).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from gregor.security.principal import USER_TYPE, KafkaPrincipal
from gregor.security.sasl_server import AuthenticationFailed

MECHANISM = "OAUTHBEARER"
JWKS_URL = "sasl.oauthbearer.jwks.endpoint.url"
EXPECTED_AUDIENCE = "sasl.oauthbearer.expected.audience"
EXPECTED_ISSUER = "sasl.oauthbearer.expected.issuer"
SUB_CLAIM_NAME = "sasl.oauthbearer.sub.claim.name"
CLOCK_SKEW_SECONDS = "sasl.oauthbearer.clock.skew.seconds"
INVALID_TOKEN = "invalid_token"

_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "256": hashes.SHA256,
    "384": hashes.SHA384,
    "512": hashes.SHA512,
}
_CURVES: dict[str, tuple[ec.EllipticCurve, int]] = {
    "P-256": (ec.SECP256R1(), 32),
    "P-384": (ec.SECP384R1(), 48),
    "P-521": (ec.SECP521R1(), 66),
}
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
_KEY = re.compile(r"[A-Za-z]+")
_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+")


class InvalidToken(Exception):
    """A token that does not validate; the reason names the claim or check, never the token."""


@dataclass(frozen=True, slots=True)
class VerificationKey:
    kid: str | None
    kty: str  # RSA or EC
    alg: str | None
    key: Any  # an RSAPublicKey or EllipticCurvePublicKey


@dataclass(frozen=True, slots=True)
class OAuthBearerConfig:
    sub_claim_name: str = "sub"
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    clock_skew_ms: int = 0
    jwks: tuple[VerificationKey, ...] | None = None  # None: unsecured (alg none) tokens


@dataclass(frozen=True, slots=True)
class ValidToken:
    principal_name: str
    expiry_ms: int
    issued_at_ms: int | None


def _b64url(text: str) -> bytes:
    if not re.fullmatch(r"[A-Za-z0-9_-]*", text):
        raise InvalidToken("malformed Base64 URL encoded value")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise InvalidToken("malformed Base64 URL encoded value") from None


def _json_object(part: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(_b64url(part))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InvalidToken(f"malformed JSON in the {what}") from None
    if not isinstance(value, dict):
        raise InvalidToken(f"the {what} is not a JSON object")
    return value


# -- the JWKS ------------------------------------------------------------------------------------


def read_jwks(url: str) -> str:
    """The text of the JWKS file `sasl.oauthbearer.jwks.endpoint.url` names (file:// only)."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise ValueError(f"{JWKS_URL}: only file:// URLs are supported, got {url!r}")
    with open(unquote(parsed.path), encoding="utf-8") as f:
        return f.read()


def _int(value: Any, what: str) -> int:
    if not isinstance(value, str):
        raise ValueError(f"JWKS key member {what} is not a string")
    return int.from_bytes(_b64url(value), "big")


def parse_jwks(text: str) -> tuple[VerificationKey, ...]:
    """The signature keys of a JWK Set (RFC 7517): RSA and EC public keys; ValueError if the
    text is not a JWK Set. Keys of other types, or not for signatures, are left out."""
    try:
        doc = json.loads(text)
        keys = doc["keys"]
        assert isinstance(keys, list)
    except (ValueError, KeyError, TypeError, AssertionError):
        raise ValueError('the JWKS is not a JSON object with a "keys" list') from None
    out = []
    for jwk in keys:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        kid, alg = jwk.get("kid"), jwk.get("alg")
        try:
            if jwk.get("kty") == "RSA":
                pub: Any = rsa.RSAPublicNumbers(
                    _int(jwk.get("e"), "e"), _int(jwk.get("n"), "n")
                ).public_key()
            elif jwk.get("kty") == "EC" and jwk.get("crv") in _CURVES:
                curve = _CURVES[jwk["crv"]][0]
                x, y = _int(jwk.get("x"), "x"), _int(jwk.get("y"), "y")
                pub = ec.EllipticCurvePublicNumbers(x, y, curve).public_key()
            else:
                continue
        except (InvalidToken, ValueError) as exc:
            raise ValueError(f"JWKS key {kid!r} is not a valid public key: {exc}") from None
        out.append(VerificationKey(kid, jwk["kty"], alg, pub))
    return tuple(out)


def oauthbearer_config(
    configs: Mapping[str, str], jwks_text: str | None = None
) -> OAuthBearerConfig:
    """The validator settings of a listener, by Kafka's config names. `jwks_text`: the JWKS
    file's text (read_jwks) when `sasl.oauthbearer.jwks.endpoint.url` is set."""
    secured = bool(configs.get(JWKS_URL))
    if secured and jwks_text is None:
        raise ValueError(f"{JWKS_URL} is set: give the JWKS file's text (read_jwks)")
    skew = configs.get(CLOCK_SKEW_SECONDS)
    audience = tuple(a.strip() for a in configs.get(EXPECTED_AUDIENCE, "").split(",") if a.strip())
    return OAuthBearerConfig(
        sub_claim_name=configs.get(SUB_CLAIM_NAME) or "sub",
        expected_audience=audience,
        expected_issuer=configs.get(EXPECTED_ISSUER) or None,
        clock_skew_ms=(int(skew) if skew else (30 if secured else 0)) * 1000,
        jwks=parse_jwks(jwks_text or "") if secured else None,
    )


# -- validation ----------------------------------------------------------------------------------


def _split(token: str) -> tuple[str, str, str]:
    parts = token.split(".")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise InvalidToken("a JWS compact serialization has 3 dot-separated parts")
    return parts[0], parts[1], parts[2]


def _verify(key: VerificationKey, alg: str, signing_input: bytes, signature: bytes) -> bool:
    digest = _HASHES[alg[2:]]()
    try:
        if alg.startswith("RS") and key.kty == "RSA":
            key.key.verify(signature, signing_input, padding.PKCS1v15(), digest)
            return True
        if alg.startswith("ES") and key.kty == "EC":
            size = (key.key.curve.key_size + 7) // 8
            if len(signature) != 2 * size:
                return False
            r, s = int.from_bytes(signature[:size], "big"), int.from_bytes(signature[size:], "big")
            key.key.verify(encode_dss_signature(r, s), signing_input, ec.ECDSA(digest))
            return True
    except InvalidSignature:
        return False
    return False


def _check_signature(
    config: OAuthBearerConfig, header: dict[str, Any], parts: tuple[str, str, str]
) -> None:
    alg = header.get("alg")
    if not isinstance(alg, str) or alg[:2] not in ("RS", "ES") or alg[2:] not in _HASHES:
        raise InvalidToken(f"the algorithm {alg!r} is not accepted (RS256/384/512, ES256/384/512)")
    kid = header.get("kid")
    keys = [
        k
        for k in config.jwks or ()
        if (kid is None or k.kid == kid) and (k.alg is None or k.alg == alg)
    ]
    if not keys:
        raise InvalidToken(f"no key of the JWKS matches the token (kid {kid!r}, alg {alg})")
    signing_input = f"{parts[0]}.{parts[1]}".encode()
    signature = _b64url(parts[2])
    if not any(_verify(k, alg, signing_input, signature) for k in keys):
        raise InvalidToken("the signature does not verify")


def _seconds(claims: dict[str, Any], name: str, required: bool) -> int | None:
    """A NumericDate claim (seconds, possibly fractional) in milliseconds."""
    value = claims.get(name)
    if value is None:
        if required:
            raise InvalidToken(f"Required claim missing: {name}")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidToken(f"The {name} claim had the incorrect type")
    return int(value * 1000)


def _check_claims(config: OAuthBearerConfig, claims: dict[str, Any], now_ms: int) -> ValidToken:
    name = config.sub_claim_name
    subject = claims.get(name)
    if not isinstance(subject, str) or not subject.strip():
        raise InvalidToken(f"No principal name in the {name!r} claim")
    skew = config.clock_skew_ms
    expiry = _seconds(claims, "exp", True)
    issued = _seconds(claims, "iat", config.jwks is not None)
    not_before = _seconds(claims, "nbf", False)
    assert expiry is not None
    if now_ms - skew >= expiry:
        raise InvalidToken("the token has expired")
    if issued is not None and issued > now_ms + skew:
        raise InvalidToken("the token's issued-at time is in the future")
    if issued is not None and expiry <= issued:
        raise InvalidToken("the token's expiration time is not after its issued-at time")
    if not_before is not None and not_before > now_ms + skew:
        raise InvalidToken("the token is not valid yet (nbf)")
    if config.expected_audience:
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not set(config.expected_audience) & {a for a in audiences if isinstance(a, str)}:
            raise InvalidToken("the token's audience is not an expected one")
    if config.expected_issuer is not None and claims.get("iss") != config.expected_issuer:
        raise InvalidToken("the token's issuer is not the expected one")
    return ValidToken(subject.strip(), expiry, issued)


def validate(config: OAuthBearerConfig, token: str, now_ms: int) -> ValidToken:
    """The token's principal and expiry, or InvalidToken: an unsecured JWS, or with a JWKS a
    signed JWT."""
    parts = _split(token)
    header = _json_object(parts[0], "header")
    if config.jwks is None:
        if header.get("alg") != "none":
            raise InvalidToken("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise InvalidToken("Unsecured JWS must not contain a digital signature")
    else:
        _check_signature(config, header, parts)
    return _check_claims(config, _json_object(parts[1], "claims"), now_ms)


# -- the exchange --------------------------------------------------------------------------------


def parse_initial_response(token: bytes) -> tuple[str, str, dict[str, str]]:
    """(authorization id, bearer token, extensions) of a client's initial response."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message") from None
    gs2, sep, rest = text.partition(",\x01")
    if not sep or not (
        gs2 == "n," or re.fullmatch(r"n,a=(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+", gs2)
    ):
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
    if not rest.endswith("\x01\x01"):
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
    pairs: dict[str, str] = {}
    for item in rest[:-2].split("\x01"):
        key, eq, value = item.partition("=")
        if not eq or not _KEY.fullmatch(key) or not _VALUE.fullmatch(value):
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise AuthenticationFailed("Invalid OAUTHBEARER client first message: 'auth' not specified")
    found = _AUTH.fullmatch(auth)
    if found is None:
        raise AuthenticationFailed(
            "Invalid OAUTHBEARER client first message: invalid 'auth' format"
        )
    if found["scheme"].lower() != "bearer":
        raise AuthenticationFailed("Invalid scheme in OAUTHBEARER client first message")
    authzid = gs2[4:].replace("=2C", ",").replace("=3D", "=") if gs2 != "n," else ""
    return authzid, found["token"], pairs


class OAuthBearerServer:
    """One OAUTHBEARER exchange: the initial response, and after an error the client's `\\x01`."""

    def __init__(self, config: OAuthBearerConfig, now_ms: Callable[[], int]) -> None:
        self._config = config
        self._now_ms = now_ms
        self._state = "initial"  # -> complete | error-sent (-> failed) | failed
        self._error = ""
        self._token: ValidToken | None = None
        self._lifetime_ms: int | None = None

    @property
    def mechanism(self) -> str:
        return MECHANISM

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def principal(self) -> KafkaPrincipal:
        assert self._token is not None and self.complete, (
            "the OAUTHBEARER exchange has not completed"
        )
        return KafkaPrincipal(USER_TYPE, self._token.principal_name)

    def session_lifetime_ms(self) -> int | None:
        """The time the token had left when it was accepted (its `exp` less the clock then)."""
        return self._lifetime_ms

    @property
    def token_expiry_ms(self) -> int | None:
        """The accepted token's `exp`, in ms since the epoch."""
        return None if self._token is None else self._token.expiry_ms

    def evaluate(self, token: bytes) -> bytes:
        state, self._state = self._state, "failed"
        if state == "error-sent":
            if bytes(token) == b"\x01":
                raise AuthenticationFailed(f"Authentication failed: {self._error}")
            raise AuthenticationFailed(
                "Authentication failed: expected %x01 after the server's error"
            )
        if state != "initial":
            raise AuthenticationFailed(f"Unexpected SASL token in OAUTHBEARER state {state}")
        authzid, bearer, _extensions = parse_initial_response(bytes(token))
        now_ms = self._now_ms()
        try:
            valid = validate(self._config, bearer, now_ms)
        except InvalidToken as exc:
            self._state, self._error = "error-sent", f"invalid_token: {exc}"
            return json.dumps({"status": INVALID_TOKEN}, separators=(",", ":")).encode()
        if authzid and authzid != valid.principal_name:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different "
                "from the token's principal name"
            )
        self._token, self._lifetime_ms = valid, valid.expiry_ms - now_ms
        self._state = "complete"
        return b""


def oauthbearer_server_factory(
    configs: Mapping[str, str], now_ms: Callable[[], int]
) -> Callable[[], OAuthBearerServer]:
    """`factory() -> SaslServer` for a listener's OAUTHBEARER: its effective configs (Kafka's
    names above, listener prefix resolved) are checked and the JWKS file read once, here;
    `now_ms` is the clock each exchange checks token times against."""
    url = configs.get(JWKS_URL)
    config = oauthbearer_config(configs, read_jwks(url) if url else None)
    return lambda: OAuthBearerServer(config, now_ms)
