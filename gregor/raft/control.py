"""KRaft's control record for a new leader: the one record of the batch a leader writes at the
start of its epoch (the high watermark cannot pass older entries until a majority holds it).

Byte layout, as Kafka writes it in the metadata log (a control batch of one record)::

    key   = version:int16 (0) type:int16 (2 = LEADER_CHANGE)      ControlRecordType
    value = LeaderChangeMessage v0 (flexible):
              Version:int16 (0)
              LeaderId:int32
              Voters:         compact array of Voter { VoterId:int32, tagged fields }
              GrantingVoters: compact array of Voter
              tagged fields
    (compact array: unsigned varint length + 1; tagged fields: unsigned varint count, 0 here)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

LEADER_CHANGE = 2
LEADER_CHANGE_KEY = struct.pack(">hh", 0, LEADER_CHANGE)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def _uvarint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def encode_leader_change(
    leader_id: int, voters: Iterable[int], granting_voters: Iterable[int]
) -> bytes:
    out = bytearray(_INT16.pack(0) + _INT32.pack(leader_id))
    for group in (sorted(voters), sorted(granting_voters)):
        _uvarint(len(group) + 1, out)
        for voter in group:
            out += _INT32.pack(voter)
            out.append(0)  # the Voter's tagged fields
    out.append(0)  # the message's tagged fields
    return bytes(out)


def decode_leader_change(data: bytes) -> tuple[int, list[int], list[int]]:
    """(leader id, voters, granting voters); tagged fields are skipped."""
    pos = _INT16.size
    (leader_id,) = _INT32.unpack_from(data, pos)
    pos += _INT32.size
    groups: list[list[int]] = []
    for _ in range(2):
        count, pos = _read_uvarint(data, pos)
        group = []
        for _ in range(max(0, count - 1)):
            group.append(_INT32.unpack_from(data, pos)[0])
            pos = _skip_tagged_fields(data, pos + _INT32.size)
        groups.append(group)
    return leader_id, groups[0], groups[1]


def _skip_tagged_fields(data: bytes, pos: int) -> int:
    count, pos = _read_uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        pos += size
    return pos


# -- snapshot header and footer (KIP-630) ---------------------------------------------------
#
# A snapshot file opens with a control batch holding one SNAPSHOT_HEADER record and closes with
# one holding a SNAPSHOT_FOOTER record; both values are flexible messages at version 0:
#
#     SnapshotHeaderRecord: Version:int16 (0)  LastContainedLogTimestamp:int64  tagged fields
#     SnapshotFooterRecord: Version:int16 (0)  tagged fields

SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4
SNAPSHOT_HEADER_KEY = struct.pack(">hh", 0, SNAPSHOT_HEADER)
SNAPSHOT_FOOTER_KEY = struct.pack(">hh", 0, SNAPSHOT_FOOTER)
CONTROL_TYPE_NAMES = {
    0: "ABORT",
    1: "COMMIT",
    LEADER_CHANGE: "LeaderChange",
    SNAPSHOT_HEADER: "SnapshotHeader",
    SNAPSHOT_FOOTER: "SnapshotFooter",
    5: "KRaftVersion",
    6: "KRaftVoters",
}

_INT64 = struct.Struct(">q")


def control_type(key: bytes | None) -> int | None:
    """The ControlRecordType of a control record's key (version 0); None if it is not one."""
    if key is None or len(key) < 4:
        return None
    version, kind = struct.unpack_from(">hh", key)
    return kind if version == 0 else None


def encode_snapshot_header(last_contained_log_timestamp: int) -> bytes:
    return _INT16.pack(0) + _INT64.pack(last_contained_log_timestamp) + b"\x00"


def decode_snapshot_header(data: bytes) -> tuple[int, int]:
    """(version, last contained log timestamp); ValueError if the bytes are too short."""
    if len(data) < _INT16.size + _INT64.size + 1:
        raise ValueError(f"snapshot header of {len(data)} bytes is too short")
    (version,) = _INT16.unpack_from(data, 0)
    (timestamp,) = _INT64.unpack_from(data, _INT16.size)
    return version, timestamp


def encode_snapshot_footer() -> bytes:
    return _INT16.pack(0) + b"\x00"


def decode_snapshot_footer(data: bytes) -> int:
    if len(data) < _INT16.size + 1:
        raise ValueError(f"snapshot footer of {len(data)} bytes is too short")
    return int(_INT16.unpack_from(data, 0)[0])
