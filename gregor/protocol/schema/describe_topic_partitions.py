"""DescribeTopicPartitions (key 75) v0: topics' partitions with ELR, paged (KIP-966).

Always flexible. A response stops after `response_partition_limit` partitions and sets
next_cursor where the next request should start; a null cursor starts from the beginning.
"""

from gregor.protocol.schema.dsl import api

DESCRIBE_TOPIC_PARTITIONS = api(
    key=75,
    name="DescribeTopicPartitions",
    versions="0",
    flexible="0+",
    request="""
topics: []TopicRequest
  name: string
response_partition_limit: int32 default 2000
cursor: Cursor nullable default null
  topic_name: string
  partition_index: int32
""",
    response="""
throttle_time_ms: int32 ignorable
topics: []DescribeTopicPartitionsResponseTopic
  error_code: int16
  name: string nullable
  topic_id: uuid ignorable
  is_internal: bool default false ignorable
  partitions: []DescribeTopicPartitionsResponsePartition
    error_code: int16
    partition_index: int32
    leader_id: int32
    leader_epoch: int32 default -1 ignorable
    replica_nodes: []int32
    isr_nodes: []int32
    eligible_leader_replicas: []int32 nullable default null
    last_known_elr: []int32 nullable default null
    offline_replicas: []int32 ignorable
  topic_authorized_operations: int32 default -2147483648
next_cursor: Cursor nullable default null
  topic_name: string
  partition_index: int32
""",
)
