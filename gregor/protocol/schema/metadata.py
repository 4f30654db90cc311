"""Metadata (key 3) v0-13: brokers, controller, topics and their partitions' leaders.

v1: a null topic list means all topics (an empty one, none); rack, controller_id, is_internal.
v2: cluster_id. v3: throttle_time_ms. v4: allow_auto_topic_creation. v5: offline_replicas.
v7: leader_epoch. v8: authorized operations (cluster and topic). v9: flexible.
v10: topic_id. v11: drops the cluster authorized operations (KIP-700, see DescribeCluster).
v12: topics may be asked for by id (name null). v13: a top-level error_code, e.g.
REBOOTSTRAP_REQUIRED (KIP-1102; Kafka 4.0). v0-3 are deprecated in Kafka 4.x but served.
"""

from gregor.protocol.schema.dsl import api

METADATA = api(
    key=3,
    name="Metadata",
    versions="0-13",
    flexible="9+",
    request="""
topics: []MetadataRequestTopic nullable 1+   # null: all topics (v1+)
  topic_id: uuid versions 10+ ignorable
  name: string nullable 10+
allow_auto_topic_creation: bool versions 4+ default true
include_cluster_authorized_operations: bool versions 8-10
include_topic_authorized_operations: bool versions 8+
""",
    response="""
throttle_time_ms: int32 versions 3+ ignorable
brokers: []MetadataResponseBroker
  node_id: int32
  host: string
  port: int32
  rack: string versions 1+ nullable default null ignorable
cluster_id: string versions 2+ nullable default null ignorable
controller_id: int32 versions 1+ default -1 ignorable
topics: []MetadataResponseTopic
  error_code: int16
  name: string nullable 12+
  topic_id: uuid versions 10+ ignorable
  is_internal: bool versions 1+ default false ignorable
  partitions: []MetadataResponsePartition encoded  # a handler may keep their bytes
    error_code: int16
    partition_index: int32
    leader_id: int32
    leader_epoch: int32 versions 7+ default -1 ignorable
    replica_nodes: []int32
    isr_nodes: []int32
    offline_replicas: []int32 versions 5+ ignorable
  topic_authorized_operations: int32 versions 8+ default -2147483648
cluster_authorized_operations: int32 versions 8-10 default -2147483648
error_code: int16 versions 13+ ignorable
""",
)
