"""SaslHandshake and SaslAuthenticate on a PLAINTEXT listener, answered as Kafka's KafkaApis
answers them there: ILLEGAL_SASL_STATE (no enabled mechanisms; for SaslAuthenticate, Kafka's
message), the connection kept open, and both listed by ApiVersions as Kafka lists them. A
confluent-kafka client configured for SASL_PLAINTEXT / PLAIN then fails its handshake at once
with librdkafka's authentication error naming that state, instead of a dropped connection.

The handshake frames are built and read with struct (an oracle independent of gregor's codec):
    SaslHandshakeRequest v0-1  => mechanism:string
    SaslHandshakeResponse v0-1 => error_code:int16 mechanisms:[]string
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from client_helpers import frame, parse_api_versions_v0, recv_frame, request_header, served_apis
from confluent_kafka.admin import AdminClient

from gregor import Broker
from gregor.protocol import api_keys, errors, messages
from gregor.testing.raw_client import RawClient

ILLEGAL_SASL_STATE = 34
AFTER_AUTHENTICATION = "SaslAuthenticate request received after successful authentication"


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with Broker(log_level="INFO") as b:
        yield b


def handshake_body(mechanism: bytes) -> bytes:
    return struct.pack(">h", len(mechanism)) + mechanism


def test_api_versions_lists_both_sasl_apis(broker: Broker) -> None:
    apis = served_apis(broker.bootstrap)
    assert (apis.get(17), apis.get(36)) == ((0, 1), (0, 2))  # SaslHandshake, SaslAuthenticate


def test_sasl_handshake_answers_illegal_state_and_keeps_the_connection(broker: Broker) -> None:
    host, port = broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        for version, corr in ((0, 71), (1, 72)):
            s.sendall(frame(request_header(17, version, corr) + handshake_body(b"PLAIN")))
            answer = recv_frame(s)
            # correlation id, error_code, an empty mechanisms array, nothing after it
            assert answer == struct.pack(">ihi", corr, ILLEGAL_SASL_STATE, 0), (version, answer)
        s.sendall(frame(request_header(18, 0, 73)))  # the same connection still serves
        corr, err, apis = parse_api_versions_v0(recv_frame(s))
        assert (corr, err) == (73, 0) and 17 in apis


def test_sasl_authenticate_answers_illegal_state(broker: Broker) -> None:
    with RawClient(broker.bootstrap) as raw:
        for version in (0, 1, 2):
            r = raw.call(
                api_keys.SASL_AUTHENTICATE,
                version,
                messages.SaslAuthenticateRequest(auth_bytes=b"\x00u\x00p"),
            )
            assert (r.error_code, r.error_message, bytes(r.auth_bytes)) == (
                errors.BY_NAME["ILLEGAL_SASL_STATE"].code,
                AFTER_AUTHENTICATION,
                b"",
            ), version


@pytest.mark.parametrize("kind", ["producer", "consumer", "admin"])
def test_librdkafka_with_sasl_against_plaintext_fails_clearly(broker: Broker, kind: str) -> None:
    reported: list[ck.KafkaError] = []
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": "secret",
        "error_cb": reported.append,
    }
    client: ck.Producer | ck.Consumer | AdminClient
    if kind == "producer":
        client = ck.Producer(conf)
    elif kind == "consumer":
        client = ck.Consumer({**conf, "group.id": "sasl-test"})
    else:
        client = AdminClient(conf)
    start = time.monotonic()
    while not reported and time.monotonic() - start < 10:
        client.poll(0.05)
    took = time.monotonic() - start
    try:
        assert reported, "librdkafka reported nothing in 10 s"
        err = reported[0]
        assert err.code() == ck.KafkaError._AUTHENTICATION, err
        assert "SASL PLAIN mechanism handshake failed" in err.str(), err.str()
        assert "Request not valid in current SASL state" in err.str(), (
            err.str()
        )  # ILLEGAL_SASL_STATE
        assert took < 5, f"the error took {took:.2f} s"
        with pytest.raises(ck.KafkaException) as ei:
            client.list_topics(timeout=2)
        assert ei.value.args[0].code() == ck.KafkaError._TRANSPORT
    finally:
        if isinstance(client, ck.Consumer):
            client.close()
    # The broker still serves PLAINTEXT clients.
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert md.brokers
