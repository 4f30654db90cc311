"""Vote (key 52) v0-2: a candidate (or, with pre_vote, a prospective) asks a voter for its vote.

Controller listener only. v0: flexible from the start (KIP-595). v1: voter_id and the
candidate's and voter's directory ids, node_endpoints in the response (KIP-853). v2: pre_vote
(KIP-996); candidate_* renamed replica_*, the bytes unchanged.
"""

from gregor.protocol.schema.dsl import api

VOTE = api(
    key=52,
    name="Vote",
    versions="0-2",
    flexible="0+",
    request="""
cluster_id: string nullable default null
voter_id: int32 versions 1+ default -1 ignorable   # the voter this request is for
topics: []TopicData
  topic_name: string
  partitions: []PartitionData
    partition_index: int32
    replica_epoch: int32   # the candidate's (bumped) epoch
    replica_id: int32      # the candidate
    replica_directory_id: uuid versions 1+ ignorable
    voter_directory_id: uuid versions 1+ ignorable
    last_offset_epoch: int32
    last_offset: int64
    pre_vote: bool versions 2+
""",
    response="""
error_code: int16
topics: []TopicData
  topic_name: string
  partitions: []PartitionData
    partition_index: int32
    error_code: int16
    leader_id: int32       # -1: unknown
    leader_epoch: int32
    vote_granted: bool
node_endpoints: []NodeEndpoint versions 1+ tag 0
  node_id: int32
  host: string
  port: uint16
""",
)
