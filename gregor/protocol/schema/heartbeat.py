"""Heartbeat (key 12) v0-4: a classic group member is alive; the answer says if it must rejoin.

v1: throttle_time_ms. v2: as v1. v3: group_instance_id (KIP-345). v4: flexible.
"""

from gregor.protocol.schema.dsl import api

HEARTBEAT = api(
    key=12,
    name="Heartbeat",
    versions="0-4",
    flexible="4+",
    request="""
group_id: string
generation_id: int32
member_id: string
group_instance_id: string versions 3+ nullable default null
""",
    response="""
throttle_time_ms: int32 versions 1+ ignorable
error_code: int16
""",
)
