"""The TLS context and SASL client of a connection made with gregor's own codec (the commands'
and the console's requests for the APIs confluent-kafka does not expose: quotas,
DescribeQuorum, DescribeCluster v2, DescribeLogDirs), from the same client properties
librdkafka is given, with librdkafka's names:

    security.protocol                  PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    ssl.ca.location / ssl.ca.pem       the CA to trust (else the system's)
    ssl.certificate.location / .pem    a client certificate (mutual TLS), with
    ssl.key.location / .pem            its key (and ssl.key.password)
    ssl.endpoint.identification.algorithm   https (librdkafka's default) or none
    enable.ssl.certificate.verification     false: trust any certificate
    sasl.mechanism(s)                  PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with sasl.username
                                       and sasl.password), or OAUTHBEARER with librdkafka's
                                       unsecured token (oauthbearer_client.py)

Anything it cannot do (GSSAPI, OAUTHBEARER by OIDC) is a ValueError in one line. `authenticate` runs
the SASL exchange over any request-response call.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.protocol import api_keys, codec
from gregor.security import oauthbearer_client
from gregor.security.sasl_client import SaslClient

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

ConnectArgs = Callable[[], dict[str, Any]]


def connect_args(props: Mapping[str, Any], clock: Clock = SYSTEM_CLOCK) -> ConnectArgs:
    """What a connection takes to connect as `props` say (`ssl_context`, and `sasl`: the
    mechanism and a fresh SASL client for each connection; `clock` dates OAUTHBEARER's
    unsecured tokens)."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"security.protocol={protocol}: use one of {', '.join(PROTOCOLS)} (--command-config)"
        )
    context = _tls(props) if protocol in ("SSL", "SASL_SSL") else None
    sasl = _sasl(props, clock) if protocol.startswith("SASL_") else None

    def connect_args() -> dict[str, Any]:
        out: dict[str, Any] = {"ssl_context": context}
        if sasl is not None:
            out["sasl"] = (sasl[0], sasl[1]())
        return out

    return connect_args


def _sasl(props: Mapping[str, Any], clock: Clock) -> tuple[str, Callable[[], Any]]:
    from gregor.security.sasl_client import CLIENTS

    mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI").strip()
    if mechanism.upper() == oauthbearer_client.MECHANISM:
        return mechanism.upper(), oauthbearer_client.oauthbearer_client(props, clock.now_ms)
    factory = CLIENTS.get(mechanism.upper())
    if factory is None:
        names = sorted([*CLIENTS, oauthbearer_client.MECHANISM])
        raise ValueError(
            f"sasl.mechanism={mechanism}: this command authenticates with "
            f"{', '.join(names)} (--command-config)"
        )
    options = {
        "username": props.get("sasl.username", ""),
        "password": props.get("sasl.password", ""),
    }
    if not options["username"] or not options["password"]:
        raise ValueError(f"sasl.mechanism={mechanism} needs sasl.username and sasl.password")
    return mechanism.upper(), lambda: factory(options)


def _tls(props: Mapping[str, Any]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    verify = props.get("enable.ssl.certificate.verification", "true").strip().lower() != "false"
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    context.check_hostname = verify and algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    try:
        if props.get("ssl.ca.location"):
            context.load_verify_locations(cafile=props["ssl.ca.location"])
        elif props.get("ssl.ca.pem"):
            context.load_verify_locations(cadata=props["ssl.ca.pem"])
        elif verify:
            context.load_default_certs()
        _client_certificate(context, props)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"TLS settings in --command-config: {exc.strerror or exc}") from None
    return context


def _client_certificate(context: ssl.SSLContext, props: Mapping[str, Any]) -> None:
    password = props.get("ssl.key.password") or None
    cert, key = props.get("ssl.certificate.location"), props.get("ssl.key.location")
    if cert:
        context.load_cert_chain(cert, key or None, password)
        return
    cert_pem, key_pem = props.get("ssl.certificate.pem"), props.get("ssl.key.pem")
    if not cert_pem:
        return
    # the ssl module loads a chain from files only: a private temporary file, removed at once
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(cert_pem + "\n" + (key_pem or ""))
        context.load_cert_chain(path, None, password)
    finally:
        os.unlink(path)


def authenticate(call: Callable[[int, int, Any], Any], mechanism: str, client: SaslClient) -> None:
    """SaslHandshake v1, then SaslAuthenticate v1 until `client` is done, through `call(key,
    version, body) -> response`; a PermissionError saying why when refused."""
    shake = codec.message_class(api_keys.SASL_HANDSHAKE, "request")
    answer = call(api_keys.SASL_HANDSHAKE, 1, shake(mechanism=mechanism))
    if answer.error_code != 0:
        enabled = ", ".join(answer.mechanisms) or "none"
        raise PermissionError(f"SASL mechanism {mechanism} not enabled (enabled: {enabled})")
    request = codec.message_class(api_keys.SASL_AUTHENTICATE, "request")
    token: bytes | None = client.initial()
    while token is not None:
        answer = call(api_keys.SASL_AUTHENTICATE, 1, request(auth_bytes=token))
        if answer.error_code != 0:
            why = answer.error_message or f"error {answer.error_code}"
            raise PermissionError(f"SASL authentication failed: {why}")
        token = client.respond(bytes(answer.auth_bytes))
