"""IncrementalAlterConfigs (key 44) v0-1: set, delete, append to or subtract from configs.

v1: flexible. config_operation: 0 set, 1 delete, 2 append, 3 subtract (KIP-339).
"""

from gregor.protocol.schema.dsl import api

INCREMENTAL_ALTER_CONFIGS = api(
    key=44,
    name="IncrementalAlterConfigs",
    versions="0-1",
    flexible="1+",
    request="""
resources: []AlterConfigsResource
  resource_type: int8
  resource_name: string
  configs: []AlterableConfig
    name: string
    config_operation: int8
    value: string nullable
validate_only: bool
""",
    response="""
throttle_time_ms: int32
responses: []AlterConfigsResourceResponse
  error_code: int16
  error_message: string nullable
  resource_type: int8
  resource_name: string
""",
)
