"""KIP-368 re-authentication on a SASL_PLAINTEXT listener with connections.max.reauth.ms=2000:
librdkafka (confluent-kafka) re-authenticates with PLAIN and SCRAM while producing for 8 s, four
lifetimes, without an error, and the broker logs each re-authentication; over raw sockets, a
re-authentication renews the session while a request is in flight, an expired session's next
request closes the connection unanswered, and a change of principal or mechanism is refused as
Kafka refuses it; kafka-python (3.x) re-authenticates too, and aiokafka, which does not, is
disconnected after expiry and reconnects without failing a send."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import aiokafka
import confluent_kafka as ck
import kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from security_clients import Target, aiokafka_conf, confluent_conf, kafka_python_conf, logged

from gregor import Broker
from gregor.protocol import api_keys
from gregor.protocol.messages import (
    FetchRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from gregor.runtime.client import ClientSecurity, NetworkClient
from gregor.security.sasl_client import PlainClient
from gregor.testing.raw_client import RawClient

pytestmark = pytest.mark.client

LIFETIME_MS = 2000
SASL_AUTHENTICATION_FAILED = 58
ILLEGAL_SASL_STATE = 34
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-pw" user_bob="bob-pw" user_erin="erin-pw" user_frank="frank-pw" user_gina="gina-pw" user_hank="hank-pw";'
)
TOPIC = "reauth"
IDLE = "reauth-idle"  # no records: a fetch waits there


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connections.max.reauth.ms": str(LIFETIME_MS),
        "connection.failed.authentication.delay.ms": "20",
    }
    with Broker(config, log_level="INFO") as b:
        admin = AdminClient(confluent_conf(plain(b, "alice")))
        mechanism = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        upsert = UserScramCredentialUpsertion("carol", mechanism, b"carol-pw")
        admin.alter_user_scram_credentials([upsert])["carol"].result(30)
        topics = admin.create_topics([NewTopic(TOPIC, 1, 1), NewTopic(IDLE, 1, 1)])
        for done in topics.values():
            done.result(30)
        yield b


def plain(broker: Broker, user: str) -> Target:
    return Target(broker.bootstrap, "SASL_PLAINTEXT", user=user, password=f"{user}-pw")


@pytest.mark.parametrize(
    ("user", "mechanism", "password"),
    [("alice", "PLAIN", "alice-pw"), ("carol", "SCRAM-SHA-256", "carol-pw")],
)
def test_librdkafka_reauthenticates_while_producing(
    broker: Broker, user: str, mechanism: str, password: str
) -> None:
    target = Target(broker.bootstrap, "SASL_PLAINTEXT", None, None, None, user, password, mechanism)
    errors: list[ck.KafkaError] = []
    failed: list[ck.KafkaError] = []
    producer = ck.Producer(
        {**confluent_conf(target), "acks": "all", "linger.ms": 5, "error_cb": errors.append}
    )
    sent = 0
    end = time.monotonic() + 4 * LIFETIME_MS / 1000
    while time.monotonic() < end:
        producer.produce(
            TOPIC, f"{user}-{sent}".encode(), partition=0,
            on_delivery=lambda err, _msg: err is None or failed.append(err),
        )  # fmt: skip
        sent += 1
        producer.poll(0.01)
    assert producer.flush(30) == 0
    assert not errors and not failed, (errors, failed)
    renewed = logged(broker.read_log, f"re-authenticated as User:{user} ({mechanism})", 3)
    assert len(renewed) >= 3, renewed  # at least three times in four lifetimes
    assert f"SASL session of User:{user} expired" not in broker.read_log()


def raw_login(broker: Broker, user: str = "alice") -> tuple[RawClient, int]:
    """A raw connection authenticated with PLAIN, and the session lifetime it was given."""
    client = RawClient(broker.bootstrap, timeout_s=10)
    shake = client.call(api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert shake.error_code == 0
    answer = client.call(api_keys.SASL_AUTHENTICATE, 2, authenticate(user))
    assert answer.error_code == 0, answer.error_message
    return client, answer.session_lifetime_ms


def authenticate(user: str) -> SaslAuthenticateRequest:
    return SaslAuthenticateRequest(auth_bytes=f"\x00{user}\x00{user}-pw".encode())


def closed(client: RawClient) -> bool:
    try:
        return client.sock.recv(1) == b""
    except ConnectionResetError:
        return True


def metadata(client: RawClient) -> object:
    return client.call(api_keys.METADATA, 12, MetadataRequest(topics=[]))


def test_reauthentication_renews_the_session_with_a_request_in_flight(broker: Broker) -> None:
    client, lifetime = raw_login(broker, "erin")
    first_end = time.monotonic() + LIFETIME_MS / 1000
    assert lifetime == LIFETIME_MS
    with client:
        time.sleep(1.2)  # so that the renewed session outlives the first by 1.2 s
        part = FetchRequest.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )  # fmt: skip
        fetch = FetchRequest(
            replica_id=-1, max_wait_ms=800, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            topics=[FetchRequest.FetchTopic(topic=IDLE, partitions=[part])],
        )  # fmt: skip
        client.send(api_keys.FETCH, 11, fetch)  # parked for max_wait_ms
        client.send(api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        client.send(api_keys.SASL_AUTHENTICATE, 2, authenticate("erin"))
        fetched = client.recv()  # the fetch, answered in order after its wait
        assert fetched.error_code == 0 and fetched.responses[0].partitions[0].error_code == 0
        assert client.recv().error_code == 0
        renewed = client.recv()
        assert (renewed.error_code, renewed.session_lifetime_ms) == (0, LIFETIME_MS)
        time.sleep(max(0.0, first_end + 0.3 - time.monotonic()))  # past the first session's end
        assert metadata(client).brokers
        # Again, then a third time within a second: answered as on any authenticated connection.
        client.call(api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert client.call(api_keys.SASL_AUTHENTICATE, 2, authenticate("erin")).error_code == 0
        again = client.call(api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert again.error_code == ILLEGAL_SASL_STATE
    assert logged(broker.read_log, "re-authenticated as User:erin (PLAIN)")


def test_an_expired_sessions_next_request_closes_the_connection(broker: Broker) -> None:
    client, _ = raw_login(broker, "frank")
    with client:
        assert metadata(client).brokers
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        client.send(api_keys.METADATA, 12, MetadataRequest(topics=[]))
        assert closed(client)  # unanswered
    assert logged(broker.read_log, "SASL session of User:frank expired")


def test_reauthenticating_as_another_principal_is_refused(broker: Broker) -> None:
    client, _ = raw_login(broker, "alice")
    with client:
        shake = client.call(api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert shake.error_code == 0
        answer = client.call(api_keys.SASL_AUTHENTICATE, 2, authenticate("bob"))
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        assert answer.error_message == (
            "Cannot change principals during re-authentication from User.alice: User.bob"
        )
        assert closed(client)
    assert logged(broker.read_log, "Failed re-authentication with")


def test_reauthenticating_with_another_mechanism_is_refused_unanswered(broker: Broker) -> None:
    client, _ = raw_login(broker, "alice")
    with client:
        shake = client.call(
            api_keys.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256")
        )
        assert shake.error_code == 0  # as Kafka: the next token fails
        client.send(api_keys.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b"n,,n=x"))
        assert closed(client)
    assert logged(broker.read_log, "not supported for re-authentication of mechanism 'PLAIN'")


def test_kafka_python_reauthenticates_while_producing(broker: Broker) -> None:
    """kafka-python (3.x) re-authenticates within the session lifetime it is given."""
    producer = kafka.KafkaProducer(**kafka_python_conf(plain(broker, "gina")), acks="all")
    sent = 0
    try:
        end = time.monotonic() + 3 * LIFETIME_MS / 1000
        while time.monotonic() < end:
            producer.send(TOPIC, b"kafka-python", partition=0).get(30)
            sent += 1
            time.sleep(0.02)
    finally:
        producer.close()
    assert sent > 10
    renewed = logged(broker.read_log, "re-authenticated as User:gina (PLAIN)", 2)
    assert len(renewed) >= 2, renewed
    assert "SASL session of User:gina expired" not in broker.read_log()


def test_aiokafka_is_disconnected_after_expiry_and_reconnects(broker: Broker) -> None:
    target = plain(broker, "bob")
    before = broker.read_log().count("SASL session of User:bob expired")

    async def run() -> int:
        producer = aiokafka.AIOKafkaProducer(**aiokafka_conf(target), acks="all")
        await producer.start()
        sent = 0
        try:
            end = time.monotonic() + 3 * LIFETIME_MS / 1000
            while time.monotonic() < end:
                await producer.send_and_wait(TOPIC, b"aiokafka", partition=0)
                sent += 1
                await asyncio.sleep(0.05)
        finally:
            await producer.stop()
        return sent

    assert asyncio.run(run()) > 10
    assert len(logged(broker.read_log, "SASL session of User:bob expired", before + 1)) > before


def test_a_nodes_own_client_moves_to_a_new_connection_before_its_session_ends(
    broker: Broker,
) -> None:
    """What nodes use between themselves (runtime/client.py) does not re-authenticate in place:
    near the session's end its next request goes on a new connection, none on an expired one."""
    host, port = broker.bootstrap.rsplit(":", 1)
    options = {"username": "hank", "password": "hank-pw"}
    security = ClientSecurity(None, "PLAIN", lambda: PlainClient(options))

    async def run() -> tuple[int, int]:
        client = NetworkClient({1: (host, int(port))}, security=security)
        seen: list[object] = []  # held, so that no two share an id
        answered = 0
        try:
            end = time.monotonic() + 3 * LIFETIME_MS / 1000
            while time.monotonic() < end:
                body = MetadataRequest(topics=[])
                answer = await client.send(1, api_keys.METADATA, 12, body)
                answered += bool(answer.brokers)
                connection = client.connection(1)
                assert connection is not None
                if not any(c is connection for c in seen):
                    seen.append(connection)
                await asyncio.sleep(0.05)
        finally:
            await client.close()
        return answered, len(seen)

    answered, connections = asyncio.run(run())
    assert answered > 20 and connections >= 3  # one per 85% of a lifetime, at least
    assert "SASL session of User:hank expired" not in broker.read_log()
