"""OffsetFetch (key 9) v1-9: read a group's committed offsets.

v2: null topics means all; a top-level error_code. v3: throttle_time_ms. v4: as v3. v5:
committed_leader_epoch (KIP-320). v6: flexible. v7: require_stable, wait out pending
transactional commits (KIP-447). v8: several groups per request (KIP-709): groups replace
group_id/topics. v9: member_id and member_epoch for the new consumer protocol (KIP-848).
v0 was removed in Kafka 4.0 (KIP-896).
"""

from gregor.protocol.schema.dsl import api

OFFSET_FETCH = api(
    key=9,
    name="OffsetFetch",
    versions="1-9",
    flexible="6+",
    request="""
group_id: string versions 0-7
topics: []OffsetFetchRequestTopic versions 0-7 nullable 2-7   # null: all (v2+)
  name: string
  partition_indexes: []int32
groups: []OffsetFetchRequestGroup versions 8+
  group_id: string
  member_id: string versions 9+ nullable default null ignorable
  member_epoch: int32 versions 9+ default -1 ignorable
  topics: []OffsetFetchRequestTopics nullable   # null: all
    name: string
    partition_indexes: []int32
require_stable: bool versions 7+ default false
""",
    response="""
throttle_time_ms: int32 versions 3+ ignorable
topics: []OffsetFetchResponseTopic versions 0-7
  name: string
  partitions: []OffsetFetchResponsePartition
    partition_index: int32
    committed_offset: int64
    committed_leader_epoch: int32 versions 5-7 default -1 ignorable
    metadata: string nullable
    error_code: int16
error_code: int16 versions 2-7 default 0 ignorable
groups: []OffsetFetchResponseGroup versions 8+
  group_id: string
  topics: []OffsetFetchResponseTopics
    name: string
    partitions: []OffsetFetchResponsePartitions
      partition_index: int32
      committed_offset: int64
      committed_leader_epoch: int32 default -1 ignorable
      metadata: string nullable
      error_code: int16
  error_code: int16 default 0
""",
)
