"""ListGroups (key 16) v0-5: the groups a broker coordinates.

v1: throttle_time_ms. v2: as v1. v3: flexible. v4: states_filter, group_state (KIP-518).
v5: types_filter, group_type (KIP-848).
"""

from gregor.protocol.schema.dsl import api

LIST_GROUPS = api(
    key=16,
    name="ListGroups",
    versions="0-5",
    flexible="3+",
    request="""
states_filter: []string versions 4+
types_filter: []string versions 5+
""",
    response="""
throttle_time_ms: int32 versions 1+ ignorable
error_code: int16
groups: []ListedGroup
  group_id: string
  protocol_type: string
  group_state: string versions 4+ ignorable
  group_type: string versions 5+ ignorable
""",
)
