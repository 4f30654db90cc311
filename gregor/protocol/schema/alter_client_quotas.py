"""AlterClientQuotas (key 49) v0-1: set or remove client quotas, one result per entity.

v1 is flexible. `validate_only` checks the request and writes nothing.
"""

from gregor.protocol.schema.dsl import api

ALTER_CLIENT_QUOTAS = api(
    key=49,
    name="AlterClientQuotas",
    versions="0-1",
    flexible="1+",
    request="""
entries: []EntryData
  entity: []EntityData
    entity_type: string
    entity_name: string nullable
  ops: []OpData
    key: string
    value: float64
    remove: bool
validate_only: bool
""",
    response="""
throttle_time_ms: int32
entries: []EntryData
  error_code: int16
  error_message: string nullable
  entity: []EntityData
    entity_type: string
    entity_name: string nullable
""",
)
