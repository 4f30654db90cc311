"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the server side, as Kafka's.

The exchange, two client tokens and two answers:

    client-first   n,[a=authzid],n=<saslname>,r=<client nonce>[,ext=value]*
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=<base64 gs2 header>,r=<both nonces>,p=<base64 proof>
    server-final   v=<base64 server signature>

A user's credential is what Kafka keeps for it (UserScramCredentialRecord): the salt, the
iteration count and two keys derived from the salted password, never the password:

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    StoredKey = H(HMAC(SaltedPassword, "Client Key"))    ServerKey = HMAC(SaltedPassword, "Server Key")

The client proves it knows ClientKey: proof = ClientKey XOR HMAC(StoredKey, AuthMessage), and
the server checks H(proof XOR HMAC(StoredKey, AuthMessage)) == StoredKey. As in Kafka there is
no channel binding (the gs2 flag must be `n`, so `c=biws`), an authorization id must equal the
user name, and `tokenauth` (delegation tokens) is refused here. An unknown user gets a decoy
salt and fails at the proof like a wrong password, so the answers do not tell which users exist.
Every failure (malformed token, wrong nonce, bad proof) raises AuthenticationFailed with a
message that holds no secret; the server then refuses any further token.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gregor.security.principal import USER_TYPE, KafkaPrincipal
from gregor.security.sasl_server import AuthenticationFailed

MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations, both hashes
MAX_ITERATIONS = 16384  # what AlterUserScramCredentials accepts at most (Kafka's controller)


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str  # as clients name it in SaslHandshake and sasl.mechanism
    hash_name: str  # hashlib's name of H
    type: int  # the int8 of UserScramCredentialRecord.Mechanism and the admin APIs

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_TYPE = {m.type: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # keys stay out of logs and tracebacks
        return f"ScramCredential(iterations={self.iterations}, salt={len(self.salt)} bytes)"


def salted_password(mech: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC-H, one hash block."""
    return hashlib.pbkdf2_hmac(mech.hash_name, password.encode(), salt, iterations)


def credential_from_salted(
    mech: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    client_key = mech.hmac(salted, b"Client Key")
    server_key = mech.hmac(salted, b"Server Key")
    return ScramCredential(salt, mech.digest(client_key), server_key, iterations)


def credential_from_password(
    mech: ScramMechanism, password: str, salt: bytes, iterations: int
) -> ScramCredential:
    return credential_from_salted(
        mech, salted_password(mech, password, salt, iterations), salt, iterations
    )


# (user name, mechanism name) -> the user's credential for that mechanism, or None.
CredentialLookup = Callable[[str, str], "ScramCredential | None"]

_VALUE = r"[\x01-\x2b\x2d-\x7f]+"  # ASCII, no comma (RFC 5802 `value`, as Kafka's pattern)
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_NONCE = r"[\x21-\x2b\x2d-\x7e]+"  # printable, no comma
_BASE64 = r"[A-Za-z0-9+/]*={0,2}"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>(?P<cbind>[^,]*),(?:a=(?P<authzid>{_SASLNAME}))?,)"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_NONCE})"
    rf"(?P<extensions>(?:,[A-Za-z]+={_VALUE})*))"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_NONCE})(?:,[A-Za-z]+={_VALUE})*)"
    rf",p=(?P<proof>{_BASE64})"
)
_DECOY_KEY = os.urandom(32)  # per process: an unknown user's decoy salt is stable across tries


def random_nonce() -> str:
    """A fresh server nonce: 18 random bytes in base64 (printable, never a comma)."""
    return base64.b64encode(os.urandom(18)).decode()


def username(saslname: str) -> str:
    """RFC 5802's escaping undone: `=2C` is a comma, `=3D` an equals sign."""
    return saslname.replace("=2C", ",").replace("=3D", "=")


def saslname(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def _ascii(token: bytes, what: str) -> str:
    try:
        return token.decode("ascii")
    except UnicodeDecodeError:
        raise AuthenticationFailed(f"Authentication failed: invalid SCRAM {what} message") from None


class ScramServer:
    """One SCRAM exchange on one connection: client-first, then client-final, then complete."""

    def __init__(
        self,
        mechanism: str,
        lookup: CredentialLookup,
        server_nonce: Callable[[], str] | None = None,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"{mechanism} is not a SCRAM mechanism ({', '.join(MECHANISMS)})")
        self._mech = MECHANISMS[mechanism]
        self._lookup = lookup
        self._server_nonce = server_nonce or random_nonce
        self._state = "client-first"
        self._user = ""
        self._gs2_header = ""
        self._nonce = ""
        self._client_nonce = ""
        self._auth_prefix = ""  # client-first-bare "," server-first
        self._credential: ScramCredential | None = None
        self._known = False

    @property
    def mechanism(self) -> str:
        return self._mech.name

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def principal(self) -> KafkaPrincipal:
        assert self.complete, "the SCRAM exchange has not completed"
        return KafkaPrincipal(USER_TYPE, self._user)

    def session_lifetime_ms(self) -> int | None:
        return None

    def _nonce_matches(self, sent: str) -> bool:
        """The client-final nonce is the server-first one. librdkafka before 2.6.1 sends its
        client nonce once more in front of it (librdkafka#4895), as Kafka 3.8.1+ tolerates, so
        that form passes too: the server's fresh nonce must still be there whole."""
        expected, doubled = self._nonce.encode(), (self._client_nonce + self._nonce).encode()
        sent_bytes = sent.encode()
        return hmac.compare_digest(sent_bytes, expected) or hmac.compare_digest(sent_bytes, doubled)

    def evaluate(self, token: bytes) -> bytes:
        state, self._state = self._state, "failed"  # any exception leaves the exchange failed
        if state == "client-first":
            answer = self._client_first(bytes(token))
            self._state = "client-final"
        elif state == "client-final":
            answer = self._client_final(bytes(token))
            self._state = "complete"
        else:
            raise AuthenticationFailed(f"Unexpected SASL token in SCRAM state {state}")
        return answer

    def _failed(self) -> AuthenticationFailed:
        self._credential = None
        return AuthenticationFailed(
            "Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {self._mech.name}"
        )

    def _client_first(self, token: bytes) -> bytes:
        match = _CLIENT_FIRST.fullmatch(_ascii(token, "client-first"))
        if match is None:
            raise AuthenticationFailed("Authentication failed: invalid SCRAM client-first message")
        if match["cbind"] != "n":
            raise AuthenticationFailed(
                "Authentication failed: SCRAM channel binding is not supported"
            )
        extensions = dict(e.split("=", 1) for e in match["extensions"].split(",")[1:])
        if extensions.get("tokenauth", "").lower() == "true":
            raise AuthenticationFailed("Authentication failed: delegation tokens are not supported")
        user = username(match["saslname"])
        authzid = match["authzid"]
        if authzid is not None and username(authzid) != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        credential = self._lookup(user, self._mech.name)
        self._known = credential is not None and credential.iterations >= MIN_ITERATIONS
        if credential is None or not self._known:
            credential = self._decoy(user)
        server_nonce = self._server_nonce()
        self._user, self._gs2_header, self._credential = user, match["gs2"], credential
        self._client_nonce = match["nonce"]
        self._nonce = match["nonce"] + server_nonce
        salt = base64.b64encode(credential.salt).decode()
        server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._auth_prefix = f"{match['bare']},{server_first}"
        return server_first.encode()

    def _decoy(self, user: str) -> ScramCredential:
        seed = self._mech.hmac(_DECOY_KEY, f"{self._mech.name}\x00{user}".encode())
        key = self._mech.hmac(seed, b"decoy")
        return ScramCredential(seed[:16], key, key, MIN_ITERATIONS)

    def _client_final(self, token: bytes) -> bytes:
        match = _CLIENT_FINAL.fullmatch(_ascii(token, "client-final"))
        if match is None:
            raise AuthenticationFailed("Authentication failed: invalid SCRAM client-final message")
        try:
            channel = base64.b64decode(match["channel"], validate=True)
            proof = base64.b64decode(match["proof"], validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationFailed(
                "Authentication failed: invalid SCRAM client-final message"
            ) from None
        if channel != self._gs2_header.encode():
            raise AuthenticationFailed("Authentication failed: SCRAM channel bindings do not match")
        if not self._nonce_matches(match["nonce"]):
            raise AuthenticationFailed("Invalid client nonce in the final client message.")
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._auth_prefix},{match['without_proof']}".encode()
        signature = self._mech.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise self._failed()
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(self._mech.digest(client_key), credential.stored_key):
            raise self._failed()
        if not self._known:  # a decoy can never match, but never let it through either
            raise self._failed()
        server_signature = self._mech.hmac(credential.server_key, auth_message)
        self._credential = None
        return b"v=" + base64.b64encode(server_signature)


def scram_server_factory(lookup: CredentialLookup) -> Callable[[str], ScramServer]:
    """`factory(mechanism) -> SaslServer` for both SCRAM mechanisms over one credential lookup."""
    return lambda mechanism: ScramServer(mechanism, lookup)


class ScramClient:
    """The client side, as a node authenticates to another node's listener with SCRAM (the
    `username` and `password` options of its JAAS config): `initial()` is client-first,
    `respond(server-first)` client-final, `respond(server-final)` checks the server's signature
    (AuthenticationFailed if it does not prove the server knows the credential) and ends."""

    def __init__(
        self, mechanism: str, options: Mapping[str, str], nonce: Callable[[], str] | None = None
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"{mechanism} is not a SCRAM mechanism ({', '.join(MECHANISMS)})")
        user, password = options.get("username"), options.get("password")
        if not user or not password:
            raise ValueError(f"{mechanism} needs username and password options in sasl.jaas.config")
        self._mech, self._password = MECHANISMS[mechanism], password
        self._bare = f"n={saslname(user)},r={(nonce or random_nonce)()}"
        self._server_signature: bytes | None = None

    def initial(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def respond(self, token: bytes) -> bytes | None:
        if self._server_signature is not None:
            if not hmac.compare_digest(
                bytes(token), b"v=" + base64.b64encode(self._server_signature)
            ):
                raise AuthenticationFailed(f"the server's {self._mech.name} signature is wrong")
            return None
        server_first = _ascii(bytes(token), "server-first")
        attrs = dict(a.split("=", 1) for a in server_first.split(",") if "=" in a)
        try:
            nonce, salt, iterations = (
                attrs["r"],
                base64.b64decode(attrs["s"], validate=True),
                int(attrs["i"]),
            )
        except (KeyError, ValueError, binascii.Error):
            raise AuthenticationFailed(
                "Authentication failed: invalid SCRAM server-first message"
            ) from None
        if (
            not nonce.startswith(self._bare.rsplit("r=", 1)[1])
            or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS
        ):
            raise AuthenticationFailed("Authentication failed: invalid SCRAM server-first message")
        salted = salted_password(self._mech, self._password, salt, iterations)
        client_key = self._mech.hmac(salted, b"Client Key")
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{server_first},{without_proof}".encode()
        signature = self._mech.hmac(self._mech.digest(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = self._mech.hmac(salted, b"Server Key")
        self._server_signature = self._mech.hmac(server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
