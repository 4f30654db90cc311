"""InitProducerId (key 22) v0-5: a producer id and epoch for an idempotent or transactional
producer.

v1: as v0. v2: flexible. v3: producer_id and producer_epoch in the request, to bump the epoch
of an existing producer after an error (KIP-360). v4: PRODUCER_FENCED (KIP-588). v5:
TRANSACTION_ABORTABLE (KIP-890). (v6, KIP-939's two-phase commit, is Kafka 4.1's.)
"""

from gregor.protocol.schema.dsl import api

INIT_PRODUCER_ID = api(
    key=22,
    name="InitProducerId",
    versions="0-5",
    flexible="2+",
    request="""
transactional_id: string nullable   # null: idempotence only
transaction_timeout_ms: int32
producer_id: int64 versions 3+ default -1
producer_epoch: int16 versions 3+ default -1
""",
    response="""
throttle_time_ms: int32 ignorable
error_code: int16
producer_id: int64 default -1
producer_epoch: int16
""",
)
