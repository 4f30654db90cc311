"""ListOffsets (key 2) v1-10: the offset for a timestamp (or earliest/latest/...) per partition.

v1: one offset and its timestamp per partition. v2: isolation_level, throttle_time_ms.
v3: throttle before answering. v4: current_leader_epoch, leader_epoch (fencing, KIP-320).
v5: OFFSET_NOT_AVAILABLE. v6: flexible. v7: timestamp -3 for max timestamp (KIP-734).
v8: -4 for the local log start offset (KIP-405). v9: -5 for the last tiered offset
(KIP-1005). v10: timeout_ms, for offsets read from remote storage (KIP-1075; Kafka 4.0).
v0 was removed in Kafka 4.0 (KIP-896).
"""

from gregor.protocol.schema.dsl import api

LIST_OFFSETS = api(
    key=2,
    name="ListOffsets",
    versions="1-10",
    flexible="6+",
    request="""
replica_id: int32   # -1 for a consumer
isolation_level: int8 versions 2+
topics: []ListOffsetsTopic
  name: string
  partitions: []ListOffsetsPartition
    partition_index: int32
    current_leader_epoch: int32 versions 4+ default -1 ignorable
    timestamp: int64   # -1 latest, -2 earliest, -3 max timestamp, -4 local start, -5 tiered
timeout_ms: int32 versions 10+ ignorable
""",
    response="""
throttle_time_ms: int32 versions 2+ ignorable
topics: []ListOffsetsTopicResponse
  name: string
  partitions: []ListOffsetsPartitionResponse
    partition_index: int32
    error_code: int16
    timestamp: int64 default -1
    offset: int64 default -1
    leader_epoch: int32 versions 4+ default -1
""",
)
