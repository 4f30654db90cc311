"""DescribeClientQuotas (key 48) v0-1: the client quotas of the entities a filter matches.

v1 is flexible. A component matches an entity type by exact name (match_type 0), the default
entity (1) or any name or the default (2); `strict` leaves out entities with other parts.
"""

from gregor.protocol.schema.dsl import api

DESCRIBE_CLIENT_QUOTAS = api(
    key=48,
    name="DescribeClientQuotas",
    versions="0-1",
    flexible="1+",
    request="""
components: []ComponentData
  entity_type: string
  match_type: int8
  match: string nullable
strict: bool
""",
    response="""
throttle_time_ms: int32
error_code: int16
error_message: string nullable
entries: []EntryData nullable
  entity: []EntityData
    entity_type: string
    entity_name: string nullable   # null: the default entity
  values: []ValueData
    key: string
    value: float64
""",
)
