"""DescribeAcls (key 29) v1-3: the ACLs matching a filter (v0 is not served: KIP-896).

v1: pattern type filter (KIP-290: LITERAL 3 by default; MATCH 2 and ANY 1 select several).
v2: flexible. v3: USER resources (KIP-679), same fields.
"""

from gregor.protocol.schema.dsl import api

DESCRIBE_ACLS = api(
    key=29,
    name="DescribeAcls",
    versions="1-3",
    flexible="2+",
    request="""
resource_type_filter: int8
resource_name_filter: string nullable
pattern_type_filter: int8 versions 1+ default 3
principal_filter: string nullable
host_filter: string nullable
operation: int8
permission_type: int8
""",
    response="""
throttle_time_ms: int32
error_code: int16
error_message: string nullable
resources: []DescribeAclsResource
  resource_type: int8
  resource_name: string
  pattern_type: int8 versions 1+ default 3
  acls: []AclDescription
    principal: string
    host: string
    operation: int8
    permission_type: int8
""",
)
