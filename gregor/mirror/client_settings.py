"""A cluster's client settings as an `mm2.properties` holds them (the Java client's names) turned
into what librdkafka, which runs the mirror's clients, takes, so a user's MirrorMaker 2 file
for a secured cluster works unchanged:

    sasl.jaas.config = ...PlainLoginModule required username="u" password="p";
                                   -> sasl.username, sasl.password (also ScramLoginModule)
    ssl.truststore.location (ssl.truststore.type = PEM) -> ssl.ca.location
    ssl.truststore.certificates (PEM text)             -> ssl.ca.pem
    ssl.keystore.type = PKCS12 (location, password: the same names in librdkafka) -> dropped
    ssl.endpoint.identification.algorithm = (empty)    -> none

librdkafka's own names may be used as well, and win. What librdkafka cannot read (a JKS store,
another login module) is a `SettingError` naming the key as the user wrote it, so the mirror
refuses the file at start instead of failing its tasks forever.
"""

from __future__ import annotations

from collections.abc import Mapping

from gregor.security.jaas import parse_jaas

Origin = tuple[str, str]  # (value, key as written)

JAAS = "sasl.jaas.config"
PASSWORD_MODULES = (
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
)


class SettingError(ValueError):
    """A client setting librdkafka cannot be given: `key` is the key as the user wrote it."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def librdkafka_settings(settings: Mapping[str, Origin]) -> dict[str, str]:
    """`settings` (name -> (value, key as written)) under librdkafka's names."""
    out = {k: v for k, (v, _) in settings.items()}
    if JAAS in out:
        _jaas(out, settings[JAAS][1])
    if "ssl.truststore.location" in out or "ssl.truststore.certificates" in out:
        _truststore(out, settings)
    if "ssl.keystore.type" in out:
        kind = out.pop("ssl.keystore.type").strip().upper()
        if kind != "PKCS12":
            raise SettingError(
                settings["ssl.keystore.type"][1],
                f"{kind} keystores cannot be read by librdkafka: use PKCS12 "
                "(ssl.keystore.location, ssl.keystore.password) or PEM files "
                "(ssl.certificate.location, ssl.key.location)",
            )
    if out.get("ssl.endpoint.identification.algorithm", "x").strip() == "":
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out


def _jaas(out: dict[str, str], key: str) -> None:
    try:
        module = parse_jaas(out.pop(JAAS))
    except ValueError as e:
        raise SettingError(key, str(e)) from None
    if module.class_name not in PASSWORD_MODULES:
        raise SettingError(
            key,
            f"{module.class_name} is not read here: PlainLoginModule and ScramLoginModule are "
            "(else give librdkafka's own sasl.* settings)",
        )
    for option in ("username", "password"):
        if option not in module.options:
            raise SettingError(key, f"{module.class_name} needs {option}=...")
        out.setdefault(f"sasl.{option}", module.options[option])


def _truststore(out: dict[str, str], settings: Mapping[str, Origin]) -> None:
    kind = out.pop("ssl.truststore.type", "JKS").strip().upper()
    out.pop("ssl.truststore.password", None)
    location = out.pop("ssl.truststore.location", None)
    certificates = out.pop("ssl.truststore.certificates", None)
    if kind != "PEM":
        names = ("ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates")
        key = settings[next(n for n in names if n in settings)][1]
        raise SettingError(
            key,
            f"{kind} truststores cannot be read by librdkafka: give a PEM file "
            "(ssl.truststore.type = PEM, or ssl.ca.location)",
        )
    if location is not None:
        out.setdefault("ssl.ca.location", location)
    if certificates is not None:
        out.setdefault("ssl.ca.pem", certificates)
