"""EndTxn (key 26) v0-5: commit or abort a producer's transaction.

v1: as v0. v2: as v1. v3: flexible. v4: TRANSACTION_ABORTABLE (KIP-890). v5: the response
carries the producer id and epoch, bumped by the coordinator at the end of each transaction
(KIP-890 part 2).
"""

from gregor.protocol.schema.dsl import api

END_TXN = api(
    key=26,
    name="EndTxn",
    versions="0-5",
    flexible="3+",
    request="""
transactional_id: string
producer_id: int64
producer_epoch: int16
committed: bool   # true: commit, false: abort
""",
    response="""
throttle_time_ms: int32
error_code: int16
producer_id: int64 versions 5+ default -1 ignorable
producer_epoch: int16 versions 5+ default -1 ignorable
""",
)
