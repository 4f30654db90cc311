"""BrokerHeartbeat (key 63) v0-1: a registered broker is alive, and how far it has caught up.

Controller listener only; flexible in every version (KIP-631). v1: offline_log_dirs, tagged
(KIP-858).
"""

from gregor.protocol.schema.dsl import api

BROKER_HEARTBEAT = api(
    key=63,
    name="BrokerHeartbeat",
    versions="0-1",
    flexible="0+",
    request="""
broker_id: int32
broker_epoch: int64 default -1
current_metadata_offset: int64
want_fence: bool
want_shut_down: bool
offline_log_dirs: []uuid versions 1+ tag 0
""",
    response="""
throttle_time_ms: int32
error_code: int16
is_caught_up: bool default false
is_fenced: bool default true
should_shut_down: bool
""",
)
