"""TLS contexts from a listener's `ssl.*` settings (the standard library's ssl, PEM only).

    ssl.keystore.location          a PEM file: the certificate chain and its private key
    ssl.key.password               the private key's password, if it is encrypted
    ssl.keystore.type=PEM          with ssl.keystore.certificate.chain / ssl.keystore.key inline
    ssl.truststore.location        a PEM file of trusted CAs (ssl.truststore.certificates inline)
    ssl.client.auth                none | requested | required (mutual TLS)
    ssl.enabled.protocols          TLSv1.2,TLSv1.3 (the default)
    ssl.cipher.suites              suites as Kafka names them (IANA: TLS_ECDHE_RSA_WITH_AES_128_
                                   GCM_SHA256) or as OpenSSL does (ECDHE-RSA-AES128-GCM-SHA256);
                                   TLS 1.3 suites named alone allow TLS 1.3 only (which of them
                                   is used is OpenSSL's choice: the ssl module cannot narrow it)
    ssl.endpoint.identification.algorithm   https (the default: check the host name) or empty

A bad setting is a ConfigError naming it, at start. Kernel TLS is not used: Python 3.11's ssl
does not expose it (no OP_ENABLE_KTLS, no SSL_sendfile), so TLS fetches copy through the SSL
object (connection.py).
"""

from __future__ import annotations

import os
import ssl
import tempfile

from gregor.metadata.config_defs import ConfigError
from gregor.security import cipher_names
from gregor.security.listener_config import ListenerConfig

CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_VERSIONS = {
    "TLSV1.2": ssl.TLSVersion.TLSv1_2,
    "TLSV1.3": ssl.TLSVersion.TLSv1_3,
    "TLSV1.1": ssl.TLSVersion.TLSv1_1,
    "TLSV1": ssl.TLSVersion.TLSv1,
}


def server_context(config: ListenerConfig) -> ssl.SSLContext:
    """The context of a TLS listener; ConfigError naming the setting that is wrong."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(ctx, config)
    if not _load_keystore(ctx, config):
        raise ConfigError(
            f"listener {config.name} ({config.protocol}) needs a certificate: set "
            "ssl.keystore.location (a PEM file with the certificate chain and key)"
        )
    auth = config.get("ssl.client.auth", default="none").lower()
    if auth not in CLIENT_AUTH:
        raise ConfigError(f"Invalid value {auth} for configuration ssl.client.auth")
    ctx.verify_mode = CLIENT_AUTH[auth]
    if auth != "none":
        _load_truststore(ctx, config, ssl.Purpose.CLIENT_AUTH)
    return ctx


def client_context(config: ListenerConfig) -> ssl.SSLContext:
    """The context this node connects to others' `config` listener with (inter-node)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(ctx, config)
    _load_truststore(ctx, config, ssl.Purpose.SERVER_AUTH)
    _load_keystore(ctx, config)  # a client certificate, for listeners that ask for one
    # Kafka's default is https; set to nothing, the host name is not checked
    algorithm = config.lookup("ssl.endpoint.identification.algorithm")
    ctx.check_hostname = (algorithm if algorithm is not None else "https").lower() == "https"
    return ctx


def _common(ctx: ssl.SSLContext, config: ListenerConfig) -> None:
    raw = config.get("ssl.enabled.protocols", default="TLSv1.2,TLSv1.3")
    wanted = [p.strip().upper() for p in raw.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in _VERSIONS]
    if unknown or not wanted:
        raise ConfigError(
            f"Invalid value {raw} for configuration ssl.enabled.protocols: use TLSv1.2, TLSv1.3"
        )
    versions = sorted(_VERSIONS[p] for p in wanted)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    suites = config.get("ssl.cipher.suites")
    if suites:
        _cipher_suites(ctx, suites)


def _cipher_suites(ctx: ssl.SSLContext, raw: str) -> None:
    names = [s.strip() for s in raw.split(",") if s.strip()]
    older = {n: cipher_names.openssl_name(n) for n in names if not cipher_names.is_tls13(n)}
    known = _openssl_suites()
    unknown = [n for n, o in older.items() if o not in known]
    if unknown:
        raise ConfigError(
            f"Invalid value {raw} for configuration ssl.cipher.suites: {unknown[0]} is no suite "
            "OpenSSL knows (e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)"
        )
    if older:
        ctx.set_ciphers(":".join(older.values()))
    elif ctx.maximum_version >= ssl.TLSVersion.TLSv1_3:  # TLS 1.3 suites alone
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    else:
        raise ConfigError(
            f"Invalid value {raw} for configuration ssl.cipher.suites: TLS 1.3 suites only, "
            "with TLS 1.3 not in ssl.enabled.protocols"
        )


def _openssl_suites() -> set[str]:
    """The names of every TLS 1.2 suite this OpenSSL has."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    probe.set_ciphers("ALL:@SECLEVEL=0")
    return {c["name"] for c in probe.get_ciphers() if c["protocol"] != "TLSv1.3"}


def _load_keystore(ctx: ssl.SSLContext, config: ListenerConfig) -> bool:
    password = config.get("ssl.key.password") or None
    location = config.get("ssl.keystore.location")
    try:
        if location:
            ctx.load_cert_chain(location, password=password)
            return True
        chain, key = config.get("ssl.keystore.certificate.chain"), config.get("ssl.keystore.key")
        if chain and key:
            _load_inline(ctx, chain, key, password)
            return True
    except (OSError, ssl.SSLError) as exc:
        where = location or "ssl.keystore.certificate.chain / ssl.keystore.key"
        raise ConfigError(f"ssl.keystore.location: cannot load {where}: {exc}") from None
    return False


def _load_inline(ctx: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """load_cert_chain reads files only: the PEM text goes through a private temporary file."""
    fd, path = tempfile.mkstemp(prefix="gregor-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:  # mkstemp: mode 0600
            f.write(_pem(chain) + "\n" + _pem(key) + "\n")
        ctx.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def _pem(text: str) -> str:
    """Inline PEM as Kafka's docs show it may have its line breaks as literal `\\n`."""
    return text.replace("\\n", "\n").strip()


def _load_truststore(ctx: ssl.SSLContext, config: ListenerConfig, purpose: ssl.Purpose) -> None:
    location = config.get("ssl.truststore.location")
    inline = config.get("ssl.truststore.certificates")
    try:
        if location:
            ctx.load_verify_locations(cafile=location)
        elif inline:
            ctx.load_verify_locations(cadata=_pem(inline))
        else:
            ctx.load_default_certs(purpose)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.truststore.location: cannot load {location}: {exc}") from None
