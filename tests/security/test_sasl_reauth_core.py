"""KIP-368 re-authentication in the SASL core, without I/O: the session lifetime (Kafka's rule:
connections.max.reauth.ms, the credential's remaining life, the smaller of both), the end of a
session, re-authenticating on the live session (once a second at most, same mechanism, same
principal) and the per-listener and per-mechanism setting."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gregor.protocol import api_keys
from gregor.security import sasl
from gregor.security.listener_config import ListenerConfig
from gregor.security.plain import PlainServer
from gregor.security.principal import KafkaPrincipal

pytestmark = pytest.mark.unit

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-pw" user_bob="bob-pw";'
)
ALICE, BOB = b"\x00alice\x00alice-pw", b"\x00bob\x00bob-pw"


def listener(**values: str) -> ListenerConfig:
    base = {"sasl.enabled.mechanisms": "PLAIN,TOKEN", "sasl.jaas.config": JAAS}
    return ListenerConfig("SASL_PLAINTEXT", "SASL_PLAINTEXT", {**base, **values})


@dataclass
class ExpiringCredential:
    """PLAIN whose credential has `left_ms` to live, as an OAUTHBEARER token has."""

    left_ms: int
    inner: PlainServer
    mechanism: str = "TOKEN"

    @property
    def complete(self) -> bool:
        return self.inner.complete

    def evaluate(self, token: bytes) -> bytes:
        return self.inner.evaluate(token)

    def principal(self) -> KafkaPrincipal:
        return self.inner.principal()

    def session_lifetime_ms(self) -> int | None:
        return self.left_ms


@pytest.fixture
def token_left(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    left = [60_000]
    monkeypatch.setitem(
        sasl.MECHANISMS,
        "TOKEN",
        lambda config: ExpiringCredential(left[0], PlainServer({"alice": "alice-pw"})),
    )
    return left


def logged_in(config: ListenerConfig, now_ms: int, mechanism: str = "PLAIN") -> sasl.SaslSession:
    session = sasl.SaslSession(config)
    session.handshake(mechanism, 1)
    answer = session.authenticate(ALICE, now_ms)
    assert answer.error_code == 0 and session.complete
    return session


@pytest.mark.parametrize(
    ("settings", "mechanism", "left_ms", "lifetime"),
    [
        ({}, "PLAIN", None, 0),  # off by default: no lifetime, no end
        ({"connections.max.reauth.ms": "2000"}, "PLAIN", None, 2000),
        ({"connections.max.reauth.ms": "2000"}, "TOKEN", 60_000, 2000),  # the smaller
        ({"connections.max.reauth.ms": "2000"}, "TOKEN", 500, 500),
        ({}, "TOKEN", 500, 500),  # a credential's end counts without the setting
        ({}, "TOKEN", -5, 0),  # never negative
        ({"connections.max.reauth.ms": "-1"}, "PLAIN", None, 0),  # not above 0: off
        (
            {
                "connections.max.reauth.ms": "9000",
                "listener.name.sasl_plaintext.connections.max.reauth.ms": "5000",
                "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "3000",
            },
            "PLAIN",
            None,
            3000,  # the listener's and mechanism's setting wins
        ),
        (
            {"listener.name.sasl_plaintext.token.connections.max.reauth.ms": "3000"},
            "PLAIN",
            None,
            0,  # another mechanism's setting
        ),
    ],
)
def test_session_lifetime_is_kafkas(
    token_left: list[int], settings: dict, mechanism: str, left_ms: int | None, lifetime: int
) -> None:
    if left_ms is not None:
        token_left[0] = left_ms
    session = sasl.SaslSession(listener(**settings))
    session.handshake(mechanism, 1)
    answer = session.authenticate(ALICE, 10_000)
    assert answer.session_lifetime_ms == lifetime
    has_end = lifetime > 0 or left_ms is not None
    assert session.expires_at_ms == (10_000 + lifetime if has_end else None)
    assert not session.expired(10_000 + lifetime)
    assert session.expired(10_000 + lifetime + 1) == has_end


def test_reauthenticating_renews_the_session() -> None:
    session = logged_in(listener(**{"connections.max.reauth.ms": "2000"}), 0)
    assert session.begin_reauthentication(1800)
    assert not session.complete and session.allows(api_keys.SASL_HANDSHAKE)
    assert not session.allows(api_keys.PRODUCE)
    assert session.handshake("PLAIN", 1).error_code == 0
    answer = session.authenticate(ALICE, 1810)
    assert answer.reauthenticated and answer.principal == KafkaPrincipal("User", "alice")
    assert answer.session_lifetime_ms == 2000 and session.expires_at_ms == 3810
    assert session.complete and not session.expired(3000)


def test_an_expired_session_may_still_reauthenticate() -> None:
    session = logged_in(listener(**{"connections.max.reauth.ms": "2000"}), 0)
    assert session.expired(2500)
    assert session.begin_reauthentication(2500)
    session.handshake("PLAIN", 1)
    assert session.authenticate(ALICE, 2510).reauthenticated and not session.expired(4000)


def test_no_reauthentication_without_a_session_end_nor_twice_a_second() -> None:
    assert not logged_in(listener(), 0).begin_reauthentication(5000)
    session = logged_in(listener(**{"connections.max.reauth.ms": "5000"}), 0)
    assert session.begin_reauthentication(1000)
    session.handshake("PLAIN", 1)
    session.authenticate(ALICE, 1000)
    assert not session.begin_reauthentication(1999)  # the handlers answer ILLEGAL_SASL_STATE
    assert session.complete and session.begin_reauthentication(2000)


def test_a_principal_change_is_refused() -> None:
    session = logged_in(listener(**{"connections.max.reauth.ms": "2000"}), 0)
    session.begin_reauthentication(1500)
    session.handshake("PLAIN", 1)
    answer = session.authenticate(BOB, 1500)
    assert (answer.error_code, answer.failed, answer.answered) == (
        sasl.SASL_AUTHENTICATION_FAILED,
        True,
        True,
    )
    assert answer.error_message == (
        "Cannot change principals during re-authentication from User.alice: User.bob"
    )
    assert not session.complete and not session.allows(api_keys.PRODUCE)


def test_a_mechanism_change_fails_at_the_next_token_unanswered(token_left: list[int]) -> None:
    session = logged_in(listener(**{"connections.max.reauth.ms": "2000"}), 0)
    session.begin_reauthentication(1500)
    shake = session.handshake("TOKEN", 1)
    assert (shake.error_code, shake.close) == (0, False)  # as Kafka: the handshake passes
    answer = session.authenticate(ALICE, 1500)
    assert answer.failed and not answer.answered
    assert answer.error_message == (
        "SASL mechanism 'TOKEN' requested by client is not supported for re-authentication "
        "of mechanism 'PLAIN'"
    )
