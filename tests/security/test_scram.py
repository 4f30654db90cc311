"""The SCRAM server driven by a client written here from RFC 5802, and RFC 7677's example."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.security.sasl_server import AuthenticationFailed
from gregor.security.scram import (
    MIN_ITERATIONS,
    ScramCredential,
    ScramServer,
    credential_from_password,
    scram_server_factory,
)

pytestmark = pytest.mark.unit

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class RfcClient:
    """The client side of RFC 5802, from the RFC's formulas (no code shared with the server)."""

    def __init__(
        self,
        mechanism: str,
        user: str,
        password: str,
        nonce: str = "fyko+d2lbbFgONRv9qkxdawL",
        gs2: str = "n,,",
    ):
        self.h, self.gs2 = HASHES[mechanism], gs2
        self.user, self.password, self.nonce = user, password, nonce
        name = user.replace("=", "=3D").replace(",", "=2C")
        self.bare = f"n={name},r={nonce}"
        self.server_signature = b""

    def first(self) -> bytes:
        return f"{self.gs2}{self.bare}".encode()

    def final(
        self, server_first: bytes, nonce: str | None = None, password: str | None = None
    ) -> bytes:
        attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
        salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
        assert attrs["r"].startswith(self.nonce)
        salted = hashlib.pbkdf2_hmac(self.h, (password or self.password).encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.h).digest()
        stored_key = hashlib.new(self.h, client_key).digest()
        channel = base64.b64encode(self.gs2.encode()).decode()
        without_proof = f"c={channel},r={nonce or attrs['r']}"
        auth = f"{self.bare},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, auth, self.h).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.h).digest()
        self.server_signature = hmac.new(server_key, auth, self.h).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def store(mechanism: str, users: dict[str, str], iterations: int = 4096):
    creds = {u: credential_from_password_of(mechanism, p, iterations) for u, p in users.items()}
    return lambda user, mech: creds.get(user) if mech == mechanism else None


def credential_from_password_of(mechanism: str, password: str, iterations: int) -> ScramCredential:
    from gregor.security.scram import MECHANISMS

    return credential_from_password(
        MECHANISMS[mechanism], password, b"0123456789abcdef", iterations
    )


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "we,ird=name"])
def test_the_right_password_authenticates_and_the_server_proves_itself(
    mechanism: str, user: str
) -> None:
    server = ScramServer(mechanism, store(mechanism, {user: "s3cret"}))
    client = RfcClient(mechanism, user, "s3cret")
    server_first = server.evaluate(client.first())
    assert not server.complete
    server_final = server.evaluate(client.final(server_first))
    assert server.complete
    assert server_final == b"v=" + base64.b64encode(client.server_signature)
    assert str(server.principal()) == f"User:{user}"
    assert server.session_lifetime_ms() is None
    assert server.mechanism == mechanism


def test_rfc_7677_example_exchange() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    from gregor.security.scram import SCRAM_SHA_256

    cred = credential_from_password(SCRAM_SHA_256, "pencil", salt, 4096)
    server = ScramServer(
        "SCRAM-SHA-256",
        lambda u, m: cred if u == "user" else None,
        server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert (
        first
        == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert str(server.principal()) == "User:user"


def exchange_fails(server: ScramServer, first: bytes, final_of) -> str:
    server_first = server.evaluate(first)
    with pytest.raises(AuthenticationFailed) as failure:
        server.evaluate(final_of(server_first))
    assert not server.complete
    with pytest.raises(AuthenticationFailed):  # a failed exchange takes no more tokens
        server.evaluate(b"n,,n=alice,r=abc")
    return str(failure.value)


def test_a_wrong_password_fails_without_naming_the_password() -> None:
    client = RfcClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", store("SCRAM-SHA-256", {"alice": "s3cret"}))
    message = exchange_fails(server, client.first(), lambda sf: client.final(sf, password="guess"))
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in message
    assert "guess" not in message and "s3cret" not in message


def test_an_unknown_user_gets_a_stable_decoy_salt_and_fails_like_a_wrong_password() -> None:
    lookup = store("SCRAM-SHA-256", {"alice": "s3cret"})
    client = RfcClient("SCRAM-SHA-256", "mallory", "s3cret")
    firsts = [ScramServer("SCRAM-SHA-256", lookup).evaluate(client.first()) for _ in range(2)]
    salts = {dict(a.split("=", 1) for a in f.decode().split(","))["s"] for f in firsts}
    assert len(salts) == 1
    wrong = exchange_fails(
        ScramServer("SCRAM-SHA-256", lookup), client.first(), lambda sf: client.final(sf)
    )
    alice = RfcClient("SCRAM-SHA-256", "alice", "nope")
    bad = exchange_fails(
        ScramServer("SCRAM-SHA-256", lookup), alice.first(), lambda sf: alice.final(sf)
    )
    assert wrong == bad


def test_a_credential_of_the_other_hash_does_not_authenticate() -> None:
    lookup = store("SCRAM-SHA-512", {"alice": "s3cret"})
    client = RfcClient("SCRAM-SHA-256", "alice", "s3cret")
    exchange_fails(ScramServer("SCRAM-SHA-256", lookup), client.first(), client.final)


def test_too_few_iterations_in_a_stored_credential_fail() -> None:
    lookup = store("SCRAM-SHA-256", {"alice": "s3cret"}, iterations=MIN_ITERATIONS - 1)
    client = RfcClient("SCRAM-SHA-256", "alice", "s3cret")
    exchange_fails(ScramServer("SCRAM-SHA-256", lookup), client.first(), client.final)


def test_a_wrong_nonce_in_the_final_message_fails() -> None:
    client = RfcClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", store("SCRAM-SHA-256", {"alice": "s3cret"}))
    message = exchange_fails(
        server, client.first(), lambda sf: client.final(sf, nonce=client.nonce + "forged")
    )
    assert "nonce" in message


def test_librdkafka_before_2_6_1_sending_its_nonce_twice_is_accepted() -> None:
    # librdkafka#4895: the client nonce once more in front of the server-first nonce, as
    # Debian's kcat (librdkafka 2.0) sends it; the whole server nonce is still required.
    client = RfcClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", store("SCRAM-SHA-256", {"alice": "s3cret"}))
    server_first = server.evaluate(client.first())
    both = dict(a.split("=", 1) for a in server_first.decode().split(","))["r"]
    assert server.evaluate(client.final(server_first, nonce=client.nonce + both)).startswith(b"v=")
    assert server.complete


def test_the_client_nonce_twice_without_the_server_nonce_fails() -> None:
    client = RfcClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", store("SCRAM-SHA-256", {"alice": "s3cret"}))
    message = exchange_fails(
        server, client.first(), lambda sf: client.final(sf, nonce=client.nonce * 2)
    )
    assert "nonce" in message


def test_channel_binding_must_match_the_gs2_header() -> None:
    client = RfcClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", store("SCRAM-SHA-256", {"alice": "s3cret"}))
    message = exchange_fails(
        server, client.first(), lambda sf: client.final(sf).replace(b"c=biws", b"c=eSws")
    )
    assert "channel binding" in message


@pytest.mark.parametrize(
    ("first", "reason"),
    [
        (b"y,,n=alice,r=abc", "channel binding"),
        (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
        (b"n,a=bob,n=alice,r=abc", "authorization id"),
        (b"n,,n=alice,r=abc,tokenauth=true", "delegation tokens"),
        (b"n,,m=ext,n=alice,r=abc", "client-first"),
        (b"n,,n=al=ice,r=abc", "client-first"),
        (b"n,,n=alice", "client-first"),
        (b"n,,n=\xc3\xa9,r=abc", "client-first"),
        (b"", "client-first"),
    ],
)
def test_malformed_or_refused_client_first_messages(first: bytes, reason: str) -> None:
    server = ScramServer("SCRAM-SHA-256", store("SCRAM-SHA-256", {"alice": "s3cret"}))
    with pytest.raises(AuthenticationFailed, match=reason):
        server.evaluate(first)


def test_an_authorization_id_equal_to_the_user_and_unknown_extensions_are_accepted() -> None:
    client = RfcClient("SCRAM-SHA-256", "alice", "s3cret", gs2="n,a=alice,")
    client.bare += ",x=1"
    server = ScramServer("SCRAM-SHA-256", store("SCRAM-SHA-256", {"alice": "s3cret"}))
    server.evaluate(client.final(server.evaluate(client.first())))
    assert str(server.principal()) == "User:alice"


def test_the_factory_makes_one_server_per_exchange() -> None:
    factory = scram_server_factory(store("SCRAM-SHA-512", {"alice": "pw"}))
    server = factory("SCRAM-SHA-512")
    client = RfcClient("SCRAM-SHA-512", "alice", "pw")
    server.evaluate(client.final(server.evaluate(client.first())))
    assert server.complete and not factory("SCRAM-SHA-512").complete
    with pytest.raises(ValueError):
        factory("PLAIN")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_arbitrary_tokens_only_ever_fail_with_authentication_failed(
    first: bytes, final: bytes
) -> None:
    server = ScramServer("SCRAM-SHA-256", store("SCRAM-SHA-256", {"alice": "s3cret"}))
    try:
        server.evaluate(first)
        server.evaluate(final)
    except AuthenticationFailed:
        return
    raise AssertionError("a random token authenticated")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("cprsin=,biwsaAZ09+/"), max_size=120))
def test_near_miss_final_messages_only_fail_with_authentication_failed(final: str) -> None:
    client = RfcClient("SCRAM-SHA-256", "alice", "s3cret")
    server = ScramServer("SCRAM-SHA-256", store("SCRAM-SHA-256", {"alice": "s3cret"}))
    server.evaluate(client.first())
    with pytest.raises(AuthenticationFailed):
        server.evaluate(final.encode())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_pythons_scram_client_authenticates_and_checks_the_server(mechanism: str) -> None:
    from kafka.net.sasl.scram import ScramClient

    server = ScramServer(mechanism, store(mechanism, {"alice": "s3cret"}))
    client = ScramClient("alice", "s3cret", mechanism)
    client.process_server_first_message(server.evaluate(client.first_message()))
    client.process_server_final_message(server.evaluate(client.final_message()))  # checks v=
    assert str(server.principal()) == "User:alice"
    wrong = ScramClient("alice", "guess", mechanism)
    server = ScramServer(mechanism, store(mechanism, {"alice": "s3cret"}))
    wrong.process_server_first_message(server.evaluate(wrong.first_message()))
    with pytest.raises(AuthenticationFailed):
        server.evaluate(wrong.final_message())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_nodes_scram_client_against_the_server(mechanism: str) -> None:
    from gregor.security.scram import ScramClient

    lookup = store(mechanism, {"broker": "inter-secret"})
    client = ScramClient(mechanism, {"username": "broker", "password": "inter-secret"})
    server = ScramServer(mechanism, lookup)
    final = client.respond(server.evaluate(client.initial()))
    assert final is not None
    assert client.respond(server.evaluate(final)) is None and server.complete
    wrong = ScramClient(mechanism, {"username": "broker", "password": "nope"})
    server = ScramServer(mechanism, lookup)
    final = wrong.respond(server.evaluate(wrong.initial()))
    with pytest.raises(AuthenticationFailed):
        server.evaluate(final or b"")


def test_the_nodes_scram_client_refuses_a_server_that_cannot_prove_itself() -> None:
    from gregor.security.scram import ScramClient

    client = ScramClient("SCRAM-SHA-256", {"username": "u", "password": "p"}, nonce=lambda: "abc")
    assert client.initial() == b"n,,n=u,r=abc"
    server_first = b"r=abcXYZ,s=" + base64.b64encode(b"salt") + b",i=4096"
    assert client.respond(server_first) is not None
    with pytest.raises(AuthenticationFailed, match="signature"):
        client.respond(b"v=" + base64.b64encode(b"x" * 32))
    for bad in (
        b"r=zzz,s=c2FsdA==,i=4096",
        b"r=abcX,s=c2FsdA==,i=10",
        b"r=abcX,s=!!,i=4096",
        b"\xff",
    ):
        with pytest.raises(AuthenticationFailed):
            ScramClient(
                "SCRAM-SHA-256", {"username": "u", "password": "p"}, nonce=lambda: "abc"
            ).respond(bad)
    with pytest.raises(ValueError, match="username and password"):
        ScramClient("SCRAM-SHA-256", {"username": "u"})
