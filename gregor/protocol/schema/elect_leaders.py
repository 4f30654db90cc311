"""ElectLeaders (key 43) v0-2: ask the controller to elect partition leaders.

v0: preferred elections only, no election type on the wire. v1: `election_type` (KIP-460:
0 PREFERRED, 1 UNCLEAN) and a top-level error code in the response. v2: flexible.
`topic_partitions` null asks for every partition of every topic.
"""

from gregor.protocol.schema.dsl import api

ELECT_LEADERS = api(
    key=43,
    name="ElectLeaders",
    versions="0-2",
    flexible="2+",
    request="""
election_type: int8 versions 1+   # 0 preferred, 1 unclean
topic_partitions: []TopicPartitions nullable   # null: all partitions
  topic: string
  partitions: []int32
timeout_ms: int32 default 60000
""",
    response="""
throttle_time_ms: int32
error_code: int16 versions 1+
replica_election_results: []ReplicaElectionResult
  topic: string
  partition_result: []PartitionResult
    partition_id: int32
    error_code: int16
    error_message: string nullable
""",
)
