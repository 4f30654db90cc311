"""DescribeConfigs (key 32) v1-4: the configs of topics, brokers and broker loggers.

v1: include_synonyms; config_source and synonyms in the response (is_default dropped).
v2: as v1. v3: include_documentation; config_type and documentation (KIP-569). v4: flexible.
v0 was removed in Kafka 4.0 (KIP-896).

resource_type: 2 topic, 4 broker, 8 broker logger. config_source: 1 dynamic topic, 2 dynamic
broker, 3 dynamic default broker, 4 static broker, 5 default, 6 dynamic broker logger, 7
client metrics, 8 group.
"""

from gregor.protocol.schema.dsl import api

DESCRIBE_CONFIGS = api(
    key=32,
    name="DescribeConfigs",
    versions="1-4",
    flexible="4+",
    request="""
resources: []DescribeConfigsResource
  resource_type: int8
  resource_name: string
  configuration_keys: []string nullable   # null: all
include_synonyms: bool versions 1+ default false
include_documentation: bool versions 3+ default false
""",
    response="""
throttle_time_ms: int32
results: []DescribeConfigsResult
  error_code: int16
  error_message: string nullable
  resource_type: int8
  resource_name: string
  configs: []DescribeConfigsResourceResult
    name: string
    value: string nullable
    read_only: bool
    config_source: int8 versions 1+ default -1 ignorable
    is_sensitive: bool
    synonyms: []DescribeConfigsSynonym versions 1+ ignorable
      name: string
      value: string nullable
      source: int8
    config_type: int8 versions 3+ default 0 ignorable
    documentation: string versions 3+ nullable ignorable
""",
)
