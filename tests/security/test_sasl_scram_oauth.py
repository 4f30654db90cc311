"""SCRAM-SHA-256/512 and OAUTHBEARER through a broker's SASL listener with real clients: users
created with AlterUserScramCredentials (over the listener itself, as a PLAIN admin) log in with
confluent-kafka, kafka-python, aiokafka and kcat, produce and consume; a wrong password or an
unknown user is refused with SASL_AUTHENTICATION_FAILED; librdkafka's unsecured OAUTHBEARER
token logs in (expired and badly signed tokens: test_oauthbearer.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from security_clients import ROUNDTRIPS, Target, confluent_conf, first_error, values

from gregor import Broker

pytestmark = pytest.mark.client

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw";'
PASSWORDS = {"SCRAM-SHA-256": "carol-256", "SCRAM-SHA-512": "carol-512"}


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": "20",
    }
    with Broker(config) as b:
        admin = AdminClient(
            confluent_conf(Target(b.bootstrap, "SASL_PLAINTEXT", user="admin", password="admin-pw"))
        )
        upserts = [
            UserScramCredentialUpsertion(
                "carol", ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), 4096),
                password.encode(),
            )
            for m, password in PASSWORDS.items()
        ]  # fmt: skip
        for upsert in upserts:  # a user once per request, as Kafka requires
            admin.alter_user_scram_credentials([upsert])["carol"].result(30)
        yield b


def carol(broker: Broker, mechanism: str) -> Target:
    return Target(
        broker.bootstrap, "SASL_PLAINTEXT", user="carol", password=PASSWORDS[mechanism],
        mechanism=mechanism,
    )  # fmt: skip


@pytest.mark.parametrize("client", sorted(ROUNDTRIPS))
@pytest.mark.parametrize("mechanism", sorted(PASSWORDS))
def test_a_scram_user_produces_and_consumes(broker: Broker, client: str, mechanism: str) -> None:
    topic = f"scram-{mechanism.lower()}-{client}"
    assert ROUNDTRIPS[client](carol(broker, mechanism), topic) == values(topic)


@pytest.mark.parametrize(
    "change", [{"password": "wrong-pw"}, {"user": "nobody"}], ids=["wrong-password", "no-user"]
)
def test_a_wrong_scram_login_is_authentication_failed(broker: Broker, change: dict) -> None:
    error = first_error(confluent_conf(carol(broker, "SCRAM-SHA-512").with_(**change)))
    assert error.code() == ck.KafkaError._AUTHENTICATION, error
    assert "Authentication failed" in error.str(), error.str()


def oauth_conf(broker: Broker, lifetime_s: int) -> dict[str, object]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": f"principal=dave lifeSeconds={lifetime_s}",
    }


def test_an_unsecured_oauthbearer_token_logs_in(broker: Broker) -> None:
    topic = "oauth-roundtrip"
    producer = ck.Producer({**oauth_conf(broker, 3600), "acks": "all"})
    for value in values(topic):
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    consumer = ck.Consumer({**oauth_conf(broker, 3600), "group.id": "oauth-readers"})
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < len(values(topic)) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    assert got == values(topic)
