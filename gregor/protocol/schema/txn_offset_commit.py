"""TxnOffsetCommit (key 28) v0-5: commit a group's offsets as part of a transaction.

v1: as v0. v2: committed_leader_epoch (KIP-320). v3: flexible; generation_id, member_id,
group_instance_id, so the coordinator can fence zombie members (KIP-447). v4: as v3
(TRANSACTION_ABORTABLE, KIP-890). v5: as v4, for the transaction protocol of KIP-890 part 2.
"""

from gregor.protocol.schema.dsl import api

TXN_OFFSET_COMMIT = api(
    key=28,
    name="TxnOffsetCommit",
    versions="0-5",
    flexible="3+",
    request="""
transactional_id: string
group_id: string
producer_id: int64
producer_epoch: int16
generation_id: int32 versions 3+ default -1
member_id: string versions 3+ default ""
group_instance_id: string versions 3+ nullable default null
topics: []TxnOffsetCommitRequestTopic
  name: string
  partitions: []TxnOffsetCommitRequestPartition
    partition_index: int32
    committed_offset: int64
    committed_leader_epoch: int32 versions 2+ default -1 ignorable
    committed_metadata: string nullable
""",
    response="""
throttle_time_ms: int32
topics: []TxnOffsetCommitResponseTopic
  name: string
  partitions: []TxnOffsetCommitResponsePartition
    partition_index: int32
    error_code: int16
""",
)
