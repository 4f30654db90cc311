"""broker/security_settings.py: what gregor cannot honour is refused by name; the rest passes."""

from __future__ import annotations

import pytest

from gregor.broker.config import BrokerConfig
from gregor.broker.security_settings import (
    check_security,
    inter_broker_listener,
    is_security_setting,
)
from gregor.metadata.config_defs import ConfigError

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="a-secret";'


MANY = {
    "listeners": "INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:9093,CONTROLLER://:9094",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "advertised.listeners": "INTERNAL://broker1:9092,EXTERNAL://public1:9093",
    "listener.name.external.sasl.enabled.mechanisms": "PLAIN",
    "listener.name.external.plain.sasl.jaas.config": JAAS,
}


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"},
        {"listeners": "127.0.0.1:9092"},  # no name: PLAINTEXT
        {"listeners": "INTERNAL://:9092", "listener.security.protocol.map": "INTERNAL:PLAINTEXT"},
        {"authorizer.class.name": "", "super.users": " "},  # empty: asks for nothing
        {"security.inter.broker.protocol": "PLAINTEXT"},
        {
            "listeners": "SSL://:9093",
            "ssl.keystore.location": "k.pem",
            "ssl.client.auth": "required",
        },
        {
            "listeners": "INTERNAL://:9092",
            "listener.security.protocol.map": "INTERNAL:SASL_SSL",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": JAAS,
            "security.inter.broker.protocol": "SASL_SSL",
        },
        {"listeners": "CONTROLLER://:9093", "listener.security.protocol.map": "CONTROLLER:SSL"},
        {
            "listener.name.sasl_ssl.connections.max.reauth.ms": "60000",
            "listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms": "3600000",
        },
        MANY,
        {"listeners": "SSL://:9093,PLAINTEXT://:9092"},  # several client listeners
    ],
)
def test_what_gregor_serves_passes(values: dict[str, str]) -> None:
    check_security(values)


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"listeners": "SASL_SSL://:9092"}, "enables GSSAPI (Kafka's default is GSSAPI)"),
        (
            {"listeners": "SASL_PLAINTEXT://:9092", "sasl.enabled.mechanisms": "PLAIN"},
            "listener SASL_PLAINTEXT enables PLAIN but no user",
        ),
        (
            {
                "listeners": "CONTROLLER://:9093",
                "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT",
            },
            "listener CONTROLLER enables GSSAPI",
        ),
        ({"listeners": "SSL://:9093,SSL://:9094"}, "listeners: listener SSL is named twice"),
        (
            {"advertised.listeners": "SSL://public:9093"},
            "advertised.listeners: listener SSL (SSL://public:9093) is not in listeners",
        ),
        (
            {"inter.broker.listener.name": "INTERNAL"},
            "inter.broker.listener.name=INTERNAL must be a listener name defined in listeners: "
            "the client listeners are PLAINTEXT",
        ),
        (
            {"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "SSL"},
            "Only one of inter.broker.listener.name and security.inter.broker.protocol",
        ),
        ({"listeners": "INTERNAL://:9092"}, "listener INTERNAL (INTERNAL://:9092) has no security"),
        ({"security.inter.broker.protocol": "SSL"}, "security.inter.broker.protocol=SSL"),
        ({"principal.builder.class": "x.Builder"}, "principal.builder.class is set"),
        (
            {"listener.name.external.ssl.keymanager.algorithm": "SunX509"},
            "does not support ssl.keymanager.algorithm",
        ),
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type=JKS: gregor reads PEM only"),
        ({"sasl.jaas.config": "nonsense"}, "sasl.jaas.config: sasl.jaas.config must end"),
        (
            {"listener.name.x.plain.connections.max.reauth.ms": "soon"},
            "Invalid value soon for configuration listener.name.x.plain.connections.max.reauth.ms",
        ),
    ],
)
def test_security_is_refused_by_name(values: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_security(values)
    assert named in str(caught.value)


def test_which_keys_ask_for_security() -> None:
    asks = [
        "ssl.truststore.location",
        "sasl.kerberos.service.name",
        "listener.name.internal.ssl.client.auth",
        "listener.name.internal.scram-sha-256.sasl.jaas.config",
        "principal.builder.class",
        "listener.name.internal.scram-sha-256.connections.max.reauth.ms",
    ]
    assert all(is_security_setting(key) for key in asks)
    assert not any(
        is_security_setting(key)
        for key in (
            "listeners",
            "log.dirs",
            "listener.security.protocol.map",
            "num.partitions",
            "authorizer.class.name",  # served: ACLs
            "super.users",
            "allow.everyone.if.no.acl.found",
        )
    )


def test_security_settings_are_refused_with_the_quorum_settings_not_warned_of(caplog) -> None:
    config = BrokerConfig.load(None, {"sasl.kerberos.service.name": "kafka"})  # no warning
    assert not [r for r in caplog.records if "sasl" in r.getMessage()]
    with pytest.raises(ConfigError, match="does not support sasl.kerberos.service.name"):
        config.membership()  # what BrokerServer and ControllerServer ask first


def test_the_standard_authorizer_is_served_and_no_other() -> None:
    config = BrokerConfig.load(
        None,
        {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ops",
            "allow.everyone.if.no.acl.found": "true",
        },
    )
    config.membership()  # nothing refused
    with pytest.raises(ConfigError, match="authorizer.class.name: the authorizer served is"):
        BrokerConfig.load(
            None, {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
        )


@pytest.mark.parametrize(
    ("values", "chosen"),
    [
        ({"inter.broker.listener.name": "EXTERNAL"}, "EXTERNAL"),
        ({"security.inter.broker.protocol": "SASL_SSL"}, "EXTERNAL"),  # the one of that protocol
        ({"security.inter.broker.protocol": "PLAINTEXT"}, "INTERNAL"),
        ({}, "INTERNAL"),  # neither: no PLAINTEXT-named listener, the first
        ({"listeners": "SSL://:1,PLAINTEXT://:2"}, "PLAINTEXT"),  # neither: PLAINTEXT, by name
    ],
)
def test_brokers_talk_over_the_listener_the_settings_name(
    values: dict[str, str], chosen: str
) -> None:
    config = {**MANY, "inter.broker.listener.name": "", **values}
    listeners = BrokerConfig(config).client_listeners()
    assert inter_broker_listener(config, [(li.name, li.protocol) for li in listeners]) == chosen
    assert BrokerConfig(config).inter_broker_listener_config().name == chosen


def test_every_client_listener_is_advertised_by_name_or_at_its_own_address() -> None:
    config = BrokerConfig({**MANY, "advertised.listeners": "EXTERNAL://public1:19093"})
    shown = [(li.name, li.advertised_host, li.advertised_port) for li in config.client_listeners()]
    assert shown == [("INTERNAL", "0.0.0.0", 9092), ("EXTERNAL", "public1", 19093)]
    assert [li.protocol for li in config.client_listeners()] == ["PLAINTEXT", "SASL_SSL"]
