"""The SASL mechanisms the other files try on one protocol, through the other one too, with
real clients: OAUTHBEARER with unsecured tokens over SASL_PLAINTEXT (confluent-kafka,
kafka-python, aiokafka, kcat), OAUTHBEARER with RS256 JWTs checked against a JWKS file over
SASL_SSL (confluent-kafka, kafka-python and aiokafka through their token callbacks; kcat has
none), SCRAM-SHA-256/512 over SASL_SSL (all four). Refused tokens (an unsecured one where a JWKS
is set, one signed by another key, an expired one, a wrong audience) and a wrong SCRAM password
fail with SASL_AUTHENTICATION_FAILED, as each client reports it; and a SCRAM exchange with a wrong nonce, sent by hand, closes that
connection only."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import aiokafka
import confluent_kafka as ck
import kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from security_certs import Pki
from security_clients import (
    ROUNDTRIPS,
    Target,
    aiokafka_conf,
    confluent_conf,
    first_error,
    kafka_python_conf,
    kcat,
    logged,
    values,
)

from gregor import Broker
from gregor.protocol import api_keys
from gregor.protocol.messages import (
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from gregor.testing.raw_client import RawClient

pytestmark = pytest.mark.client

SASL_AUTHENTICATION_FAILED = 58
ADMIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw";'
PASSWORDS = {"SCRAM-SHA-256": "erin-256", "SCRAM-SHA-512": "erin-512"}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _part(obj: object) -> str:
    return _b64(json.dumps(obj).encode())


class Idp:
    """An identity provider: an RSA key, its JWK Set, and RS256 JWTs it signs."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> str:
        n = self.key.public_key().public_numbers()
        jwk = {
            "kty": "RSA",
            "kid": "k1",
            "use": "sig",
            "alg": "RS256",
            "n": _b64(n.n.to_bytes((n.n.bit_length() + 7) // 8, "big")),
            "e": _b64(n.e.to_bytes((n.e.bit_length() + 7) // 8, "big")),
        }
        return json.dumps({"keys": [jwk]})

    def sign(self, subject: str, lifetime_s: int = 3600, **claims: Any) -> str:
        now = int(time.time())
        body = {"sub": subject, "iat": now, "exp": now + lifetime_s, "aud": "kafka", **claims}
        signing_input = f"{_part({'alg': 'RS256', 'typ': 'JWT', 'kid': 'k1'})}.{_part(body)}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"


@pytest.fixture(scope="module")
def idp() -> Idp:
    return Idp()


@pytest.fixture(scope="module")
def broker(pki: Pki, idp: Idp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    jwks = tmp_path_factory.mktemp("idp") / "jwks.json"
    jwks.write_text(idp.jwks())
    oauth = "listener.name.sasl_ssl.oauthbearer."
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": ADMIN,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": ADMIN,
        oauth + "sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri(),
        oauth + "sasl.oauthbearer.expected.audience": "kafka",
        "connection.failed.authentication.delay.ms": "20",
    }
    with Broker(config, log_level="INFO") as b:
        plaintext = f"127.0.0.1:{b.listener_ports['SASL_PLAINTEXT']}"
        admin = AdminClient(
            confluent_conf(Target(plaintext, "SASL_PLAINTEXT", user="admin", password="admin-pw"))
        )
        for mechanism, password in PASSWORDS.items():  # a user once per request, as Kafka asks
            info = ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")), 4096)
            upsert = UserScramCredentialUpsertion("erin", info, password.encode())
            admin.alter_user_scram_credentials([upsert])["erin"].result(30)
        yield b


def plaintext(broker: Broker, **kw: Any) -> Target:
    port = broker.listener_ports["SASL_PLAINTEXT"]
    return Target(f"127.0.0.1:{port}", "SASL_PLAINTEXT", **kw)


def tls(broker: Broker, pki: Pki, **kw: Any) -> Target:
    port = broker.listener_ports["SASL_SSL"]
    return Target(f"127.0.0.1:{port}", "SASL_SSL", ca=pki.ca, **kw)


@pytest.mark.parametrize("client", sorted(ROUNDTRIPS))
def test_unsecured_oauthbearer_tokens_over_sasl_plaintext(broker: Broker, client: str) -> None:
    target = plaintext(broker, mechanism="OAUTHBEARER", user="dave")
    topic = f"oauth-unsecured-{client}"
    assert ROUNDTRIPS[client](target, topic) == values(topic)


@pytest.mark.parametrize("client", ["aiokafka", "confluent", "kafka-python"])
def test_jwks_signed_jwts_over_sasl_ssl(broker: Broker, pki: Pki, idp: Idp, client: str) -> None:
    target = tls(broker, pki, mechanism="OAUTHBEARER", token=idp.sign("frank"))
    topic = f"oauth-jwt-{client}"
    assert ROUNDTRIPS[client](target, topic) == values(topic)


@pytest.mark.parametrize("client", sorted(ROUNDTRIPS))
@pytest.mark.parametrize("mechanism", sorted(PASSWORDS))
def test_scram_over_sasl_ssl(broker: Broker, pki: Pki, client: str, mechanism: str) -> None:
    target = tls(broker, pki, user="erin", password=PASSWORDS[mechanism], mechanism=mechanism)
    topic = f"scram-ssl-{mechanism.lower()}-{client}"
    assert ROUNDTRIPS[client](target, topic) == values(topic)


def test_refused_tokens_fail_authentication(broker: Broker, pki: Pki, idp: Idp) -> None:
    refused = {
        "unsecured where a JWKS is set": None,
        "signed by another key": Idp().sign("frank"),
        "expired": idp.sign("frank", lifetime_s=-120),
        "another audience": idp.sign("frank", aud="elsewhere"),
    }
    for why, token in refused.items():
        target = tls(broker, pki, mechanism="OAUTHBEARER", user="frank", token=token)
        error = first_error(confluent_conf(target))
        assert error.code() == ck.KafkaError._AUTHENTICATION, (why, error)
    result = kcat(tls(broker, pki, mechanism="OAUTHBEARER", user="frank"), "-L", "-m", "5")
    assert result.returncode != 0 and b"Authentication failed" in result.stderr, result.stderr
    assert "Failed authentication" in broker.read_log()


def test_a_scram_exchange_with_a_wrong_nonce_closes_that_connection_only(
    broker: Broker,
) -> None:
    """The client's final message names a nonce the server never sent: SASL_AUTHENTICATION_FAILED
    and that connection closed; one authenticating meanwhile is served."""
    from gregor.security.scram import ScramClient

    address = plaintext(broker).bootstrap
    bystander = RawClient(address, timeout_s=10)
    shake = bystander.call(
        api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256")
    )
    assert shake.error_code == 0
    with RawClient(address, timeout_s=10) as raw:
        raw.call(api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        first = ScramClient(
            "SCRAM-SHA-256", {"username": "erin", "password": PASSWORDS["SCRAM-SHA-256"]}
        )
        answer = raw.call(
            api_keys.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=first.initial())
        )
        assert answer.error_code == 0
        server_first = answer.auth_bytes.decode()
        nonce = dict(p.split("=", 1) for p in server_first.split(","))["r"]
        forged = server_first.replace(nonce, nonce[:-4] + "AAAA").encode()
        final = first.respond(forged)  # a proof over a nonce the server did not send
        assert final is not None
        answer = raw.call(api_keys.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=final))
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        try:
            assert raw.sock.recv(1) == b""
        except ConnectionResetError:
            pass
    honest = ScramClient(
        "SCRAM-SHA-256", {"username": "erin", "password": PASSWORDS["SCRAM-SHA-256"]}
    )
    token: bytes | None = honest.initial()
    while token is not None:
        answer = bystander.call(
            api_keys.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token)
        )
        assert answer.error_code == 0, answer.error_message
        token = honest.respond(answer.auth_bytes)
    assert bystander.call(api_keys.METADATA, 12, MetadataRequest(topics=[])).brokers
    bystander.close()
    assert PASSWORDS["SCRAM-SHA-256"] not in broker.read_log()


def refused_by(client: str, target: Target, caplog: pytest.LogCaptureFixture) -> str:
    """What `client` reports when the broker refuses its login (its log or stderr)."""
    if client == "kcat":
        result = kcat(target, "-L", "-m", "5")
        assert result.returncode != 0
        return result.stderr.decode(errors="replace")
    if client == "kafka-python":
        caplog.set_level(logging.ERROR, logger="kafka")
        with pytest.raises(kafka.errors.KafkaError):
            kafka.KafkaProducer(**kafka_python_conf(target), bootstrap_timeout_ms=6000)
        return caplog.text
    caplog.set_level(logging.ERROR, logger="aiokafka")

    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(**aiokafka_conf(target))
        try:
            with pytest.raises(aiokafka.errors.KafkaError):
                await producer.start()
        finally:
            await producer.stop()

    asyncio.run(run())
    return caplog.text


@pytest.mark.parametrize("client", ["aiokafka", "kafka-python", "kcat"])
def test_a_wrong_scram_password_is_refused_by_each_client(
    broker: Broker, pki: Pki, client: str, caplog: pytest.LogCaptureFixture
) -> None:
    target = tls(broker, pki, user="erin", password="not-hers", mechanism="SCRAM-SHA-512")
    report = refused_by(client, target, caplog)
    assert "Authentication failed" in report or "SaslAuthenticationFailed" in report, report


@pytest.mark.parametrize("client", ["aiokafka", "kafka-python"])
def test_a_token_of_another_issuer_is_refused_by_each_client(
    broker: Broker, pki: Pki, client: str, caplog: pytest.LogCaptureFixture
) -> None:
    """kafka-python acknowledges the server's error (RFC 7628) and reports the refusal;
    aiokafka does not read the error, takes itself for authenticated and sends Metadata, which
    the broker refuses mid-exchange by closing the connection (as Kafka does): it never gets in."""
    target = tls(broker, pki, mechanism="OAUTHBEARER", token=Idp().sign("frank"))
    before = broker.read_log().count("during SASL handshake")
    report = refused_by(client, target, caplog)
    if client == "kafka-python":
        assert "SaslAuthenticationFailed" in report, report
    else:
        assert logged(broker.read_log, "during SASL handshake", before + 1)[before:]
