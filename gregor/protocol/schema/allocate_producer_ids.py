"""AllocateProducerIds (key 67) v0: a broker asks the controller for a block of producer ids.

Controller listener only; flexible (KIP-730).
"""

from gregor.protocol.schema.dsl import api

ALLOCATE_PRODUCER_IDS = api(
    key=67,
    name="AllocateProducerIds",
    versions="0",
    flexible="0+",
    request="""
broker_id: int32
broker_epoch: int64 default -1
""",
    response="""
throttle_time_ms: int32
error_code: int16
producer_id_start: int64
producer_id_len: int32
""",
)
