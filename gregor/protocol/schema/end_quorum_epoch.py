"""EndQuorumEpoch (key 54) v0-1: a resigning leader asks the voters to elect a successor.

Controller listener only. v1: flexible; preferred_candidates (id and directory id) replace
preferred_successors; the leader's endpoints; node_endpoints in the response (KIP-853).
"""

from gregor.protocol.schema.dsl import api

END_QUORUM_EPOCH = api(
    key=54,
    name="EndQuorumEpoch",
    versions="0-1",
    flexible="1+",
    request="""
cluster_id: string nullable default null
topics: []TopicData
  topic_name: string
  partitions: []PartitionData
    partition_index: int32
    leader_id: int32
    leader_epoch: int32
    preferred_successors: []int32 versions 0 ignorable
    preferred_candidates: []ReplicaInfo versions 1+ ignorable
      candidate_id: int32
      candidate_directory_id: uuid
leader_endpoints: []LeaderEndpoint versions 1+ ignorable
  name: string
  host: string
  port: uint16
""",
    response="""
error_code: int16
topics: []TopicData
  topic_name: string
  partitions: []PartitionData
    partition_index: int32
    error_code: int16
    leader_id: int32
    leader_epoch: int32
node_endpoints: []NodeEndpoint versions 1+ tag 0
  node_id: int32
  host: string
  port: uint16
""",
)
