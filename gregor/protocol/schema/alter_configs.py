"""AlterConfigs (key 33) v0-2: replace the whole dynamic config of resources.

v1: as v0. v2: flexible. Deprecated in favour of IncrementalAlterConfigs, still served.
"""

from gregor.protocol.schema.dsl import api

ALTER_CONFIGS = api(
    key=33,
    name="AlterConfigs",
    versions="0-2",
    flexible="2+",
    request="""
resources: []AlterConfigsResource
  resource_type: int8
  resource_name: string
  configs: []AlterableConfig
    name: string
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
