"""DescribeConfigs of a broker with confluent-kafka's AdminClient lists the listener-prefixed
ssl.* and sasl.* configs that are set, in server.properties or with IncrementalAlterConfigs,
as Kafka does: each with its source and synonyms (the bare config among them), read-only, of
its base config's type; a password's value and its synonyms' values are null and it is marked
sensitive. (confluent-kafka keeps synonyms in a dict by name and has no config type: the
whole synonym list and the type are read with a raw DescribeConfigs v4 as well.)"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from security_certs import Pki

from gregor.protocol import api_keys
from gregor.protocol.messages import DescribeConfigsRequest
from gregor.testing.broker import Broker
from gregor.testing.raw_client import RawClient

pytestmark = pytest.mark.client

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
STORE = "listener.name.ssl.ssl.keystore.location"
STORE_PASSWORD = "listener.name.ssl.ssl.keystore.password"  # a PEM keystore's: unused
TRUST_PASSWORD = "listener.name.ssl.ssl.truststore.password"
MECHANISMS = "listener.name.sasl_plaintext.sasl.enabled.mechanisms"
JAAS_KEY = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
STATIC = ConfigSource.STATIC_BROKER_CONFIG.value
DYNAMIC = ConfigSource.DYNAMIC_BROKER_CONFIG.value
DEFAULT = ConfigSource.DEFAULT_CONFIG.value
STRING, LIST, PASSWORD = 2, 7, 9  # DescribeConfigs ConfigType


@pytest.fixture(scope="module")
def node(pki: Pki) -> Iterator[Broker]:
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        STORE: str(pki.server),
        "ssl.keystore.location": str(pki.server),  # bare: a synonym of the listener's
        STORE_PASSWORD: "keystore-secret",
        MECHANISMS: "PLAIN",
        JAAS_KEY: JAAS,
    }
    with Broker(config) as broker:
        yield broker


def described(admin: AdminClient) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.BROKER, "1")
    got: dict[str, ConfigEntry] = admin.describe_configs([resource], request_timeout=15)[
        resource
    ].result()
    return got


def synonyms(entry: ConfigEntry) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms.values()]


def raw_described(
    node: Broker, *keys: str
) -> dict[str, tuple[int, list[tuple[str, str | None, int]]]]:
    """key -> (config type, every synonym) as DescribeConfigs v4 answers."""
    R = DescribeConfigsRequest
    resource = R.DescribeConfigsResource(
        resource_type=4, resource_name="1", configuration_keys=list(keys)
    )
    request = R(resources=[resource], include_synonyms=True)
    with RawClient(node.bootstrap, timeout_s=10) as raw:
        [result] = raw.call(api_keys.DESCRIBE_CONFIGS, 4, request).results
    assert result.error_code == 0
    return {
        c.name: (c.config_type, [(s.name, s.value, s.source) for s in c.synonyms])
        for c in result.configs
    }


def test_static_listener_ssl_and_sasl_configs_are_described(node: Broker, pki: Pki) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    got = described(admin)
    store = got[STORE]
    assert (store.value, store.source, store.is_sensitive, store.is_read_only) == (
        str(pki.server),
        STATIC,
        False,
        True,
    )
    # ssl.keystore.location has no default in Kafka: no DEFAULT_CONFIG synonym
    assert synonyms(store) == [
        (STORE, str(pki.server), STATIC),
        ("ssl.keystore.location", str(pki.server), STATIC),
    ]
    mechanisms = got[MECHANISMS]
    assert mechanisms.value == "PLAIN"
    assert synonyms(mechanisms) == [
        (MECHANISMS, "PLAIN", STATIC),
        ("sasl.enabled.mechanisms", "GSSAPI", DEFAULT),  # Kafka's default
    ]
    for key in (STORE_PASSWORD, JAAS_KEY):
        secret = got[key]
        assert (secret.value, secret.is_sensitive, secret.source) == (None, True, STATIC), key
        assert [s[1] for s in synonyms(secret)] == [None], key
    assert TRUST_PASSWORD not in got  # not set: not listed
    assert "listener.name.ssl.ssl.truststore.location" not in got
    types = {k: t for k, (t, _) in raw_described(node, STORE, MECHANISMS, JAAS_KEY).items()}
    assert types == {STORE: STRING, MECHANISMS: LIST, JAAS_KEY: PASSWORD}


def test_dynamic_listener_ssl_configs_are_described(node: Broker, pki: Pki) -> None:
    """IncrementalAlterConfigs sets the keystore (the same file: the listener reloads it) and a
    truststore password: described as DYNAMIC_BROKER_CONFIG, the static values among the
    synonyms, the password hidden."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    entries = [
        ConfigEntry(STORE, str(pki.server), incremental_operation=AlterConfigOpType.SET),
        ConfigEntry(TRUST_PASSWORD, "trust-secret", incremental_operation=AlterConfigOpType.SET),
    ]
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    deadline = time.monotonic() + 20
    while TRUST_PASSWORD not in (got := described(admin)):
        assert time.monotonic() < deadline, "the dynamic configs were not described"
        time.sleep(0.2)
    assert (got[STORE].value, got[STORE].source) == (str(pki.server), DYNAMIC)
    trust = got[TRUST_PASSWORD]
    assert (trust.value, trust.source, trust.is_sensitive) == (None, DYNAMIC, True)
    raw = raw_described(node, STORE, TRUST_PASSWORD)
    assert raw[STORE][1] == [
        (STORE, str(pki.server), DYNAMIC),
        (STORE, str(pki.server), STATIC),
        ("ssl.keystore.location", str(pki.server), STATIC),
    ]
    assert raw[TRUST_PASSWORD] == (PASSWORD, [(TRUST_PASSWORD, None, DYNAMIC)])
