"""The SASL exchange in front of a SASL listener's dispatcher: the driver of `SaslSession`.

Until a connection has authenticated, its frames come here: ApiVersions goes on to the
dispatcher, SaslHandshake and SaslAuthenticate are answered from the session (security/sasl.py),
and any other request closes the connection (ILLEGAL_SASL_STATE, as Kafka). After a SaslHandshake
v0 the tokens come as bare size-prefixed frames and are answered the same way. Once the session
completes, its principal goes into the connection's state (`set_principal`) and every frame goes
straight to the dispatcher.

A failed authentication is answered SASL_AUTHENTICATION_FAILED after
`connection.failed.authentication.delay.ms` (slowing password guessing), then that connection
closes; the log line names the address, the mechanism and why, never the secret.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable

from gregor.protocol import api_keys, codec
from gregor.protocol.exceptions import CorruptFrameError
from gregor.protocol.headers import peek_request
from gregor.protocol.messages import SaslAuthenticateResponse, SaslHandshakeResponse
from gregor.runtime.connection import Connection, Dispatcher, FrameError, Output
from gregor.security.listener_config import ListenerConfig
from gregor.security.principal import set_principal
from gregor.security.sasl import AuthenticateAnswer, SaslSession

log = logging.getLogger("gregor.sasl")

SESSION_KEY = "sasl"
_SIZE = struct.Struct(">i")


class SaslGate:
    def __init__(self, inner: Dispatcher, config: ListenerConfig, failed_delay_ms: int) -> None:
        self.inner = inner
        self.config = config
        self.failed_delay_ms = failed_delay_ms

    def __call__(
        self, conn: Connection, frame: memoryview
    ) -> Output | Awaitable[Output | None] | None:
        session = conn.attributes.get(SESSION_KEY)
        if session is None:
            session = conn.attributes[SESSION_KEY] = SaslSession(self.config)
        if session.complete:
            return self.inner(conn, frame)
        if session.raw_tokens:
            answer = session.authenticate(bytes(frame))
            token = [_SIZE.pack(len(answer.auth_bytes)), answer.auth_bytes]
            return self._settle(conn, session, answer, [] if answer.failed else token)
        try:
            key, version, correlation_id = peek_request(frame)
        except CorruptFrameError as exc:
            raise FrameError(f"malformed request during SASL authentication: {exc}") from None
        if not session.allows(key):
            entry = api_keys.BY_KEY.get(key)
            raise FrameError(session.illegal(entry.name if entry else f"API key {key}"))
        if key == api_keys.API_VERSIONS:
            return self.inner(conn, frame)
        try:
            _header, request = codec.decode_request(frame)
        except CorruptFrameError as exc:
            raise FrameError(f"malformed SASL request: {exc}") from None
        if key == api_keys.SASL_HANDSHAKE:
            shake = session.handshake(str(request.mechanism), version)
            if shake.close:
                log.info(
                    "%s asked for SASL mechanism %s, not enabled on listener %s (%s)",
                    conn.peer, request.mechanism, self.config.name, ",".join(shake.mechanisms),
                )  # fmt: skip
                conn.close_after_responses("unsupported SASL mechanism")
            body = SaslHandshakeResponse(error_code=shake.error_code, mechanisms=shake.mechanisms)
            return codec.encode_response(key, version, correlation_id, body)
        answer = session.authenticate(bytes(request.auth_bytes))
        response = SaslAuthenticateResponse(
            error_code=answer.error_code,
            error_message=answer.error_message,
            auth_bytes=answer.auth_bytes,
            session_lifetime_ms=answer.session_lifetime_ms,
        )
        return self._settle(
            conn, session, answer, codec.encode_response(key, version, correlation_id, response)
        )

    def _settle(
        self, conn: Connection, session: SaslSession, answer: AuthenticateAnswer, out: Output
    ) -> Output | Awaitable[Output | None]:
        if not answer.failed:
            if answer.principal is not None:
                set_principal(conn.attributes, answer.principal)
                log.debug("%s authenticated as %s", conn.peer, answer.principal)
            return out
        log.info(
            "Failed authentication with %s (%s, mechanism %s on listener %s): %s",
            conn.peer, answer.principal or "no principal", session.mechanism, self.config.name,
            answer.error_message,
        )  # fmt: skip
        conn.close_after_responses("failed authentication")
        return self._after_delay(out)

    async def _after_delay(self, out: Output) -> Output:
        await asyncio.sleep(self.failed_delay_ms / 1000)
        return out
