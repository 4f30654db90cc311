"""How DescribeConfigs of a broker describes the per-listener connection configs
(config_defs.resolve_listener_config), as Kafka's ConfigHelper: listed only when set, from
the first layer that sets the key, the broker-wide config among the synonyms."""

from __future__ import annotations

import pytest

from gregor.metadata.config_defs import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    INT,
    STATIC_BROKER_CONFIG,
    DynamicConfigs,
    resolve_listener_config,
    set_listener_configs,
)

pytestmark = pytest.mark.unit

KEY = "listener.name.client.max.connections"
MAX = str((1 << 31) - 1)


def test_only_the_keys_set_are_listed() -> None:
    static = {"listener.name.internal.max.connection.creation.rate": "9", "num.io.threads": "2"}
    dynamic = DynamicConfigs({KEY: "4"}, {"listener.name.client.ssl.keystore.type": "PEM"})
    assert set_listener_configs(static, dynamic) == [
        KEY,
        "listener.name.internal.max.connection.creation.rate",
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
