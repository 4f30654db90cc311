"""JoinGroup (key 11) v0-9: join a classic consumer group and take part in a rebalance.

v1: rebalance_timeout_ms. v2: throttle_time_ms. v3: as v2. v4: MEMBER_ID_REQUIRED, the
client rejoins with the member id it was given (KIP-394). v5: group_instance_id for static
membership (KIP-345). v6: flexible. v7: protocol_type in the response (KIP-559). v8:
reason (KIP-800). v9: skip_assignment, for a leader whose group is assigned by the broker
(KIP-814).
"""

from gregor.protocol.schema.dsl import api

JOIN_GROUP = api(
    key=11,
    name="JoinGroup",
    versions="0-9",
    flexible="6+",
    request="""
group_id: string
session_timeout_ms: int32
rebalance_timeout_ms: int32 versions 1+ default -1 ignorable
member_id: string
group_instance_id: string versions 5+ nullable default null
protocol_type: string
protocols: []JoinGroupRequestProtocol
  name: string
  metadata: bytes
reason: string versions 8+ nullable default null ignorable
""",
    response="""
throttle_time_ms: int32 versions 2+ ignorable
error_code: int16
generation_id: int32 default -1
protocol_type: string versions 7+ nullable default null ignorable
protocol_name: string nullable 7+
leader: string
skip_assignment: bool versions 9+ default false
member_id: string
members: []JoinGroupResponseMember
  member_id: string
  group_instance_id: string versions 5+ nullable default null ignorable
  metadata: bytes
""",
)
