"""CreateAcls and DeleteAcls as the controller plans them (Kafka's AclControlManager): the
image and the request in, the records to append and the per-item answer out.

    create_acls(image, bindings, new_uuid) -> one AccessControlEntryRecord per new binding (an
        id drawn from new_uuid); a binding equal to a stored one succeeds and writes nothing;
        an invalid one gets INVALID_REQUEST (acls.check_new_acl) and the others go on.
    delete_acls(image, filters) -> per filter the bindings it removed, or INVALID_REQUEST for
        a filter with an UNKNOWN element; one RemoveAccessControlEntryRecord per ACL removed
        (once, however many filters match it). More than MAX_RECORDS_PER_USER_OP records in
        one request is refused whole, as Kafka's bounded record list refuses it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from gregor.controller.quorum_controller import ControllerResult
from gregor.controller.rules import MAX_RECORDS_PER_USER_OP
from gregor.metadata import records as r
from gregor.metadata.image import MetadataImage
from gregor.metadata.snapshot import acl_record
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.security.acls import AclBinding, AclFilter, check_filter, check_new_acl


def create_acls(
    image: MetadataImage, bindings: Sequence[AclBinding], new_uuid: Callable[[], uuid.UUID]
) -> ControllerResult[list[KafkaError | None]]:
    existing = set(image.acls.values())
    records: list[Any] = []
    results: list[KafkaError | None] = []
    for acl in bindings:
        try:
            check_new_acl(acl)
        except KafkaError as exc:
            results.append(exc)
            continue
        if acl not in existing:
            existing.add(acl)
            acl_id = new_uuid()
            while acl_id in image.acls:
                acl_id = new_uuid()
            records.append(acl_record(acl_id, acl))
        results.append(None)
    if len(records) > MAX_RECORDS_PER_USER_OP:
        too_many = KafkaError(
            errors.INVALID_REQUEST,
            f"Cannot create more than {MAX_RECORDS_PER_USER_OP} acls in a single operation.",
        )
        return ControllerResult([], [too_many for _ in bindings])
    return ControllerResult(records, results)


def delete_acls(
    image: MetadataImage, filters: Sequence[AclFilter]
) -> ControllerResult[list[list[AclBinding] | KafkaError]]:
    removed: dict[uuid.UUID, None] = {}
    results: list[list[AclBinding] | KafkaError] = []
    for f in filters:
        try:
            check_filter(f)
        except KafkaError as exc:
            results.append(exc)
            continue
        matched = [(i, acl) for i, acl in image.acls.items() if f.matches(acl)]
        removed.update((i, None) for i, _ in matched)
        results.append([acl for _, acl in matched])
    if len(removed) > MAX_RECORDS_PER_USER_OP:
        too_many = KafkaError(
            errors.UNKNOWN_SERVER_ERROR,
            f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls in a single delete operation.",
        )
        return ControllerResult([], [too_many for _ in filters])
    return ControllerResult([r.RemoveAccessControlEntryRecord(id=i) for i in removed], results)
