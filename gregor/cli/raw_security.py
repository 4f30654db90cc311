"""The TLS context and SASL exchange of the commands' own-codec requests (the APIs
confluent-kafka does not expose: quotas, DescribeQuorum, DescribeCluster v2, ...), built from
the same client properties `--command-config` gives librdkafka, with librdkafka's names:

    security.protocol                  PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    ssl.ca.location / ssl.ca.pem       the CA to trust (else the system's)
    ssl.certificate.location / .pem    a client certificate (mutual TLS), with
    ssl.key.location / .pem            its key (and ssl.key.password)
    ssl.endpoint.identification.algorithm   https (librdkafka's default) or none
    enable.ssl.certificate.verification     false: trust any certificate
    sasl.mechanism(s)                  PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with sasl.username
                                       and sasl.password)

Anything it cannot do (OAUTHBEARER, GSSAPI) is a CliError in one line.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from gregor.cli.errors import CliError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

ConnectArgs = Callable[[], dict[str, Any]]


def raw_security(props: Mapping[str, str]) -> ConnectArgs:
    """What RawClient takes to connect as `props` say (a fresh SASL client per connection)."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise CliError(
            f"security.protocol={protocol}: use one of {', '.join(PROTOCOLS)} (--command-config)"
        )
    context = _tls(props) if protocol in ("SSL", "SASL_SSL") else None
    sasl = _sasl(props) if protocol.startswith("SASL_") else None

    def connect_args() -> dict[str, Any]:
        out: dict[str, Any] = {"ssl_context": context}
        if sasl is not None:
            out["sasl"] = (sasl[0], sasl[1]())
        return out

    return connect_args


def _sasl(props: Mapping[str, str]) -> tuple[str, Callable[[], Any]]:
    from gregor.security.sasl_client import CLIENTS

    mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "GSSAPI").strip()
    factory = CLIENTS.get(mechanism.upper())
    if factory is None:
        raise CliError(
            f"sasl.mechanism={mechanism}: this command authenticates with "
            f"{', '.join(sorted(CLIENTS))} (--command-config)"
        )
    options = {
        "username": props.get("sasl.username", ""),
        "password": props.get("sasl.password", ""),
    }
    if not options["username"] or not options["password"]:
        raise CliError(f"sasl.mechanism={mechanism} needs sasl.username and sasl.password")
    return mechanism.upper(), lambda: factory(options)


def _tls(props: Mapping[str, str]) -> ssl.SSLContext:
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
        raise CliError(f"TLS settings in --command-config: {exc.strerror or exc}") from None
    return context


def _client_certificate(context: ssl.SSLContext, props: Mapping[str, str]) -> None:
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
