"""DeleteGroups (key 42) v0-2: delete empty groups and their offsets.

v1: as v0. v2: flexible.
"""

from gregor.protocol.schema.dsl import api

DELETE_GROUPS = api(
    key=42,
    name="DeleteGroups",
    versions="0-2",
    flexible="2+",
    request="""
groups_names: []string
""",
    response="""
throttle_time_ms: int32
results: []DeletableGroupResult
  group_id: string
  error_code: int16
""",
)
