"""OffsetForLeaderEpoch (key 23) v2-4: the end offset of a leader epoch (log truncation).

v1: leader_epoch in the response. v2: current_leader_epoch (fencing, KIP-320), throttle.
v3: replica_id (-1 consumer, -2 debug, else a follower's id). v4: flexible.
v0-1 were removed in Kafka 4.0 (KIP-896).
"""

from gregor.protocol.schema.dsl import api

OFFSET_FOR_LEADER_EPOCH = api(
    key=23,
    name="OffsetForLeaderEpoch",
    versions="2-4",
    flexible="4+",
    request="""
replica_id: int32 versions 3+ default -2 ignorable
topics: []OffsetForLeaderTopic
  topic: string
  partitions: []OffsetForLeaderPartition
    partition: int32
    current_leader_epoch: int32 versions 2+ default -1 ignorable
    leader_epoch: int32
""",
    response="""
throttle_time_ms: int32 versions 2+ ignorable
topics: []OffsetForLeaderTopicResult
  topic: string
  partitions: []EpochEndOffset
    error_code: int16
    partition: int32
    leader_epoch: int32 versions 1+ default -1 ignorable
    end_offset: int64 default -1
""",
)
