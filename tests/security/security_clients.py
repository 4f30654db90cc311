"""One round trip (produce N records to partition 0, read them back without a group) with each
client library, from one description of how to reach a listener (`Target`).

OAUTHBEARER: `mechanism="OAUTHBEARER"` with `token` (a JWT, handed to each library's token
callback: kcat has none) or without (an unsecured token for `user`: librdkafka and kcat make
their own, `enable.sasl.oauthbearer.unsecure.jwt`; the Python clients are given one made here)."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import aiokafka
import confluent_kafka as ck
import kafka
from aiokafka.abc import AbstractTokenProvider as AioTokenProvider
from aiokafka.helpers import create_ssl_context
from kafka.net.sasl.oauth import AbstractTokenProvider

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
N = 20


def first_error(conf: dict[str, object]) -> ck.KafkaError:
    """The first error a confluent-kafka producer with `conf` reports (a refused login, a
    failed handshake), within 20 s."""
    errors: list[ck.KafkaError] = []
    producer = ck.Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "no error within 20 s"
    return errors[0]


@dataclass(frozen=True)
class Target:
    bootstrap: str
    protocol: str  # security.protocol
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    user: str | None = None
    password: str | None = None
    mechanism: str = "PLAIN"  # sasl.mechanism when user is set
    token: str | None = None  # OAUTHBEARER: the token to present (None: unsecured, for user)

    def with_(self, **changes: object) -> Target:
        return replace(self, **changes)  # type: ignore[arg-type]


def logged(read_log: Callable[[], str], text: str, at_least: int = 1) -> list[str]:
    """The log lines holding `text`, once there are `at_least` of them (a node may log a refused
    connection just after the client saw it refused), or what there is after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        lines = [line for line in read_log().splitlines() if text in line]
        if len(lines) >= at_least or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def unsecured_token(principal: str, lifetime_s: int = 3600) -> str:
    """An unsecured JWS (`"alg":"none"`) for `principal`, as librdkafka's unsecure JWT is."""
    now = int(time.time())
    claims = {"sub": principal, "iat": now, "exp": now + lifetime_s}

    def part(obj: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part(claims)}."


def bearer(t: Target) -> str:
    assert t.token or t.user, "OAUTHBEARER needs a token or a user"
    return t.token or unsecured_token(str(t.user))


class KafkaPythonToken(AbstractTokenProvider):
    def __init__(self, token: str) -> None:
        self._token = token

    def token(self) -> str:
        return self._token


class AioKafkaToken(AioTokenProvider):
    def __init__(self, token: str) -> None:
        self._token = token

    async def token(self) -> str:
        return self._token


def values(topic: str) -> list[bytes]:
    return [f"{topic}-{i}".encode() for i in range(N)]


def confluent_conf(t: Target) -> dict[str, object]:
    conf: dict[str, object] = {"bootstrap.servers": t.bootstrap, "security.protocol": t.protocol}
    if t.ca:
        conf["ssl.ca.location"] = str(t.ca)
    if t.cert and t.key:
        conf.update({"ssl.certificate.location": str(t.cert), "ssl.key.location": str(t.key)})
    if t.mechanism == "OAUTHBEARER":
        conf["sasl.mechanism"] = "OAUTHBEARER"
        if t.token:
            token = t.token
            conf["oauth_cb"] = lambda _config: (token, time.time() + 3600)
        else:
            conf["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
            conf["sasl.oauthbearer.config"] = f"principal={t.user}"
    elif t.user is not None:
        conf.update(
            {"sasl.mechanism": t.mechanism, "sasl.username": t.user, "sasl.password": t.password}
        )
    return conf


def roundtrip_confluent(t: Target, topic: str) -> list[bytes]:
    producer = ck.Producer({**confluent_conf(t), "acks": "all"})
    for value in values(topic):
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    consumer = ck.Consumer({**confluent_conf(t), "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < N and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    consumer.close()
    return got


def kafka_python_conf(t: Target) -> dict[str, object]:
    conf: dict[str, object] = {"bootstrap_servers": t.bootstrap, "security_protocol": t.protocol}
    if t.ca:
        conf["ssl_cafile"] = str(t.ca)
    if t.cert and t.key:
        conf.update({"ssl_certfile": str(t.cert), "ssl_keyfile": str(t.key)})
    if t.mechanism == "OAUTHBEARER":
        conf.update(
            {
                "sasl_mechanism": t.mechanism,
                "sasl_oauth_token_provider": KafkaPythonToken(bearer(t)),
            }
        )
    elif t.user is not None:
        conf.update(
            {
                "sasl_mechanism": t.mechanism,
                "sasl_plain_username": t.user,
                "sasl_plain_password": t.password,
            }
        )
    return conf


def roundtrip_kafka_python(t: Target, topic: str) -> list[bytes]:
    producer = kafka.KafkaProducer(**kafka_python_conf(t), acks="all")
    for value in values(topic):
        producer.send(topic, value, partition=0).get(30)
    producer.close()
    consumer = kafka.KafkaConsumer(**kafka_python_conf(t), consumer_timeout_ms=10000)
    partition = kafka.TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    got = []
    for record in consumer:
        got.append(record.value)
        if len(got) == N:
            break
    consumer.close()
    return got


def aiokafka_conf(t: Target) -> dict[str, object]:
    conf: dict[str, object] = {"bootstrap_servers": t.bootstrap, "security_protocol": t.protocol}
    if t.protocol.endswith("SSL"):
        conf["ssl_context"] = create_ssl_context(
            cafile=str(t.ca) if t.ca else None,
            certfile=str(t.cert) if t.cert else None,
            keyfile=str(t.key) if t.key else None,
        )
    if t.mechanism == "OAUTHBEARER":
        conf.update(
            {"sasl_mechanism": t.mechanism, "sasl_oauth_token_provider": AioKafkaToken(bearer(t))}
        )
    elif t.user is not None:
        conf.update(
            {
                "sasl_mechanism": t.mechanism,
                "sasl_plain_username": t.user,
                "sasl_plain_password": t.password,
            }
        )
    return conf


def roundtrip_aiokafka(t: Target, topic: str) -> list[bytes]:
    async def run() -> list[bytes]:
        producer = aiokafka.AIOKafkaProducer(**aiokafka_conf(t), acks="all")
        await producer.start()
        try:
            for value in values(topic):
                await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(**aiokafka_conf(t), auto_offset_reset="earliest")
        await consumer.start()
        try:
            partition = aiokafka.TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            got: list[bytes] = []
            while len(got) < N:
                batch = await consumer.getmany(partition, timeout_ms=10000)
                assert batch, f"no records within 10 s after {len(got)}"
                got += [r.value for r in batch[partition]]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


def kcat_args(t: Target) -> list[str]:
    assert not t.token, "kcat takes no OAUTHBEARER token (only librdkafka's unsecured one)"
    args = ["-b", t.bootstrap, "-X", f"security.protocol={t.protocol}"]
    for key, value in confluent_conf(t).items():
        if key not in ("bootstrap.servers", "security.protocol"):
            args += ["-X", f"{key}={value}"]
    return args


def kcat(t: Target, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    assert KCAT, "kcat is not installed (apt-get install kcat)"
    return subprocess.run(
        [KCAT, *kcat_args(t), *args], input=input, capture_output=True, timeout=60
    )


def roundtrip_kcat(t: Target, topic: str) -> list[bytes]:
    produced = kcat(t, "-P", "-t", topic, "-p", "0", input=b"\n".join(values(topic)) + b"\n")
    assert produced.returncode == 0, produced.stderr.decode(errors="replace")
    consumed = kcat(t, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr.decode(errors="replace")
    return consumed.stdout.split(b"\n")[:-1]


ROUNDTRIPS = {
    "confluent": roundtrip_confluent,
    "kafka-python": roundtrip_kafka_python,
    "aiokafka": roundtrip_aiokafka,
    "kcat": roundtrip_kcat,
}
