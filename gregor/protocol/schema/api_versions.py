"""ApiVersions (key 18) v0-4: which APIs and versions the broker serves, and its features.

v1: throttle_time_ms. v2: as v1. v3: flexible; client_software_name/version (KIP-511);
supported/finalized features as tagged fields (KIP-584). v4: a feature's min_version may be 0
(KAFKA-17011). The response header is always v0, even for flexible versions, so that a client
can read the error of a version the broker does not support (handled in `headers`).
"""

from gregor.protocol.schema.dsl import api

API_VERSIONS = api(
    key=18,
    name="ApiVersions",
    versions="0-4",
    flexible="3+",
    request="""
client_software_name: string versions 3+ ignorable
client_software_version: string versions 3+ ignorable
""",
    response="""
error_code: int16
api_keys: []ApiVersion
  api_key: int16
  min_version: int16
  max_version: int16
throttle_time_ms: int32 versions 1+ ignorable
supported_features: []SupportedFeatureKey versions 3+ tag 0 ignorable
  name: string
  min_version: int16
  max_version: int16
finalized_features_epoch: int64 versions 3+ tag 1 default -1 ignorable
finalized_features: []FinalizedFeatureKey versions 3+ tag 2 ignorable
  name: string
  max_version_level: int16
  min_version_level: int16
zk_migration_ready: bool versions 3+ tag 3 default false ignorable
""",
)
