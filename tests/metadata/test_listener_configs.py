"""How DescribeConfigs of a broker describes the per-listener configs (connection limits,
ssl.*, sasl.*: metadata/listener_configs.py), as Kafka's ConfigHelper: listed only when set,
from the first layer that sets the key, the broker-wide config among the synonyms, passwords
hidden."""

from __future__ import annotations

import pytest

from gregor.metadata.config_defs import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    INT,
    LONG,
    PASSWORD,
    STATIC_BROKER_CONFIG,
    STRING,
    UNKNOWN,
    DynamicConfigs,
)
from gregor.metadata.listener_configs import (
    base_config,
    resolve_listener_config,
    set_listener_configs,
)

pytestmark = pytest.mark.unit

KEY = "listener.name.client.max.connections"
MAX = str((1 << 31) - 1)


def test_only_the_keys_set_are_listed() -> None:
    static = {"listener.name.internal.max.connection.creation.rate": "9", "num.io.threads": "2"}
    dynamic = DynamicConfigs({KEY: "4"}, {"listener.name.client.ssl.keystore.type": "PEM"})
    static["listener.name.sasl_ssl.plain.sasl.jaas.config"] = "..."
    static["listener.name.sasl_ssl.plain.connections.max.reauth.ms"] = "60000"
    static["ssl.keystore.location"] = "/k.pem"  # bare: not a listener key
    assert set_listener_configs(static, dynamic) == [
        KEY,
        "listener.name.client.ssl.keystore.type",
        "listener.name.internal.max.connection.creation.rate",
        "listener.name.sasl_ssl.plain.connections.max.reauth.ms",
        "listener.name.sasl_ssl.plain.sasl.jaas.config",
    ]


def test_the_first_layer_that_sets_the_key_is_its_source() -> None:
    dynamic = DynamicConfigs({KEY: "4"}, {"max.connections": "7"})
    got = resolve_listener_config(KEY, {KEY: "2"}, dynamic)
    # this broker's own max.connections comes before the key: left out, as Kafka drops it
    assert (got.value, got.source, got.type, got.read_only) == ("4", 3, INT, True)
    assert got.synonyms == (
        (KEY, "4", DYNAMIC_DEFAULT_BROKER_CONFIG),
        (KEY, "2", STATIC_BROKER_CONFIG),
        ("max.connections", MAX, DEFAULT_CONFIG),
    )
    own = resolve_listener_config(KEY, {}, DynamicConfigs({}, {KEY: "5"}))
    assert (own.value, own.source) == ("5", DYNAMIC_BROKER_CONFIG)
    static = resolve_listener_config(KEY, {KEY: "2", "max.connections": "8"}, {})
    assert static.source == STATIC_BROKER_CONFIG
    assert static.synonyms[1] == ("max.connections", "8", STATIC_BROKER_CONFIG)


def test_the_base_config_of_a_listener_key() -> None:
    assert base_config("listener.name.ssl.ssl.keystore.location") == "ssl.keystore.location"
    assert base_config("listener.name.sasl_ssl.plain.sasl.jaas.config") == "sasl.jaas.config"
    assert base_config("listener.name.x.plain.connections.max.reauth.ms") == (
        "connections.max.reauth.ms"
    )
    assert base_config("listener.name.x.plain.ssl.key.password") == "plain.ssl.key.password"


SSL_KEY = "listener.name.ssl.ssl.keystore.location"


def test_an_ssl_key_with_the_bare_config_among_its_synonyms() -> None:
    """ssl.keystore.location has no default in Kafka: no DEFAULT_CONFIG synonym."""
    static = {SSL_KEY: "/a.pem", "ssl.keystore.location": "/bare.pem"}
    got = resolve_listener_config(SSL_KEY, static, DynamicConfigs({}, {SSL_KEY: "/b.pem"}))
    assert (got.value, got.source, got.type, got.sensitive) == (
        "/b.pem",
        DYNAMIC_BROKER_CONFIG,
        STRING,
        False,
    )
    assert got.synonyms == (
        (SSL_KEY, "/b.pem", DYNAMIC_BROKER_CONFIG),
        (SSL_KEY, "/a.pem", STATIC_BROKER_CONFIG),
        ("ssl.keystore.location", "/bare.pem", STATIC_BROKER_CONFIG),
    )
    typed_key = "listener.name.ssl.ssl.keystore.type"
    typed = resolve_listener_config(typed_key, {typed_key: "PEM"}, {})
    assert typed.synonyms == (
        (typed_key, "PEM", STATIC_BROKER_CONFIG),
        ("ssl.keystore.type", "JKS", DEFAULT_CONFIG),  # Kafka's default
    )


def test_passwords_are_hidden_with_their_synonyms() -> None:
    key = "listener.name.ssl.ssl.key.password"
    got = resolve_listener_config(key, {key: "secret", "ssl.key.password": "bare"}, {})
    assert (got.value, got.source, got.type, got.sensitive) == (
        None,
        STATIC_BROKER_CONFIG,
        PASSWORD,
        True,
    )
    assert got.synonyms == ((key, None, STATIC_BROKER_CONFIG), ("ssl.key.password", None, 4))
    jaas = "listener.name.sasl_ssl.plain.sasl.jaas.config"
    got = resolve_listener_config(jaas, {jaas: "x"}, {})
    assert (got.value, got.type, got.sensitive) == (None, PASSWORD, True)


def test_a_mechanisms_reauth_and_an_unknown_base() -> None:
    key = "listener.name.sasl_ssl.plain.connections.max.reauth.ms"
    got = resolve_listener_config(key, {key: "60000"}, {})
    assert (got.value, got.type, got.sensitive) == ("60000", LONG, False)
    assert got.synonyms[-1] == ("connections.max.reauth.ms", "0", DEFAULT_CONFIG)
    # Kafka knows no type for plain.ssl.*: unknown, so sensitive
    odd = "listener.name.x.plain.ssl.keystore.location"
    got = resolve_listener_config(odd, {odd: "/k.pem"}, {})
    assert (got.value, got.type, got.sensitive) == (None, UNKNOWN, True)
