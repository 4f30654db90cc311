"""FetchSnapshot (key 59) v0-1: a follower downloads the leader's snapshot in chunks (KIP-630).

Controller listener only; flexible in every version. v1: replica_directory_id in the request,
node_endpoints in the response (KIP-853). `unaligned_records` is the chunk of the snapshot file
from `position`, not cut at batch boundaries.
"""

from gregor.protocol.schema.dsl import api

FETCH_SNAPSHOT = api(
    key=59,
    name="FetchSnapshot",
    versions="0-1",
    flexible="0+",
    request="""
cluster_id: string nullable default null tag 0
replica_id: int32 default -1
max_bytes: int32 default 0x7fffffff
topics: []TopicSnapshot
  name: string
  partitions: []PartitionSnapshot
    partition: int32
    current_leader_epoch: int32
    snapshot_id: SnapshotId
      end_offset: int64
      epoch: int32
    position: int64
    replica_directory_id: uuid versions 1+ tag 0 ignorable
""",
    response="""
throttle_time_ms: int32 ignorable
error_code: int16
topics: []TopicSnapshot
  name: string
  partitions: []PartitionSnapshot
    index: int32
    error_code: int16
    snapshot_id: SnapshotId
      end_offset: int64
      epoch: int32
    current_leader: LeaderIdAndEpoch tag 0
      leader_id: int32
      leader_epoch: int32
    size: int64
    position: int64
    unaligned_records: records
node_endpoints: []NodeEndpoint versions 1+ tag 0
  node_id: int32
  host: string
  port: uint16
""",
)
