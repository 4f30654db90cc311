"""AddPartitionsToTxn (key 24) v0-5: add partitions to a producer's ongoing transaction.

v1: as v0. v2: as v1. v3: flexible. v4: batched for brokers, several transactions per request
and verify_only, sent by a partition leader to check a transaction (KIP-890); clients keep
using v3 and below. v5: TRANSACTION_ABORTABLE (KIP-890).
"""

from gregor.protocol.schema.dsl import api

ADD_PARTITIONS_TO_TXN = api(
    key=24,
    name="AddPartitionsToTxn",
    versions="0-5",
    flexible="3+",
    request="""
transactions: []AddPartitionsToTxnTransaction versions 4+
  transactional_id: string
  producer_id: int64
  producer_epoch: int16
  verify_only: bool default false
  topics: []AddPartitionsToTxnTopic
v3_and_below_transactional_id: string versions 0-3
v3_and_below_producer_id: int64 versions 0-3
v3_and_below_producer_epoch: int16 versions 0-3
v3_and_below_topics: []AddPartitionsToTxnTopic versions 0-3

struct AddPartitionsToTxnTopic
  name: string
  partitions: []int32
""",
    response="""
throttle_time_ms: int32
error_code: int16 versions 4+ ignorable
results_by_transaction: []AddPartitionsToTxnResult versions 4+
  transactional_id: string
  topic_results: []AddPartitionsToTxnTopicResult
results_by_topic_v3_and_below: []AddPartitionsToTxnTopicResult versions 0-3

struct AddPartitionsToTxnTopicResult
  name: string
  results_by_partition: []AddPartitionsToTxnPartitionResult

struct AddPartitionsToTxnPartitionResult
  partition_index: int32
  partition_error_code: int16
""",
)
