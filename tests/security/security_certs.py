"""Certificates for the TLS tests, made in the test run with `cryptography` (never committed):
a CA, a server certificate for 127.0.0.1 / localhost, client certificates, an expired one, and
a second CA that nobody trusts. `make_pki(dir)` writes them as PEM files and returns their paths."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_NOW = datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class Pki:
    ca: Path  # the trusted CA's certificate
    server: Path  # server chain + key (PEM), for 127.0.0.1 and localhost
    server_cert: Path  # the server certificate alone
    server_key: Path  # its key alone
    client: Path  # CN=alice,OU=eng,O=Gregor Tests client chain + key
    client_cert: Path
    client_key: Path
    expired_server: Path  # chain + key, expired yesterday
    other_ca: Path  # a CA nobody trusts
    rogue_server: Path  # a server chain + key signed by other_ca
    rogue_client_cert: Path  # a client cert signed by other_ca
    rogue_client_key: Path


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Gregor Tests")]
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_NOW - datetime.timedelta(days=1))
        .not_valid_after(_NOW + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    name: x509.Name,
    *,
    server: bool,
    expired: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    start = _NOW - datetime.timedelta(days=10 if expired else 1)
    end = _NOW - datetime.timedelta(days=1) if expired else _NOW + datetime.timedelta(days=30)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca[1].public_key()), False
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        ).add_extension(
            x509.ExtendedKeyUsage(
                [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            False,
        )
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), False
        )
    return builder.sign(ca[1], hashes.SHA256()), key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca, other = _ca("Gregor Test CA"), _ca("Untrusted CA")
    paths: dict[str, Path] = {}

    def write(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        paths[name] = path
        return path

    write("ca.pem", _pem(ca[0]))
    write("other-ca.pem", _pem(other[0]))
    for label, issuer, name, server, expired in [
        ("server", ca, _name("localhost"), True, False),
        ("client", ca, _name("alice", "eng"), False, False),
        ("expired-server", ca, _name("localhost"), True, True),
        ("rogue-server", other, _name("localhost"), True, False),
        ("rogue-client", other, _name("mallory", "eng"), False, False),
    ]:
        cert, key = _leaf(issuer, name, server=server, expired=expired)
        write(f"{label}-cert.pem", _pem(cert))
        write(f"{label}-key.pem", _key_pem(key))
        write(f"{label}.pem", _pem(cert) + _key_pem(key))
    return Pki(
        ca=paths["ca.pem"],
        server=paths["server.pem"],
        server_cert=paths["server-cert.pem"],
        server_key=paths["server-key.pem"],
        client=paths["client.pem"],
        client_cert=paths["client-cert.pem"],
        client_key=paths["client-key.pem"],
        expired_server=paths["expired-server.pem"],
        other_ca=paths["other-ca.pem"],
        rogue_server=paths["rogue-server.pem"],
        rogue_client_cert=paths["rogue-client-cert.pem"],
        rogue_client_key=paths["rogue-client-key.pem"],
    )
