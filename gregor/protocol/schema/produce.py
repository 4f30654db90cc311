"""Produce (key 0) v3-12: append record batches to partition leaders.

v3: transactional_id; record batch v2 (magic 2) only. v4: KAFKA_STORAGE_ERROR may be
returned. v5: log_start_offset in the response. v6: as v5. v7: zstd (KIP-110). v8:
record_errors and error_message (KIP-467). v9: flexible. v10: current_leader and
node_endpoints tagged fields for NOT_LEADER_OR_FOLLOWER (KIP-951). v11: TRANSACTION_ABORTABLE
may be returned (KIP-890). v12: as v11; the producer relies on the broker adding the
partition to the transaction implicitly (KIP-890 part 2). v0-2 were removed in Kafka 4.0
(KIP-896); v13 (topic ids, Kafka 4.1) is not declared.
"""

from gregor.protocol.schema.dsl import api

PRODUCE = api(
    key=0,
    name="Produce",
    versions="3-12",
    flexible="9+",
    request="""
transactional_id: string nullable default null
acks: int16
timeout_ms: int32
topic_data: []TopicProduceData
  name: string
  partition_data: []PartitionProduceData
    index: int32
    records: records nullable
""",
    response="""
responses: []TopicProduceResponse
  name: string
  partition_responses: []PartitionProduceResponse
    index: int32
    error_code: int16
    base_offset: int64
    log_append_time_ms: int64 default -1 ignorable
    log_start_offset: int64 versions 5+ default -1 ignorable
    record_errors: []BatchIndexAndErrorMessage versions 8+ ignorable
      batch_index: int32
      batch_index_error_message: string nullable default null
    error_message: string versions 8+ nullable default null ignorable
    current_leader: LeaderIdAndEpoch versions 10+ tag 0
      leader_id: int32 default -1
      leader_epoch: int32 default -1
throttle_time_ms: int32 versions 1+ default 0 ignorable
node_endpoints: []NodeEndpoint versions 10+ tag 0
  node_id: int32
  host: string
  port: int32
  rack: string nullable default null
""",
)
