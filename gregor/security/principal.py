"""Kafka principals: who sent a request, as the authorizer and the quotas see it.

A principal is a type and a name, written `User:alice` as in Kafka's ACLs and `super.users`.
A connection starts as `User:ANONYMOUS` (what Kafka calls a client on a PLAINTEXT listener, or
before SASL completes); authentication replaces it in the connection's state dict, where every
handler finds it through `principal_of(ctx.connection)`.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

USER_TYPE = "User"
# The key of the authenticated principal in a connection's state dict (RequestContext.connection).
PRINCIPAL_KEY = "principal"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """`User:alice` -> KafkaPrincipal("User", "alice"); ValueError without a type."""
        principal_type, sep, name = text.strip().partition(":")
        if not sep or not principal_type or not name:
            raise ValueError(f"principal {text!r} is not of the form Type:name (e.g. User:alice)")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def principal_of(connection: Mapping[str, Any]) -> KafkaPrincipal:
    """The principal a connection authenticated as; ANONYMOUS until it has."""
    principal = connection.get(PRINCIPAL_KEY)
    return principal if isinstance(principal, KafkaPrincipal) else ANONYMOUS


def set_principal(connection: MutableMapping[str, Any], principal: KafkaPrincipal) -> None:
    connection[PRINCIPAL_KEY] = principal
