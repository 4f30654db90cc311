"""Fetch (key 1) v4-17: read record batches from partitions (consumers and followers).

v4: isolation_level, last_stable_offset, aborted_transactions (transactional reads).
v5: log_start_offset. v6: KAFKA_STORAGE_ERROR. v7: incremental fetch sessions (KIP-227):
session_id, session_epoch, forgotten_topics_data. v8: throttle before answering. v9:
current_leader_epoch (KIP-320). v10: zstd. v11: rack_id, preferred_read_replica (KIP-392).
v12: flexible; last_fetched_epoch; diverging_epoch, current_leader, snapshot_id tagged.
v13: topic ids replace topic names (KIP-516). v14: OFFSET_MOVED_TO_TIERED_STORAGE. v15:
replica_state replaces replica_id (KIP-903). v16: node_endpoints (KIP-951). v17:
replica_directory_id (KIP-853). v0-3 were removed in Kafka 4.0 (KIP-896).

Responses put each partition's `records` in its own buffer: a FileSlice for sendfile works.
"""

from gregor.protocol.schema.dsl import api

FETCH = api(
    key=1,
    name="Fetch",
    versions="4-17",
    flexible="12+",
    request="""
cluster_id: string versions 12+ nullable default null tag 0 ignorable
replica_id: int32 versions 0-14 default -1   # -1 for a consumer
replica_state: ReplicaState versions 15+ tag 1
  replica_id: int32 default -1
  replica_epoch: int64 default -1
max_wait_ms: int32
min_bytes: int32
max_bytes: int32 versions 3+ default 0x7fffffff ignorable
isolation_level: int8 versions 4+ default 0 ignorable   # 0 read_uncommitted, 1 read_committed
session_id: int32 versions 7+ default 0 ignorable
session_epoch: int32 versions 7+ default -1 ignorable
topics: []FetchTopic
  topic: string versions 0-12 ignorable
  topic_id: uuid versions 13+ ignorable
  partitions: []FetchPartition
    partition: int32
    current_leader_epoch: int32 versions 9+ default -1 ignorable
    fetch_offset: int64
    last_fetched_epoch: int32 versions 12+ default -1
    log_start_offset: int64 versions 5+ default -1 ignorable   # followers only
    partition_max_bytes: int32
    replica_directory_id: uuid versions 17+ tag 0 ignorable
forgotten_topics_data: []ForgottenTopic versions 7+
  topic: string versions 7-12 ignorable
  topic_id: uuid versions 13+ ignorable
  partitions: []int32
rack_id: string versions 11+ default "" ignorable
""",
    response="""
throttle_time_ms: int32 versions 1+ ignorable
error_code: int16 versions 7+ ignorable
session_id: int32 versions 7+ default 0
responses: []FetchableTopicResponse
  topic: string versions 0-12 ignorable
  topic_id: uuid versions 13+ ignorable
  partitions: []PartitionData
    partition_index: int32
    error_code: int16
    high_watermark: int64
    last_stable_offset: int64 versions 4+ default -1 ignorable
    log_start_offset: int64 versions 5+ default -1 ignorable
    diverging_epoch: EpochEndOffset versions 12+ tag 0
      epoch: int32 default -1
      end_offset: int64 default -1
    current_leader: LeaderIdAndEpoch versions 12+ tag 1
      leader_id: int32 default -1
      leader_epoch: int32 default -1
    snapshot_id: SnapshotId versions 12+ tag 2
      end_offset: int64 default -1
      epoch: int32 default -1
    aborted_transactions: []AbortedTransaction versions 4+ nullable ignorable
      producer_id: int64
      first_offset: int64
    preferred_read_replica: int32 versions 11+ default -1
    records: records nullable
node_endpoints: []NodeEndpoint versions 16+ tag 0
  node_id: int32
  host: string
  port: int32
  rack: string nullable default null
""",
)
