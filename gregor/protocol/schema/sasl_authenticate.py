"""SaslAuthenticate (key 36) v0-2: one SASL token each way, after a SaslHandshake v1 (KIP-152).

v1: session_lifetime_ms in the response (KIP-368, re-authentication). v2: flexible.
"""

from gregor.protocol.schema.dsl import api

SASL_AUTHENTICATE = api(
    key=36,
    name="SaslAuthenticate",
    versions="0-2",
    flexible="2+",
    request="""
auth_bytes: bytes
""",
    response="""
error_code: int16
error_message: string nullable
auth_bytes: bytes
session_lifetime_ms: int64 versions 1+ ignorable
""",
)
