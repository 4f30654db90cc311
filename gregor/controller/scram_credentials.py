"""SCRAM credentials as metadata: AlterUserScramCredentials -> records, and Describe from an image.

Rules as Kafka's ScramControlManager and ScramImage:

    alter      one alteration per user per request: a second one (deletion or upsertion, of any
               mechanism) fails that user with DUPLICATE_RESOURCE and drops the first
               an empty user name                           UNACCEPTABLE_CREDENTIAL
               a mechanism other than 1 (SHA-256), 2 (SHA-512)  UNSUPPORTED_SASL_MECHANISM
               deleting a credential that is not there      RESOURCE_NOT_FOUND
               iterations < 4096 / > 16384                  UNACCEPTABLE_CREDENTIAL
               an upsertion carries the client-computed salted password; only the stored
               and server keys derived from it are written (UserScramCredentialRecord)
    describe   no users named: every user with a credential; a user named twice gets
               DUPLICATE_RESOURCE, one without a credential RESOURCE_NOT_FOUND; else each
               mechanism and its iterations (never the salt or keys)

Pure: (image, request items) -> (records, per-user results), the results in request order of
first appearance (Kafka's order is a hash map's; ours is stable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gregor.metadata import records as r
from gregor.metadata.image import MetadataImage
from gregor.protocol import errors
from gregor.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS_BY_TYPE,
    MIN_ITERATIONS,
    credential_from_salted,
)

DUPLICATE_RESOURCE = errors.BY_NAME["DUPLICATE_RESOURCE"].code
RESOURCE_NOT_FOUND = errors.BY_NAME["RESOURCE_NOT_FOUND"].code
UNACCEPTABLE_CREDENTIAL = errors.BY_NAME["UNACCEPTABLE_CREDENTIAL"].code
UNSUPPORTED_SASL_MECHANISM = errors.BY_NAME["UNSUPPORTED_SASL_MECHANISM"].code


@dataclass(frozen=True, slots=True)
class Deletion:
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class Upsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes

    def __repr__(self) -> str:
        return f"Upsertion({self.name!r}, mechanism={self.mechanism}, iterations={self.iterations})"


# (user, error code, error message or None)
Result = tuple[str, int, str | None]
# (user, error code, error message, [(mechanism type, iterations)])
Described = tuple[str, int, str | None, list[tuple[int, int]]]


def _check(image: MetadataImage, item: Deletion | Upsertion) -> tuple[int, str] | None:
    if not item.name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if item.mechanism not in MECHANISMS_BY_TYPE:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if isinstance(item, Deletion):
        if (item.name, item.mechanism) not in image.scram:
            return RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    elif item.iterations < MIN_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    elif item.iterations > MAX_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


def alter(
    image: MetadataImage, deletions: Sequence[Deletion], upsertions: Sequence[Upsertion]
) -> tuple[list[object], list[Result]]:
    """The records of an AlterUserScramCredentials and each user's result."""
    accepted: dict[str, Deletion | Upsertion] = {}
    failed: dict[str, tuple[int, str]] = {}
    order: dict[str, None] = {}
    items: list[Deletion | Upsertion] = [*deletions, *upsertions]
    for item in items:
        order.setdefault(item.name)
        if item.name in failed:
            continue
        if accepted.pop(item.name, None) is not None:
            failed[item.name] = (
                DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
            continue
        error = _check(image, item)
        if error is not None:
            failed[item.name] = error
        else:
            accepted[item.name] = item
    records: list[object] = []
    results: list[Result] = []
    for name in order:
        done = accepted.get(name)
        if done is None:
            code, message = failed[name]
            results.append((name, code, message))
            continue
        records.append(_record(done))
        results.append((name, errors.NONE, None))
    return records, results


def _record(item: Deletion | Upsertion) -> object:
    if isinstance(item, Deletion):
        return r.RemoveUserScramCredentialRecord(name=item.name, mechanism=item.mechanism)
    mech = MECHANISMS_BY_TYPE[item.mechanism]
    cred = credential_from_salted(mech, item.salted_password, item.salt, item.iterations)
    return r.UserScramCredentialRecord(
        name=item.name,
        mechanism=item.mechanism,
        salt=cred.salt,
        stored_key=cred.stored_key,
        server_key=cred.server_key,
        iterations=cred.iterations,
    )


def describe(image: MetadataImage, users: Sequence[str] | None) -> list[Described]:
    """DescribeUserScramCredentials over `image`: every user when `users` is None or empty."""
    if not users:
        names = sorted({name for name, _ in image.scram})
        counts = dict.fromkeys(names, 1)
    else:
        counts = {}
        for name in users:
            counts[name] = counts.get(name, 0) + 1
    out: list[Described] = []
    for name, count in counts.items():
        if count > 1:
            message = f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"
            out.append((name, DUPLICATE_RESOURCE, message, []))
            continue
        infos = [
            (mech, image.scram[(name, mech)].iterations)
            for mech in sorted(MECHANISMS_BY_TYPE)
            if (name, mech) in image.scram
        ]
        if infos:
            out.append((name, errors.NONE, None, infos))
        else:
            message = f"Attempt to describe a user credential that does not exist: {name}"
            out.append((name, RESOURCE_NOT_FOUND, message, []))
    return out
