"""TLS listeners with real clients: server authentication and mutual TLS with confluent-kafka,
kafka-python, aiokafka and kcat; an untrusted CA, a client certificate from another CA and an
expired certificate fail the handshake; plain text to a TLS port closes that connection only;
the principal of a mutual-TLS client is its certificate's name, mapped by the rules, and the
ACLs decide on it."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from security_certs import Pki
from security_clients import ROUNDTRIPS, Target, confluent_conf, kcat, logged, values

from gregor import Broker
from gregor.broker.listener_security import listener_security
from gregor.runtime.server import Server
from gregor.security.listener_config import ListenerConfig
from gregor.security.principal import principal_of

pytestmark = pytest.mark.client

RULES = "RULE:^CN=(.*?),OU=(.*?),O=Gregor Tests$/$1@$2/L,DEFAULT"


@pytest.fixture(scope="module")
def broker(pki: Pki) -> Iterator[Broker]:
    config = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.location": str(pki.server),
        "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "requested",
        "ssl.principal.mapping.rules": RULES,
        # ACLs decide on the certificate's mapped name; what no ACL names is open to all
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
    }
    with Broker(config, log_level="INFO") as b:
        yield b


@pytest.fixture
def target(broker: Broker, pki: Pki) -> Target:
    return Target(broker.bootstrap, "SSL", ca=pki.ca)


@pytest.mark.parametrize("client", sorted(ROUNDTRIPS))
@pytest.mark.parametrize("mutual", [False, True], ids=["server-auth", "mutual-tls"])
def test_produce_and_consume_over_tls(client: str, mutual: bool, target: Target, pki: Pki) -> None:
    if mutual:
        target = target.with_(cert=pki.client_cert, key=pki.client_key)
    topic = f"tls-{client}-{'mutual' if mutual else 'server'}"
    assert ROUNDTRIPS[client](target, topic) == values(topic)


def handshake_error(conf: dict[str, Any]) -> str:
    """The first error a confluent-kafka producer reports (it never gets metadata)."""
    errors: list[str] = []
    producer = ck.Producer({**conf, "error_cb": lambda e: errors.append(str(e))})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    with pytest.raises(ck.KafkaException):
        producer.list_topics(timeout=1)
    assert errors, "no error within 20 s"
    return errors[0]


def test_a_server_from_an_untrusted_ca_fails_the_handshake(target: Target, pki: Pki) -> None:
    error = handshake_error(confluent_conf(target.with_(ca=pki.other_ca)))
    assert "certificate verify failed" in error, error
    result = kcat(target.with_(ca=pki.other_ca), "-L", "-m", "5")
    assert result.returncode != 0 and b"certificate verify failed" in result.stderr


@pytest.mark.parametrize("which", ["other-ca", "expired"])
def test_a_client_certificate_the_broker_does_not_trust_fails_the_handshake(
    which: str, target: Target, broker: Broker, pki: Pki
) -> None:
    if which == "other-ca":
        bad = target.with_(cert=pki.rogue_client_cert, key=pki.rogue_client_key)
    else:  # expired yesterday, from the trusted CA
        bad = target.with_(cert=pki.expired_server, key=pki.expired_server)
    before = broker.read_log().count("TLS handshake failed")
    handshake_error(confluent_conf(bad))
    failures = logged(broker.read_log, "TLS handshake failed", before + 1)
    assert len(failures) > before
    # The client retries; a retry it abandons mid-handshake (the producer closing) is logged
    # with its own reason, so the refused certificate must be named, not every line.
    reason = "CERTIFICATE_VERIFY_FAILED"
    assert any(reason in line for line in failures[before:]), failures[before:]
    assert ROUNDTRIPS["confluent"](target, f"tls-after-{which}") == values(f"tls-after-{which}")


def handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[str, Any] | None:
    """A TLS handshake between the two contexts over a socket pair: None when it completes,
    else ("client" or "server", the first side's SSLError)."""
    a, b = socket.socketpair()
    with a, b:
        server = server_ctx.wrap_socket(a, server_side=True, do_handshake_on_connect=False)
        client = client_ctx.wrap_socket(
            b, server_hostname="localhost", do_handshake_on_connect=False
        )
        server.setblocking(False)
        client.setblocking(False)
        done: set[str] = set()
        for _ in range(100):
            for name, side in (("client", client), ("server", server)):
                if name in done:
                    continue
                try:
                    side.do_handshake()
                    done.add(name)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
                except ssl.SSLError as exc:
                    return name, exc
            if len(done) == 2:
                return None
    raise AssertionError("the handshake neither completed nor failed")


def server_tls(pki: Pki, **settings: str) -> ssl.SSLContext:
    config = ListenerConfig("SSL", "SSL", {"ssl.keystore.location": str(pki.server), **settings})
    tls = listener_security(config).tls
    assert tls is not None
    return tls


def test_an_expired_server_certificate_fails_the_handshake(pki: Pki) -> None:
    """The client refuses a broker whose certificate expired (checked in this process with the
    same ssl settings the broker uses, so no broker start is spent on it)."""
    config = ListenerConfig("SSL", "SSL", {"ssl.keystore.location": str(pki.expired_server)})
    security = listener_security(config)
    assert security.tls is not None
    failed = handshake(security.tls, ssl.create_default_context(cafile=str(pki.ca)))
    assert failed is not None and failed[0] == "client"
    assert "certificate has expired" in str(failed[1])


def test_enabled_protocols_and_cipher_suites_decide_the_handshake(pki: Pki) -> None:
    """ssl.enabled.protocols=TLSv1.3 refuses a TLS 1.2 client; ssl.cipher.suites (Kafka's
    names) refuses a TLS 1.2 client offering none of them and serves one offering one."""

    def client(max_version: ssl.TLSVersion, ciphers: str | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(pki.ca))
        ctx.maximum_version = max_version
        if ciphers:
            ctx.set_ciphers(ciphers)
        return ctx

    tls13 = server_tls(pki, **{"ssl.enabled.protocols": "TLSv1.3"})
    assert handshake(tls13, client(ssl.TLSVersion.TLSv1_3)) is None
    refused = handshake(tls13, client(ssl.TLSVersion.TLSv1_2))
    assert refused is not None and refused[0] == "server", refused
    assert "UNSUPPORTED_PROTOCOL" in str(refused[1]), refused
    suites = {"ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}
    one_suite = server_tls(pki, **suites)
    tls12 = ssl.TLSVersion.TLSv1_2
    assert handshake(one_suite, client(tls12, "ECDHE-ECDSA-AES256-GCM-SHA384")) is None
    refused = handshake(one_suite, client(tls12, "ECDHE-ECDSA-AES128-GCM-SHA256"))
    assert refused is not None and refused[0] == "server", refused
    assert "NO_SHARED_CIPHER" in str(refused[1]), refused


def test_plaintext_to_a_tls_port_closes_that_connection_only(
    broker: Broker, target: Target
) -> None:
    before = broker.read_log().count("TLS handshake failed")
    host, port = broker.bootstrap.rsplit(":", 1)
    api_versions = struct.pack(">ihhih", 10, 18, 0, 1, 0)  # size, key, version, id, client id
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(api_versions)
        try:
            answer = s.recv(100)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(struct.pack(">i", 1))  # no Kafka answer to it
    failures = logged(broker.read_log, "TLS handshake failed", before + 1)
    assert len(failures) == before + 1 and "WRONG_VERSION_NUMBER" in failures[-1], failures
    assert ROUNDTRIPS["confluent"](target, "tls-after-plaintext") == values("tls-after-plaintext")


def test_the_principal_of_a_mutual_tls_client_is_its_mapped_certificate_name(pki: Pki) -> None:
    """A real TLS listener (the broker's server and listener security) and a client presenting
    CN=alice,OU=eng,O=Gregor Tests: RULES map it to User:alice@eng; without a certificate the
    connection is User:ANONYMOUS."""
    config = ListenerConfig(
        "SSL",
        "SSL",
        {
            "ssl.keystore.location": str(pki.server),
            "ssl.truststore.location": str(pki.ca),
            "ssl.client.auth": "requested",
            "ssl.principal.mapping.rules": RULES,
        },
    )
    security = listener_security(config)
    seen: list[str] = []

    def dispatch(conn: Any, frame: memoryview) -> list[bytes]:
        seen.append(str(principal_of(conn.attributes)))
        return [struct.pack(">ii", 4, 0)]

    async def run() -> None:
        server = Server(
            dispatch, host="127.0.0.1", port=0, tls=security.tls, on_secure=security.on_secure
        )
        await server.start()
        for cert in (True, False):
            context = ssl.create_default_context(cafile=str(pki.ca))
            if cert:
                context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=context, server_hostname="localhost"
            )
            writer.write(struct.pack(">i", 4) + b"ping")
            await reader.readexactly(8)
            writer.close()
        await server.stop(0)

    asyncio.run(run())
    assert seen == ["User:alice@eng", "User:ANONYMOUS"]


def test_acls_decide_on_the_mapped_certificate_name(
    broker: Broker, target: Target, pki: Pki
) -> None:
    """A topic only User:alice@eng may use: the client presenting alice's certificate
    produces and consumes, the same client without it (User:ANONYMOUS) is refused."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    topic = "tls-alice-only"
    binding = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice@eng", "*",
        AclOperation.ALL, AclPermissionType.ALLOW,
    )  # fmt: skip
    admin = AdminClient(confluent_conf(target))
    admin.create_acls([binding])[binding].result(30)
    alice = target.with_(cert=pki.client_cert, key=pki.client_key)
    assert ROUNDTRIPS["confluent"](alice, topic) == values(topic)
    outcome: list[ck.KafkaError | None] = []
    producer = ck.Producer({**confluent_conf(target), "message.timeout.ms": 10000})
    producer.produce(topic, b"anonymous", on_delivery=lambda e, _m: outcome.append(e))
    producer.flush(20)
    assert len(outcome) == 1 and outcome[0] is not None
    assert outcome[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_megabytes_each_way_over_tls(target: Target) -> None:
    """Produce requests of ~1 MiB batches (frames read across many TLS records) and fetch
    responses of several MiB (segment slices read with pread and written through the SSL
    object in pieces): every byte arrives, in order."""
    conf = confluent_conf(target)
    records = [bytes([i % 251]) * 1000 + i.to_bytes(4, "big") for i in range(6000)]
    producer = ck.Producer({**conf, "linger.ms": 50, "batch.size": 1_000_000, "acks": 1})
    for record in records:
        producer.produce("tls-bulk", record, partition=0)
    assert producer.flush(60) == 0
    consumer = ck.Consumer(
        {**conf, "group.id": "unused", "enable.auto.commit": False, "fetch.max.bytes": 8_000_000}
    )
    consumer.assign([ck.TopicPartition("tls-bulk", 0, ck.OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < len(records) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    consumer.close()
    assert got == records


def test_the_keystore_is_reloaded_by_alter_configs(
    broker: Broker, target: Target, pki: Pki
) -> None:
    """IncrementalAlterConfigs on listener.name.ssl.ssl.keystore.location swaps the certificate
    without a restart: new connections get the new one (signed by another CA), so a client
    trusting only that CA connects and one trusting only the old CA does not; a keystore that
    does not load is logged and the listener keeps the certificate it has."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    key = "listener.name.ssl.ssl.keystore.location"

    def set_keystore(path: str, via: Target) -> None:
        admin = AdminClient(confluent_conf(via))
        entry = ConfigEntry(key, path, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(30)

    def wait_for_log(text: str, count: int) -> None:
        deadline = time.monotonic() + 20
        while broker.read_log().count(text) < count:
            assert time.monotonic() < deadline, f"no {text!r} in the log"
            time.sleep(0.1)

    reloaded = broker.read_log().count("TLS stores reloaded")
    set_keystore(str(pki.rogue_server), target)
    wait_for_log("TLS stores reloaded", reloaded + 1)
    rotated = target.with_(ca=pki.other_ca)
    assert ROUNDTRIPS["confluent"](rotated, "tls-rotated") == values("tls-rotated")
    assert "certificate verify failed" in handshake_error(confluent_conf(target))
    set_keystore("/nonexistent/keystore.pem", rotated)
    wait_for_log("new TLS settings not applied", 1)
    assert ROUNDTRIPS["kcat"](rotated, "tls-kept") == values("tls-kept")
    set_keystore(str(pki.server), rotated)  # back, for whatever runs next
    wait_for_log("TLS stores reloaded", reloaded + 2)
