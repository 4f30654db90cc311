"""LeaveGroup (key 13) v0-5: members leave a classic group.

v1: throttle_time_ms. v2: as v1. v3: a batch of members, by member id or group instance id
(KIP-345), replacing member_id. v4: flexible. v5: reason (KIP-800).
"""

from gregor.protocol.schema.dsl import api

LEAVE_GROUP = api(
    key=13,
    name="LeaveGroup",
    versions="0-5",
    flexible="4+",
    request="""
group_id: string
member_id: string versions 0-2
members: []MemberIdentity versions 3+
  member_id: string
  group_instance_id: string nullable default null
  reason: string versions 5+ nullable default null ignorable
""",
    response="""
throttle_time_ms: int32 versions 1+ ignorable
error_code: int16
members: []MemberResponse versions 3+
  member_id: string
  group_instance_id: string nullable
  error_code: int16
""",
)
