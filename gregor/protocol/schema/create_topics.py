"""CreateTopics (key 19) v2-7: create topics with a partition count or explicit assignments.

v1: validate_only, error_message. v2: throttle_time_ms. v3: as v2. v4: num_partitions and
replication_factor may be -1 for the broker defaults (KIP-464). v5: flexible; the response
carries the created topic's configs, partition count and replication factor, and
topic_config_error_code as a tagged field (KIP-525). v6: THROTTLING_QUOTA_EXCEEDED (KIP-599).
v7: topic_id in the response (KIP-516). v0-1 were removed in Kafka 4.0 (KIP-896).
"""

from gregor.protocol.schema.dsl import api

CREATE_TOPICS = api(
    key=19,
    name="CreateTopics",
    versions="2-7",
    flexible="5+",
    request="""
topics: []CreatableTopic
  name: string
  num_partitions: int32   # -1: num.partitions (v4+)
  replication_factor: int16   # -1: default.replication.factor (v4+)
  assignments: []CreatableReplicaAssignment
    partition_index: int32
    broker_ids: []int32
  configs: []CreatableTopicConfig
    name: string
    value: string nullable
timeout_ms: int32 default 60000
validate_only: bool versions 1+ default false
""",
    response="""
throttle_time_ms: int32 versions 2+ ignorable
topics: []CreatableTopicResult
  name: string
  topic_id: uuid versions 7+ ignorable
  error_code: int16
  error_message: string versions 1+ nullable ignorable
  topic_config_error_code: int16 versions 5+ tag 0 ignorable
  num_partitions: int32 versions 5+ default -1 ignorable
  replication_factor: int16 versions 5+ default -1 ignorable
  configs: []CreatableTopicConfigs versions 5+ nullable ignorable
    name: string
    value: string nullable
    read_only: bool
    config_source: int8 default -1 ignorable
    is_sensitive: bool
""",
)
