"""BeginQuorumEpoch (key 53) v0-1: a new leader tells the voters of its epoch (KIP-595).

Controller listener only. v1: flexible; voter_id, voter_directory_id and the leader's
endpoints in the request, node_endpoints in the response (KIP-853).
"""

from gregor.protocol.schema.dsl import api

BEGIN_QUORUM_EPOCH = api(
    key=53,
    name="BeginQuorumEpoch",
    versions="0-1",
    flexible="1+",
    request="""
cluster_id: string nullable default null
voter_id: int32 versions 1+ default -1 ignorable
topics: []TopicData
  topic_name: string
  partitions: []PartitionData
    partition_index: int32
    voter_directory_id: uuid versions 1+ ignorable
    leader_id: int32
    leader_epoch: int32
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
