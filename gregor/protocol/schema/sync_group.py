"""SyncGroup (key 14) v0-5: the leader hands out assignments; every member gets its own.

v1: throttle_time_ms. v2: as v1. v3: group_instance_id (KIP-345). v4: flexible. v5:
protocol_type and protocol_name, checked against the group's (KIP-559).
"""

from gregor.protocol.schema.dsl import api

SYNC_GROUP = api(
    key=14,
    name="SyncGroup",
    versions="0-5",
    flexible="4+",
    request="""
group_id: string
generation_id: int32
member_id: string
group_instance_id: string versions 3+ nullable default null
protocol_type: string versions 5+ nullable default null ignorable
protocol_name: string versions 5+ nullable default null ignorable
assignments: []SyncGroupRequestAssignment   # from the leader only
  member_id: string
  assignment: bytes
""",
    response="""
throttle_time_ms: int32 versions 1+ ignorable
error_code: int16
protocol_type: string versions 5+ nullable default null ignorable
protocol_name: string versions 5+ nullable default null ignorable
assignment: bytes
""",
)
