"""SaslHandshake (key 17) v0-1: the client names the SASL mechanism it will use.

v0: the SASL tokens then follow as raw frames (no Kafka header). v1: as v0 on the wire, but the
tokens follow in SaslAuthenticate requests (KIP-152). Kafka never bumped it (KAFKA-9577: clients
up to 2.4 negotiate it wrongly); neither version is flexible.
"""

from gregor.protocol.schema.dsl import api

SASL_HANDSHAKE = api(
    key=17,
    name="SaslHandshake",
    versions="0-1",
    flexible="none",
    request="""
mechanism: string   # e.g. PLAIN, SCRAM-SHA-256
""",
    response="""
error_code: int16
mechanisms: []string   # the mechanisms the listener has enabled
""",
)
