"""DescribeProducers (key 61) v0: the active producers of partitions (KIP-664).

Always flexible. Answered by each partition's leader from its producer state.
"""

from gregor.protocol.schema.dsl import api

DESCRIBE_PRODUCERS = api(
    key=61,
    name="DescribeProducers",
    versions="0",
    flexible="0+",
    request="""
topics: []TopicRequest
  name: string
  partition_indexes: []int32
""",
    response="""
throttle_time_ms: int32
topics: []TopicResponse
  name: string
  partitions: []PartitionResponse
    partition_index: int32
    error_code: int16
    error_message: string nullable default null
    active_producers: []ProducerState
      producer_id: int64
      producer_epoch: int32
      last_sequence: int32 default -1
      last_timestamp: int64 default -1
      coordinator_epoch: int32
      current_txn_start_offset: int64 default -1
""",
)
