"""SASL PLAIN listeners with real clients: the right credentials produce and consume over
SASL_PLAINTEXT and SASL_SSL with confluent-kafka, kafka-python, aiokafka and kcat; a wrong
password gets SASL_AUTHENTICATION_FAILED (each client's error says authentication failed); bad
input (a garbage token, a request before authentication, 1,000 failed logins, a TLS
ClientHello) closes that connection only and leaves the broker serving, and the log never holds
a password. Raw frames are built with gregor's codec through RawClient."""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import struct
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import aiokafka
import confluent_kafka as ck
import kafka
import pytest
from security_certs import Pki
from security_clients import (
    ROUNDTRIPS,
    Target,
    aiokafka_conf,
    confluent_conf,
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

WRONG = "not-the-password-7c1e"
SASL_AUTHENTICATION_FAILED = 58
USERS = 'user_alice="alice-secret" user_bob="bob-secret"'
JAAS = f"org.apache.kafka.common.security.plain.PlainLoginModule required {USERS};"


@pytest.fixture(scope="module")
def plaintext_broker() -> Iterator[Broker]:
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "20",  # 1,000 failures in a few seconds
    }
    with Broker(config, log_level="INFO") as b:
        yield b


@pytest.fixture(scope="module")
def ssl_broker(pki: Pki) -> Iterator[Broker]:
    config = {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server),
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": JAAS,  # the unprefixed form
    }
    with Broker(config, log_level="INFO") as b:
        yield b


@pytest.fixture
def plain(plaintext_broker: Broker) -> Target:
    return Target(
        plaintext_broker.bootstrap, "SASL_PLAINTEXT", user="alice", password="alice-secret"
    )


@pytest.fixture
def tls(ssl_broker: Broker, pki: Pki) -> Target:
    return Target(ssl_broker.bootstrap, "SASL_SSL", ca=pki.ca, user="bob", password="bob-secret")


@pytest.mark.parametrize("client", sorted(ROUNDTRIPS))
@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_right_credentials_produce_and_consume(
    client: str, protocol: str, plain: Target, tls: Target
) -> None:
    target = plain if protocol == "SASL_PLAINTEXT" else tls
    topic = f"sasl-{protocol.lower()}-{client}"
    assert ROUNDTRIPS[client](target, topic) == values(topic)


def test_confluent_wrong_password_is_authentication_failed(plain: Target, tls: Target) -> None:
    for target in (plain, tls):
        errors: list[ck.KafkaError] = []
        conf = confluent_conf(target.with_(password=WRONG))
        producer = ck.Producer({**conf, "error_cb": errors.append})
        deadline = time.monotonic() + 20
        while not errors and time.monotonic() < deadline:
            producer.poll(0.2)
        assert errors and errors[0].code() == ck.KafkaError._AUTHENTICATION, errors
        assert "Authentication failed: Invalid username or password" in errors[0].str()


def test_kafka_python_wrong_password_is_authentication_failed(
    plain: Target, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="kafka")
    with pytest.raises(kafka.errors.KafkaError):
        kafka.KafkaProducer(
            **kafka_python_conf(plain.with_(password=WRONG)), bootstrap_timeout_ms=6000
        )
    assert "SaslAuthenticationFailedError" in caplog.text
    assert "Authentication failed: Invalid username or password" in caplog.text


def test_aiokafka_wrong_password_is_authentication_failed(
    tls: Target, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="aiokafka")

    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(**aiokafka_conf(tls.with_(password=WRONG)))
        try:
            with pytest.raises(aiokafka.errors.KafkaError):
                await producer.start()
        finally:
            await producer.stop()

    asyncio.run(run())
    assert "SaslAuthenticationFailed: Authentication failed: Invalid username or password" in (
        caplog.text
    )


def test_kcat_wrong_password_is_authentication_failed(plain: Target) -> None:
    result = kcat(plain.with_(password=WRONG), "-L", "-m", "5")
    assert result.returncode != 0
    assert b"Authentication failed" in result.stderr, result.stderr


def raw(broker: Broker) -> RawClient:
    return RawClient(broker.bootstrap, timeout_s=10)


def closed(client: RawClient) -> bool:
    try:
        return client.sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_garbage_token_fails_and_closes_that_connection_only(
    plaintext_broker: Broker, plain: Target
) -> None:
    bystander = raw(plaintext_broker)
    assert (
        bystander.call(
            api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")
        ).error_code
        == 0
    )
    with raw(plaintext_broker) as client:
        shake = client.call(api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert (shake.error_code, shake.mechanisms) == (0, ["PLAIN"])
        answer = client.call(
            api_keys.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b"\xff" * 300)
        )
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        assert "Invalid SASL/PLAIN response" in answer.error_message
        assert closed(client)
    token = b"\x00alice\x00alice-secret"
    answer = bystander.call(
        api_keys.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token)
    )
    assert answer.error_code == 0
    assert bystander.call(api_keys.METADATA, 12, MetadataRequest(topics=[])).brokers
    bystander.close()


def test_a_request_before_authentication_closes_the_connection(plaintext_broker: Broker) -> None:
    with raw(plaintext_broker) as client:
        client.send(api_keys.METADATA, 12, MetadataRequest(topics=[]))
        assert closed(client)
    assert logged(
        plaintext_broker.read_log, "Unexpected Kafka request of type Metadata during SASL handshake"
    )


def test_handshake_v0_then_a_bare_token(plaintext_broker: Broker) -> None:
    """SaslHandshake v0: the token follows as a size-prefixed frame with no Kafka header, and
    the (empty) answer comes the same way; then the connection is authenticated."""
    with raw(plaintext_broker) as client:
        assert (
            client.call(
                api_keys.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN")
            ).error_code
            == 0
        )
        token = b"\x00alice\x00alice-secret"
        client.sock.sendall(struct.pack(">i", len(token)) + token)
        assert client.sock.recv(4) == struct.pack(">i", 0)
        assert client.call(api_keys.METADATA, 12, MetadataRequest(topics=[])).brokers


def test_1000_failed_logins_leave_the_broker_serving(
    plaintext_broker: Broker, plain: Target
) -> None:
    before = plaintext_broker.read_log().count("Failed authentication with")
    token = b"\x00alice\x00" + WRONG.encode()

    def fail_once(_: int) -> None:
        with raw(plaintext_broker) as client:
            client.call(api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
            answer = client.call(
                api_keys.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=token)
            )
            assert answer.error_code == SASL_AUTHENTICATION_FAILED
            assert closed(client)

    with ThreadPoolExecutor(16) as pool:  # 16 at a time: each waits out the failure delay
        list(pool.map(fail_once, range(1000)))
    assert ROUNDTRIPS["confluent"](plain, "sasl-after-1000") == values("sasl-after-1000")
    lines = logged(plaintext_broker.read_log, "Failed authentication with", before + 1000)
    assert len(lines) - before == 1000
    log = plaintext_broker.read_log()
    assert "(User:alice, mechanism PLAIN on listener SASL_PLAINTEXT)" in log
    assert WRONG not in log and "alice-secret" not in log


def test_a_tls_client_hello_to_a_plaintext_port_closes_that_connection_only(
    plaintext_broker: Broker, plain: Target
) -> None:
    host, port = plaintext_broker.bootstrap.rsplit(":", 1)
    hello = bytes.fromhex("16030100f4010000f00303") + bytes(300)  # a TLS record, a ClientHello
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(hello)
        try:
            assert s.recv(100) == b""
        except ConnectionResetError:
            pass
    lines = logged(plaintext_broker.read_log, "TLS handshake on a PLAINTEXT")
    assert len(lines) == 1, lines
    assert ROUNDTRIPS["kcat"](plain, "sasl-after-hello") == values("sasl-after-hello")


def test_a_failed_login_is_answered_after_the_delay_and_others_are_served_meanwhile() -> None:
    """connection.failed.authentication.delay.ms=5000: the refusal is not answered at once (a
    second here, whatever the load: a loaded machine only answers later), a bystander logs in
    and is served meanwhile, then the refusal comes and the connection closes."""
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "5000",
    }
    with Broker(config) as broker, raw(broker) as client, raw(broker) as bystander:
        client.call(api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        wrong = b"\x00alice\x00" + WRONG.encode()
        client.send(api_keys.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=wrong))
        readable, _, _ = select.select([client.sock], [], [], 1.0)
        assert not readable  # nothing answered yet
        bystander.call(api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        token = b"\x00alice\x00alice-secret"
        answer = bystander.call(
            api_keys.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=token)
        )
        assert answer.error_code == 0
        assert bystander.call(api_keys.METADATA, 12, MetadataRequest(topics=[])).brokers
        client.sock.settimeout(30)
        assert client.recv().error_code == SASL_AUTHENTICATION_FAILED
        assert closed(client)
