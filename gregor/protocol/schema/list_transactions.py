"""ListTransactions (key 66) v0-1: the transactions a coordinator knows (KIP-664).

Always flexible. v1: duration_filter, only transactions running longer than it (KIP-994).
"""

from gregor.protocol.schema.dsl import api

LIST_TRANSACTIONS = api(
    key=66,
    name="ListTransactions",
    versions="0-1",
    flexible="0+",
    request="""
state_filters: []string
producer_id_filters: []int64
duration_filter: int64 versions 1+ default -1
""",
    response="""
throttle_time_ms: int32
error_code: int16
unknown_state_filters: []string
transaction_states: []TransactionState
  transactional_id: string
  producer_id: int64
  transaction_state: string
""",
)
