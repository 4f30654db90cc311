"""SaslHandshake v0-1 and SaslAuthenticate v0-2 where no SASL exchange is under way.

On a SASL listener the exchange before authentication is answered by the listener's SASL gate
(broker/sasl_gate.py); what reaches these handlers comes on a PLAINTEXT or SSL listener, or after
the connection authenticated. Kafka answers both there from KafkaApis, never closing the
connection: SaslHandshake with ILLEGAL_SASL_STATE and no mechanisms, SaslAuthenticate with
ILLEGAL_SASL_STATE and "SaslAuthenticate request received after successful authentication" (the
connection counts as authenticated). Both stay in ApiVersions, as Kafka lists them on every
broker listener. A client configured for SASL against a listener without it so fails its
handshake at once with a clear error instead of waiting on a connection the broker dropped.
"""

from __future__ import annotations

from typing import Any

from gregor.handlers.context import RequestContext
from gregor.handlers.registry import handles
from gregor.protocol import api_keys, errors
from gregor.protocol.messages import SaslAuthenticateResponse, SaslHandshakeResponse

ILLEGAL_SASL_STATE = errors.BY_NAME["ILLEGAL_SASL_STATE"].code


@handles(api_keys.SASL_HANDSHAKE)
def sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    return SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=[])


@handles(api_keys.SASL_AUTHENTICATE)
def sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    return SaslAuthenticateResponse(
        error_code=ILLEGAL_SASL_STATE,
        error_message="SaslAuthenticate request received after successful authentication",
        auth_bytes=b"",
    )
