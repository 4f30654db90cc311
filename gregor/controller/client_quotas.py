"""Client quotas as metadata: AlterClientQuotas -> ClientQuotaRecords, Describe from an image.

Rules as Kafka's ClientQuotaControlManager and ClientQuotasImage:

    alter      an entity with no part, a part of another type than user, client-id or ip, a
               type twice, an empty name, ip with user or client-id, a name that is not an IP
               address                                           INVALID_REQUEST
               a key the entity type does not take (user and client-id: producer_byte_rate,
               consumer_byte_rate, request_percentage, controller_mutation_rate; ip:
               connection_creation_rate), a value <= 0, a fractional byte rate or
               connection rate                                   INVALID_REQUEST
               a key twice in one entity, an entity twice        INVALID_REQUEST
               only changes are written: setting the current value, or removing a key that
               is not set, writes nothing
    describe   components filter the entities: match type 0 an exact name, 1 the default,
               2 any name or the default; `strict` keeps only entities with no other part;
               an empty or repeated type, or a match string where none belongs (or none
               where one does), INVALID_REQUEST; a type other than user, client-id or ip,
               UNSUPPORTED_VERSION

Pure: (image, request items) -> (records, per-entity results).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gregor.metadata import records as r
from gregor.metadata.image import MetadataImage
from gregor.protocol import errors
from gregor.security.quotas import CLIENT_ID, CLIENT_KEYS, IP, USER, Entity

INVALID_REQUEST = errors.BY_NAME["INVALID_REQUEST"].code
UNSUPPORTED_VERSION = errors.BY_NAME["UNSUPPORTED_VERSION"].code
IP_KEYS = {"connection_creation_rate": True}  # integral
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

RawEntity = Sequence[tuple[str, str | None]]  # (type, name or None), as the request has them


@dataclass(frozen=True, slots=True)
class Op:
    key: str
    value: float
    remove: bool


@dataclass(frozen=True, slots=True)
class Alteration:
    entity: RawEntity
    ops: Sequence[Op]


Result = tuple[RawEntity, int, str | None]  # (entity as asked, error code, message)


class _Invalid(Exception):
    pass


def _entity(raw: RawEntity) -> tuple[Entity, Mapping[str, bool]]:
    """The entity (sorted) and the keys it takes (key -> integral); _Invalid if refused."""
    if not raw:
        raise _Invalid("Invalid empty client quota entity")
    parts: dict[str, str | None] = {}
    for etype, name in raw:
        if etype in parts:
            raise _Invalid(f"Invalid client quota entity, duplicate entity entry {etype}")
        if etype not in (USER, CLIENT_ID, IP):
            raise _Invalid(f"Unhandled client quota entity type: {etype}")
        if name is not None and not name:
            raise _Invalid(f"Empty {etype} not supported")
        parts[etype] = name
    if IP in parts:
        if len(parts) > 1:
            raise _Invalid(
                "Invalid quota entity combination, IP entity should not be combined with "
                "User or ClientId"
            )
        ip = parts[IP]
        if ip is not None:
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise _Invalid(f"{ip} is not a valid IP or resolvable host.") from None
        return tuple(parts.items()), IP_KEYS
    return tuple(sorted(parts.items())), CLIENT_KEYS


def _check_value(keys: Mapping[str, bool], key: str, value: float) -> None:
    integral = keys.get(key)
    if integral is None:
        raise _Invalid(f"Invalid configuration key {key}")
    if not value > 0.0:
        raise _Invalid(f"Quota {key} must be greater than 0")
    if integral:
        if value > 2**63 - 1:
            raise _Invalid(f"Proposed value for {key} is too large for a LONG.")
        if abs(value % 1.0) > 1e-6:
            raise _Invalid(f"{key} cannot be a fractional value.")


def _records(image: MetadataImage, alt: Alteration) -> list[Any]:
    ent, keys = _entity(alt.entity)
    wanted: dict[str, float | None] = {}
    for op in alt.ops:
        if op.key in wanted:
            raise _Invalid(f"Duplicate quota key {op.key} not updating quota for this entity")
        wanted[op.key] = None if op.remove else op.value
    current = image.client_quotas.get(ent, {})
    E = r.ClientQuotaRecord.EntityData
    parts = [E(entity_type=t, entity_name=n) for t, n in ent]
    out = []
    for key, value in wanted.items():
        if value is None:
            if key in current:
                out.append(r.ClientQuotaRecord(entity=parts, key=key, value=0.0, remove=True))
            continue
        _check_value(keys, key, value)
        if current.get(key) != value:
            out.append(r.ClientQuotaRecord(entity=parts, key=key, value=value, remove=False))
    return out


def alter(
    image: MetadataImage, alterations: Sequence[Alteration]
) -> tuple[list[Any], list[Result]]:
    """The records of every accepted alteration, and a result for each entity asked."""
    records: list[Any] = []
    results: list[Result] = []
    seen: set[Entity] = set()
    for alt in alterations:
        key = tuple(sorted(alt.entity, key=lambda p: (p[0], p[1] or "")))
        try:
            if key in seen:
                raise _Invalid("Ignoring duplicate entity")
            seen.add(key)
            records.extend(_records(image, alt))
        except _Invalid as exc:
            results.append((alt.entity, INVALID_REQUEST, str(exc)))
            continue
        results.append((alt.entity, errors.NONE, None))
    return records, results


@dataclass(frozen=True, slots=True)
class Component:
    entity_type: str
    match_type: int
    match: str | None


Described = tuple[int, str | None, list[tuple[Entity, dict[str, float]]] | None]


def _filters(components: Sequence[Component]) -> tuple[dict[str, str | None], set[str]]:
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for c in components:
        if not c.entity_type:
            raise _Invalid("Invalid empty entity type.")
        if c.entity_type in exact or c.entity_type in typed:
            raise _Invalid(
                f"Entity type {c.entity_type} cannot appear more than once in the filter."
            )
        if c.entity_type not in (USER, CLIENT_ID, IP):
            raise LookupError(f"Unsupported entity type {c.entity_type}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise _Invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[c.entity_type] = c.match
        elif c.match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
            if c.match is not None:
                kind = "DEFAULT" if c.match_type == MATCH_DEFAULT else "SPECIFIED"
                raise _Invalid(
                    f"Request specified MATCH_TYPE_{kind}, but also specified a match string."
                )
            if c.match_type == MATCH_DEFAULT:
                exact[c.entity_type] = None
            else:
                typed.add(c.entity_type)
        else:
            raise _Invalid(f"Unknown match type {c.match_type}")
    if (IP in exact or IP in typed) and len(exact) + len(typed) > 1:
        raise _Invalid(
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component."
        )
    return exact, typed


def describe(image: MetadataImage, components: Sequence[Component], strict: bool) -> Described:
    """(error code, message, entries): the entities the filter matches, with their quotas."""
    try:
        exact, typed = _filters(components)
    except _Invalid as exc:
        return INVALID_REQUEST, str(exc), None
    except LookupError as exc:
        return UNSUPPORTED_VERSION, str(exc.args[0]), None
    out = []
    for ent, values in image.client_quotas.items():
        parts = dict(ent)
        if strict and len(parts) != len(exact) + len(typed):
            continue
        if any(t not in parts or parts[t] != name for t, name in exact.items()):
            continue
        if any(t not in parts for t in typed):
            continue
        out.append((ent, dict(values)))
    out.sort(key=lambda e: repr(e[0]))
    return errors.NONE, None, out
