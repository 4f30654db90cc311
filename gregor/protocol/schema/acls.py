"""The ACL APIs: DescribeAcls (key 29), CreateAcls (30), DeleteAcls (31), v0-3 declared
(v0, literal patterns only, is not served: KIP-896).

v1: pattern types (KIP-290: LITERAL 3 by default, PREFIXED 4; MATCH 2 and ANY 1 in filters).
v2: flexible. v3: USER resources (KIP-679), same fields.
"""

from gregor.protocol.schema.dsl import api

DESCRIBE_ACLS = api(
    key=29,
    name="DescribeAcls",
    versions="0-3",
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

CREATE_ACLS = api(
    key=30,
    name="CreateAcls",
    versions="0-3",
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

DELETE_ACLS = api(
    key=31,
    name="DeleteAcls",
    versions="0-3",
    flexible="2+",
    request="""
filters: []DeleteAclsFilter
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
filter_results: []DeleteAclsFilterResult
  error_code: int16
  error_message: string nullable
  matching_acls: []DeleteAclsMatchingAcl
    error_code: int16
    error_message: string nullable
    resource_type: int8
    resource_name: string
    pattern_type: int8 versions 1+ default 3
    principal: string
    host: string
    operation: int8
    permission_type: int8
""",
)
