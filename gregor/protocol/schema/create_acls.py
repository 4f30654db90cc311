"""CreateAcls (key 30) v1-3: store ACLs (v0 is not served: KIP-896).

v1: resource pattern type (KIP-290: LITERAL 3, PREFIXED 4). v2: flexible. v3: USER resources
(KIP-679), same fields.
"""

from gregor.protocol.schema.dsl import api

CREATE_ACLS = api(
    key=30,
    name="CreateAcls",
    versions="1-3",
    flexible="2+",
    request="""
creations: []AclCreation
  resource_type: int8
  resource_name: string
  resource_pattern_type: int8 versions 1+ default 3
  principal: string
  host: string
  operation: int8
  permission_type: int8
""",
    response="""
throttle_time_ms: int32
results: []AclCreationResult
  error_code: int16
  error_message: string nullable
""",
)
