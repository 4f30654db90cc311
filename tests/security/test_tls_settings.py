"""TLS contexts from `ssl.*` settings (runtime/tls.py), without a socket: PEM files, inline
PEM (ssl.keystore.type=PEM), an encrypted key with ssl.key.password, protocols and cipher
suites, and one-line errors naming the setting that is wrong."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from security_certs import Pki

from gregor.metadata.config_defs import ConfigError
from gregor.runtime.client_security import INTER_BROKER_MECHANISM, client_security
from gregor.runtime.tls import client_context, server_context
from gregor.security.cipher_names import openssl_name
from gregor.security.listener_config import ListenerConfig

pytestmark = pytest.mark.unit


def ssl_listener(**values: str) -> ListenerConfig:
    return ListenerConfig("SSL", "SSL", values)


def test_keystore_file_and_client_auth(pki: Pki) -> None:
    ctx = server_context(
        ssl_listener(
            **{
                "ssl.keystore.location": str(pki.server),
                "ssl.truststore.location": str(pki.ca),
                "ssl.client.auth": "required",
                "ssl.enabled.protocols": "TLSv1.3",
            }
        )
    )
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.cert_store_stats()["x509_ca"] == 1


def test_inline_pem_keystore_and_truststore(pki: Pki) -> None:
    chain = pki.server_cert.read_text().replace("\n", "\\n")  # as one properties line
    ctx = server_context(
        ssl_listener(
            **{
                "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": chain,
                "ssl.keystore.key": pki.server_key.read_text(),
                "ssl.client.auth": "requested",
                "ssl.truststore.certificates": pki.ca.read_text(),
            }
        )
    )
    assert ctx.verify_mode == ssl.CERT_OPTIONAL and ctx.cert_store_stats()["x509_ca"] == 1


def test_an_encrypted_key_with_its_password(pki: Pki, tmp_path: Path) -> None:
    key = serialization.load_pem_private_key(pki.server_key.read_bytes(), None)
    locked = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"key-pass"),
    )
    path = tmp_path / "locked.pem"
    path.write_bytes(pki.server_cert.read_bytes() + locked)
    server_context(
        ssl_listener(**{"ssl.keystore.location": str(path), "ssl.key.password": "key-pass"})
    )
    with pytest.raises(ConfigError, match="ssl.keystore.location: cannot load"):
        server_context(
            ssl_listener(**{"ssl.keystore.location": str(path), "ssl.key.password": "no"})
        )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "listener SSL (SSL) needs a certificate: set ssl.keystore.location"),
        ({"ssl.keystore.location": "/nonexistent.pem"}, "cannot load /nonexistent.pem"),
        ({"ssl.enabled.protocols": "SSLv3"}, "Invalid value SSLv3 for configuration ssl.enabled"),
        ({"ssl.cipher.suites": "NOT-A-SUITE"}, "ssl.cipher.suites: NOT-A-SUITE is no suite"),
        (
            {"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256", "ssl.enabled.protocols": "TLSv1.2"},
            "TLS 1.3 suites only, with TLS 1.3 not in ssl.enabled.protocols",
        ),
        ({"ssl.client.auth": "sometimes"}, "Invalid value sometimes for configuration ssl.client"),
    ],
)
def test_bad_settings_are_named(values: dict[str, str], message: str, pki: Pki) -> None:
    if "ssl.keystore.location" not in values and values:
        values = {"ssl.keystore.location": str(pki.server), **values}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        server_context(ssl_listener(**values))


@pytest.mark.parametrize(
    "suites",
    [
        "ECDHE-ECDSA-AES128-GCM-SHA256",  # OpenSSL's name
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",  # Kafka's (IANA, as Java names it)
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384",
    ],
)
def test_cipher_suites_restrict_tls12(pki: Pki, suites: str) -> None:
    ctx = server_context(
        ssl_listener(**{"ssl.keystore.location": str(pki.server), "ssl.cipher.suites": suites})
    )
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES128-GCM-SHA256"]
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_tls13_suites_alone_allow_tls13_only(pki: Pki) -> None:
    ctx = server_context(
        ssl_listener(
            **{
                "ssl.keystore.location": str(pki.server),
                "ssl.cipher.suites": "TLS_AES_256_GCM_SHA384,TLS_AES_128_GCM_SHA256",
            }
        )
    )
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3


@pytest.mark.parametrize(
    ("iana", "openssl"),
    [
        ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"),
        ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
        ("TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"),
        ("TLS_DHE_RSA_WITH_AES_256_CBC_SHA256", "DHE-RSA-AES256-SHA256"),
        ("TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8", "ECDHE-ECDSA-AES128-CCM8"),
        ("TLS_ECDHE_RSA_WITH_CAMELLIA_128_CBC_SHA256", "ECDHE-RSA-CAMELLIA128-SHA256"),
        ("ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES128-SHA"),
        ("TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),
    ],
)
def test_kafka_suite_names_become_openssl_names(iana: str, openssl: str) -> None:
    assert openssl_name(iana) == openssl


def test_a_node_connects_to_a_sasl_ssl_listener_with_its_own_settings(pki: Pki) -> None:
    jaas = 'x.PlainLoginModule required username="node" password="pw" user_node="pw";'
    listener = ListenerConfig(
        "INTERNAL",
        "SASL_SSL",
        {
            "ssl.truststore.location": str(pki.ca),
            "listener.name.internal.plain.sasl.jaas.config": jaas,
            INTER_BROKER_MECHANISM: "PLAIN",
        },
    )
    security = client_security(listener, INTER_BROKER_MECHANISM)
    assert security is not None and security.ssl_context is not None
    assert security.ssl_context.check_hostname  # ssl.endpoint.identification.algorithm=https
    assert security.sasl_mechanism == "PLAIN" and security.sasl_client is not None
    assert security.sasl_client().initial() == b"\x00node\x00pw"
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol=GSSAPI"):
        client_security(
            ListenerConfig("INTERNAL", "SASL_SSL", {"ssl.truststore.location": str(pki.ca)}),
            INTER_BROKER_MECHANISM,
        )
    no_check = client_context(
        ListenerConfig("X", "SSL", {"ssl.endpoint.identification.algorithm": ""})
    )
    assert not no_check.check_hostname
