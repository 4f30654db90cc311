"""AddOffsetsToTxn (key 25) v0-4: add a group's offsets topic partition to a transaction.

v1: as v0. v2: as v1. v3: flexible. v4: TRANSACTION_ABORTABLE (KIP-890).
"""

from gregor.protocol.schema.dsl import api

ADD_OFFSETS_TO_TXN = api(
    key=25,
    name="AddOffsetsToTxn",
    versions="0-4",
    flexible="3+",
    request="""
transactional_id: string
producer_id: int64
producer_epoch: int16
group_id: string
""",
    response="""
throttle_time_ms: int32
error_code: int16
""",
)
