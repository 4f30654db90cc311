"""DescribeTransactions (key 65) v0: the state of transactional ids (KIP-664). Always flexible."""

from gregor.protocol.schema.dsl import api

DESCRIBE_TRANSACTIONS = api(
    key=65,
    name="DescribeTransactions",
    versions="0",
    flexible="0+",
    request="""
transactional_ids: []string
""",
    response="""
throttle_time_ms: int32
transaction_states: []TransactionState
  error_code: int16
  transactional_id: string
  transaction_state: string
  transaction_timeout_ms: int32
  transaction_start_time_ms: int64
  producer_id: int64
  producer_epoch: int16
  topics: []TopicData   # the partitions in the transaction
    topic: string
    partitions: []int32
""",
)
