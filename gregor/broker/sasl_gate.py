"""The SASL exchange in front of a SASL listener's dispatcher: the driver of `SaslSession`.

Until a connection has authenticated, its frames come here: ApiVersions goes on to the
dispatcher, SaslHandshake and SaslAuthenticate are answered from the session (security/sasl.py),
and any other request closes the connection (ILLEGAL_SASL_STATE, as Kafka). After a SaslHandshake
v0 the tokens come as bare size-prefixed frames and are answered the same way. Once the session
completes, its principal goes into the connection's state (`set_principal`) and every frame goes
straight to the dispatcher.

A session with an end (KIP-368: `connections.max.reauth.ms`, an expiring token) is checked on
each request: a SaslHandshake may start re-authenticating (the exchange runs again, requests in
flight go on), and once the session has ended any other request closes the connection
unanswered, as Kafka's SocketServer. Each re-authentication and each expired connection closed
is logged at INFO.

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
_API_KEY = struct.Struct(">h")


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
            if session.expires_at_ms is None:
                return self.inner(conn, frame)
            return self._authenticated(conn, session, frame)
        return self._exchange(conn, session, frame)

    def _authenticated(
        self, conn: Connection, session: SaslSession, frame: memoryview
    ) -> Output | Awaitable[Output | None] | None:
        """A request on a session that ends: a re-authentication, a close, or the request."""
        now_ms = conn.now_ms()
        key = _API_KEY.unpack_from(frame)[0] if len(frame) >= 2 else -1
        if key == api_keys.SASL_HANDSHAKE and session.begin_reauthentication(now_ms):
            return self._exchange(conn, session, frame)
        if session.expired(now_ms):
            assert session.expires_at_ms is not None
            log.info(
                "%s: SASL session of %s expired %d ms ago without re-authentication",
                conn.peer, session.principal, now_ms - session.expires_at_ms,
            )  # fmt: skip
            conn.close("expired SASL session")
            return None
        return self.inner(conn, frame)

    def _exchange(
        self, conn: Connection, session: SaslSession, frame: memoryview
    ) -> Output | Awaitable[Output | None] | None:
        if session.raw_tokens:
            answer = session.authenticate(bytes(frame), conn.now_ms())
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
        answer = session.authenticate(bytes(request.auth_bytes), conn.now_ms())
        response = SaslAuthenticateResponse(
            error_code=answer.error_code,
            error_message=answer.error_message,
            auth_bytes=answer.auth_bytes,
            session_lifetime_ms=answer.session_lifetime_ms,
        )
        out = codec.encode_response(key, version, correlation_id, response)
        return self._settle(conn, session, answer, out if answer.answered else [])

    def _settle(
        self, conn: Connection, session: SaslSession, answer: AuthenticateAnswer, out: Output
    ) -> Output | Awaitable[Output | None]:
        if not answer.failed:
            if answer.reauthenticated:
                log.info(
                    "%s re-authenticated as %s (%s); session lifetime %d ms",
                    conn.peer, answer.principal, session.mechanism, answer.session_lifetime_ms,
                )  # fmt: skip
            elif answer.principal is not None:
                set_principal(conn.attributes, answer.principal)
                log.debug(
                    "%s authenticated as %s; session lifetime %d ms",
                    conn.peer, answer.principal, answer.session_lifetime_ms,
                )  # fmt: skip
            return out
        log.info(
            "Failed %s with %s (%s, mechanism %s on listener %s): %s",
            "re-authentication" if session.reauthenticating else "authentication", conn.peer, answer.principal or "no principal", session.mechanism, self.config.name,
            answer.error_message,
        )  # fmt: skip
        conn.close_after_responses("failed authentication")
        return self._after_delay(out)

    async def _after_delay(self, out: Output) -> Output:
        await asyncio.sleep(self.failed_delay_ms / 1000)
        return out
