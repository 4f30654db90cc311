"""DescribeGroups (key 15) v0-6: state, protocol and members of classic groups.

v1: throttle_time_ms. v2: as v1. v3: authorized operations (KIP-430). v4:
group_instance_id of members (KIP-345). v5: flexible. v6: error_message; an unknown group is
answered with GROUP_ID_NOT_FOUND instead of a Dead group (KIP-1043; Kafka 4.0).
"""

from gregor.protocol.schema.dsl import api

DESCRIBE_GROUPS = api(
    key=15,
    name="DescribeGroups",
    versions="0-6",
    flexible="5+",
    request="""
groups: []string
include_authorized_operations: bool versions 3+
""",
    response="""
throttle_time_ms: int32 versions 1+ ignorable
groups: []DescribedGroup
  error_code: int16
  error_message: string versions 6+ nullable default null
  group_id: string
  group_state: string
  protocol_type: string
  protocol_data: string
  members: []DescribedGroupMember
    member_id: string
    group_instance_id: string versions 4+ nullable default null ignorable
    client_id: string
    client_host: string
    member_metadata: bytes
    member_assignment: bytes
  authorized_operations: int32 versions 3+ default -2147483648
""",
)
