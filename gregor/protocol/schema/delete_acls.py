"""DeleteAcls (key 31) v1-3: remove the ACLs matching filters (v0 is not served: KIP-896).

v1: pattern type filter (KIP-290). v2: flexible. v3: USER resources (KIP-679), same fields.
"""

from gregor.protocol.schema.dsl import api

DELETE_ACLS = api(
    key=31,
    name="DeleteAcls",
    versions="1-3",
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
