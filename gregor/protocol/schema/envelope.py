"""Envelope (key 58) v0: a broker forwards a client's request to the active controller (KIP-590).

Controller listener only; flexible. `request_data` is the client's request header and body as
it arrived (no size prefix); `response_data` the controller's response header and body, which
the broker hands back to the client unchanged. `error_code` is about the envelope itself
(NOT_CONTROLLER when the receiver is not the active controller; the broker tries the new one).
"""

from gregor.protocol.schema.dsl import api

ENVELOPE = api(
    key=58,
    name="Envelope",
    versions="0",
    flexible="0+",
    request="""
request_data: bytes
request_principal: bytes nullable
client_host_address: bytes
""",
    response="""
response_data: bytes nullable default null
error_code: int16
""",
)
