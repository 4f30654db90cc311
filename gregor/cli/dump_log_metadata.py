"""How `gregor dump-log --cluster-metadata-decoder` reads a `__cluster_metadata` record: a
metadata record as `{"type": "TOPIC_RECORD", "version": 0, "data": {...}}` (record type as
Kafka's MetadataRecordType names it, fields in camelCase, uuids in Kafka's base64 form), a control
record by its ControlRecordType name and its fields. Shared by the plain and JSON outputs."""

from __future__ import annotations

import json
import re
import struct
import uuid
from typing import Any

from gregor.metadata import records as metadata_records
from gregor.metadata.meta_properties import uuid_to_str
from gregor.protocol.codegen import Data
from gregor.raft import control


class UndecodableRecord(Exception):
    """A record that does not decode; its message says why."""


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _json_value(value: Any) -> Any:
    if isinstance(value, Data):
        return {_camel(f): _json_value(getattr(value, f)) for f in value._fields}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, uuid.UUID):
        return uuid_to_str(value)
    if isinstance(value, bytes | bytearray):
        return value.hex()
    return value


def _type_name(record: Data) -> str:
    """TopicRecord -> TOPIC_RECORD, as Kafka's MetadataRecordType."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(record).__name__).upper()


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def payload(value: bytes | None) -> dict[str, Any]:
    """A metadata record's `{"type", "version", "data"}`; UndecodableRecord if it does not
    decode."""
    try:
        record, version = metadata_records.decode_with_version(value or b"")
    except metadata_records.MetadataRecordError as exc:
        raise UndecodableRecord(str(exc)) from None
    return {"type": _type_name(record), "version": version, "data": _json_value(record)}


def control_record(key: bytes | None, value: bytes | None) -> tuple[str, dict[str, Any]]:
    """A control record's ControlRecordType name and fields; UndecodableRecord (naming the type)
    if its value does not decode."""
    kind = control.control_type(key)
    name = control.CONTROL_TYPE_NAMES.get(
        kind if kind is not None else -1, f"UnknownControlRecord({kind})"
    )
    data = value or b""
    try:
        if kind == control.LEADER_CHANGE:
            leader, voters, granting = control.decode_leader_change(data)
            body: dict[str, Any] = {
                "version": 0,
                "leaderId": leader,
                "voters": voters,
                "grantingVoters": granting,
            }
        elif kind == control.SNAPSHOT_HEADER:
            version, timestamp = control.decode_snapshot_header(data)
            body = {"version": version, "lastContainedLogTimestamp": timestamp}
        elif kind == control.SNAPSHOT_FOOTER:
            body = {"version": control.decode_snapshot_footer(data)}
        else:
            body = {"valueSize": len(data)}
    except (ValueError, IndexError, struct.error) as exc:
        raise UndecodableRecord(f"{name}: {exc}") from None
    return name, body
