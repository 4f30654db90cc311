"""DescribeQuorum (key 55) v0-2: the quorum's leader, epoch, high watermark and replicas.

Broker and controller listeners. v0: flexible (KIP-595). v1: last_fetch_timestamp and
last_caught_up_timestamp (KIP-836). v2: error messages, replica directory ids and the voters'
listeners (KIP-853). The request is the same in every version.
"""

from gregor.protocol.schema.dsl import api

DESCRIBE_QUORUM = api(
    key=55,
    name="DescribeQuorum",
    versions="0-2",
    flexible="0+",
    request="""
topics: []TopicData
  topic_name: string
  partitions: []PartitionData
    partition_index: int32
""",
    response="""
error_code: int16
error_message: string versions 2+ nullable ignorable
topics: []TopicData
  topic_name: string
  partitions: []PartitionData
    partition_index: int32
    error_code: int16
    error_message: string versions 2+ nullable ignorable
    leader_id: int32
    leader_epoch: int32
    high_watermark: int64
    current_voters: []ReplicaState
    observers: []ReplicaState
nodes: []Node versions 2+
  node_id: int32
  listeners: []Listener
    name: string
    host: string
    port: uint16

struct ReplicaState
  replica_id: int32
  replica_directory_id: uuid versions 2+
  log_end_offset: int64   # -1: unknown
  last_fetch_timestamp: int64 versions 1+ default -1 ignorable
  last_caught_up_timestamp: int64 versions 1+ default -1 ignorable
""",
)
