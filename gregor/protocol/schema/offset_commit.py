"""OffsetCommit (key 8) v2-9: store a group's consumed offsets.

v2: retention_time_ms (v2-4 only; from v5 the broker's offsets.retention.minutes decides).
v3: throttle_time_ms. v4: as v3. v5: drops retention_time_ms. v6: committed_leader_epoch
(KIP-320). v7: group_instance_id (KIP-345). v8: flexible. v9: the new consumer protocol's
member epoch in generation_id_or_member_epoch (KIP-848). v0-1 were removed in Kafka 4.0
(KIP-896).
"""

from gregor.protocol.schema.dsl import api

OFFSET_COMMIT = api(
    key=8,
    name="OffsetCommit",
    versions="2-9",
    flexible="8+",
    request="""
group_id: string
generation_id_or_member_epoch: int32 versions 1+ default -1 ignorable
member_id: string versions 1+ ignorable
group_instance_id: string versions 7+ nullable default null
retention_time_ms: int64 versions 2-4 default -1 ignorable
topics: []OffsetCommitRequestTopic
  name: string
  partitions: []OffsetCommitRequestPartition
    partition_index: int32
    committed_offset: int64
    committed_leader_epoch: int32 versions 6+ default -1 ignorable
    committed_metadata: string nullable
""",
    response="""
throttle_time_ms: int32 versions 3+ ignorable
topics: []OffsetCommitResponseTopic
  name: string
  partitions: []OffsetCommitResponsePartition
    partition_index: int32
    error_code: int16
""",
)
