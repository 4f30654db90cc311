"""The SASL and TLS-principal cores, without I/O: the per-connection SASL state machine, the
PLAIN mechanism, JAAS parsing, listener settings resolution and ssl.principal.mapping.rules."""

from __future__ import annotations

import pytest

from gregor.protocol import api_keys
from gregor.security import sasl
from gregor.security.jaas import parse_jaas
from gregor.security.listener_config import ListenerConfig
from gregor.security.plain import INVALID, PlainServer, plain_users
from gregor.security.principal import KafkaPrincipal
from gregor.security.sasl_client import PlainClient
from gregor.security.sasl_server import AuthenticationFailed
from gregor.security.ssl_principal import distinguished_name, map_principal_name, parse_rules

pytestmark = pytest.mark.unit

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice \\"quoted\\" secret";'
)


def listener(**values: str) -> ListenerConfig:
    base = {"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": JAAS}
    return ListenerConfig("SASL_SSL", "SASL_SSL", {**base, **values})


def test_jaas_options_with_quotes_and_escapes() -> None:
    module = parse_jaas(JAAS)
    assert module.class_name.endswith("PlainLoginModule") and module.flag == "required"
    assert module.options["user_alice"] == 'alice "quoted" secret'
    assert module.options["username"] == "admin"


@pytest.mark.parametrize(
    "text",
    ["x required user_a=b", "required;", "x maybe a=b;", 'x required a="unterminated;'],
)
def test_malformed_jaas_is_refused_without_echoing_values(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_jaas(text)
    assert "unterminated" not in str(caught.value) and "user_a=b" not in str(caught.value)


def test_per_listener_and_per_mechanism_settings_win() -> None:
    config = ListenerConfig(
        "INTERNAL",
        "SASL_PLAINTEXT",
        {
            "sasl.jaas.config": "bare",
            "listener.name.internal.sasl.jaas.config": "listener",
            "listener.name.internal.plain.sasl.jaas.config": "mechanism",
        },
    )
    assert config.get("sasl.jaas.config", mechanism="PLAIN") == "mechanism"
    assert config.get("sasl.jaas.config", mechanism="SCRAM-SHA-256") == "listener"
    assert ListenerConfig("OTHER", "SASL_SSL", config.values).get("sasl.jaas.config") == "bare"
    assert ListenerConfig("X", "SASL_SSL", {}).sasl_mechanisms() == ["GSSAPI"]  # Kafka's default


def test_plain_users_and_constant_answers() -> None:
    assert plain_users(listener()) == {"admin": "admin-secret", "alice": 'alice "quoted" secret'}
    server = PlainServer({"alice": "s3cret"})
    assert server.evaluate(b"\x00alice\x00s3cret") == b"" and server.complete
    assert server.principal() == KafkaPrincipal("User", "alice")
    for token in (b"\x00alice\x00wrong", b"\x00nobody\x00s3cret", b"alice\x00alice\x00wrong"):
        with pytest.raises(AuthenticationFailed, match="Invalid username or password"):
            PlainServer({"alice": "s3cret"}).evaluate(token)


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (b"garbage", "expected 3 tokens"),
        (b"\x00\x00pw", "username not specified"),
        (b"\x00alice\x00", "password not specified"),
        (b"bob\x00alice\x00s3cret", "authorization id that is different"),
        (b"\x00\xff\xfe\x00pw", "not UTF-8"),
    ],
)
def test_plain_refuses_malformed_tokens(token: bytes, why: str) -> None:
    with pytest.raises(AuthenticationFailed, match=why) as caught:
        PlainServer({"alice": "s3cret"}).evaluate(token)
    assert "s3cret" not in str(caught.value)


def test_session_allows_only_the_exchange_before_authentication() -> None:
    session = sasl.SaslSession(listener())
    assert session.allows(api_keys.API_VERSIONS) and session.allows(api_keys.SASL_HANDSHAKE)
    assert not session.allows(api_keys.METADATA) and not session.allows(api_keys.SASL_AUTHENTICATE)
    shake = session.handshake("PLAIN", 1)
    assert (shake.error_code, shake.mechanisms, shake.close) == (0, ["PLAIN"], False)
    assert session.allows(api_keys.SASL_AUTHENTICATE) and not session.allows(api_keys.PRODUCE)
    answer = session.authenticate(
        PlainClient({"username": "admin", "password": "admin-secret"}).initial(), 0
    )
    assert answer.error_code == 0 and answer.principal == KafkaPrincipal("User", "admin")
    assert session.complete and session.allows(api_keys.PRODUCE)


def test_session_failure_and_unknown_mechanism() -> None:
    session = sasl.SaslSession(listener())
    session.handshake("PLAIN", 1)
    answer = session.authenticate(b"\x00admin\x00nope", 0)
    assert (answer.error_code, answer.error_message, answer.failed) == (
        sasl.SASL_AUTHENTICATION_FAILED,
        INVALID,
        True,
    )
    assert answer.principal == KafkaPrincipal("User", "admin")  # claimed, for the log
    assert not session.allows(api_keys.SASL_AUTHENTICATE) and not session.complete
    other = sasl.SaslSession(listener())
    shake = other.handshake("SCRAM-SHA-256", 1)
    assert (shake.error_code, shake.mechanisms, shake.close) == (
        sasl.UNSUPPORTED_SASL_MECHANISM,
        ["PLAIN"],
        True,
    )


def test_handshake_v0_takes_bare_tokens() -> None:
    session = sasl.SaslSession(listener())
    session.handshake("PLAIN", 0)
    assert session.raw_tokens
    assert session.authenticate(b"\x00admin\x00admin-secret", 0).principal is not None


def test_a_mechanism_joins_with_one_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sasl.MECHANISMS, "PLAIN", sasl.MECHANISMS["PLAIN"])  # restored after
    sasl.register("TOY", lambda config: PlainServer({"toy": "toy"}))
    try:
        session = sasl.SaslSession(listener(**{"sasl.enabled.mechanisms": "TOY,PLAIN"}))
        assert session.handshake("TOY", 1).mechanisms == ["TOY", "PLAIN"]
        assert session.authenticate(b"\x00toy\x00toy", 0).principal == KafkaPrincipal("User", "toy")
    finally:
        sasl.MECHANISMS.pop("TOY")


SUBJECT = (
    (("countryName", "US"),),
    (("organizationName", "Example, Inc"),),
    (("organizationalUnitName", "ServiceUsers"),),
    (("commonName", "kafka1"),),
)


def test_distinguished_name_is_rfc2253_most_specific_first() -> None:
    assert distinguished_name(SUBJECT) == "CN=kafka1,OU=ServiceUsers,O=Example\\, Inc,C=US"


@pytest.mark.parametrize(
    ("rules", "dn", "name"),
    [
        ("DEFAULT", "CN=a,O=b", "CN=a,O=b"),
        ("", "CN=a,O=b", "CN=a,O=b"),
        (
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT",
            "CN=kafka1,OU=ServiceUsers,C=US",
            "kafka1",
        ),
        ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=bob,OU=eng", "CN=bob,OU=eng"),
        ("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L", "CN=Bob,OU=Eng", "bob@eng"),
        ("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/U", "CN=Bob,OU=Eng", "BOB@ENG"),
        ("RULE:^CN=([^,]*).*$/u\\/$1/", "CN=x,O=y", "u/x"),
    ],
)
def test_principal_mapping_rules(rules: str, dn: str, name: str) -> None:
    assert map_principal_name(dn, parse_rules(rules)) == name


def test_no_rule_applies_fails() -> None:
    with pytest.raises(ValueError, match="No rules apply"):
        map_principal_name("CN=x", parse_rules("RULE:^OU=(.*)$/$1/"))
    with pytest.raises(ValueError):
        parse_rules("RULE:broken")


def test_per_listener_enabled_mechanisms() -> None:
    values = {
        "sasl.enabled.mechanisms": "GSSAPI",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN, SCRAM-SHA-256, GSSAPI",
        "sasl.jaas.config": JAAS,
    }
    session = sasl.SaslSession(ListenerConfig("INTERNAL", "SASL_SSL", values))
    assert session.enabled == ["PLAIN", "SCRAM-SHA-256"]  # GSSAPI: no server for it
    assert ListenerConfig("EXTERNAL", "SASL_SSL", values).sasl_mechanisms() == ["GSSAPI"]
