"""Every request frame of the client listener: peek the header, refuse what we do not serve,
decode, forward a metadata write off the active controller (forwarding.py), else call the
registered handler and encode its answer (a handler returns a `Pending` for a request that
waits; its response is encoded when it completes). Produce and Fetch pass the client quota gate
(quota_gate.py): a client over its quota gets `throttle_time_ms` and its connection is muted;
a consumer's Fetch over it gets no data (its fetch session kept), as Kafka's
KafkaApis.handleFetchRequest answers it.
Every request's handling time is charged to `request_percentage` quotas (request_quota.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from gregor.broker import mutation_quota
from gregor.broker.quota_gate import QuotaGate, is_follower_fetch
from gregor.broker.request_quota import RequestQuota
from gregor.handlers import api_versions
from gregor.handlers.context import RequestContext, Services
from gregor.handlers.produce import AcksZeroError
from gregor.handlers.registry import HANDLERS, NO_RESPONSE
from gregor.protocol import api_keys, codec
from gregor.protocol.codegen import Data
from gregor.protocol.exceptions import CorruptFrameError
from gregor.protocol.headers import RequestHeader, peek_request
from gregor.protocol.messages import FetchResponse
from gregor.replication.pending import Pending
from gregor.runtime.connection import Connection, FrameError, Later, Output, close_slices
from gregor.runtime.forwarding import Forwarder
from gregor.runtime.purgatory_driver import future_of, later_of
from gregor.security import principal_data
from gregor.security.principal import principal_of
from gregor.security.quotas import QuotaState

FORWARD_TIMEOUT_MS = 30_000
FORWARD_DEFAULT_TIMEOUT_MS = {api_keys.DESCRIBE_QUORUM: 5_000}  # requests with no timeout_ms
QUOTA_APIS = frozenset({api_keys.PRODUCE, api_keys.FETCH})
MUTATION_APIS = frozenset(mutation_quota.STRICT_FROM)


class Dispatcher:
    def __init__(self, services: Services, forwarder: Forwarder) -> None:
        self.services = services
        self.forwarder = forwarder
        # Set while the node has not caught up with the metadata (a quorum member starting):
        # requests wait for it, as Kafka's broker reads none before its initial catch-up.
        self.held: asyncio.Future[None] | None = None
        self.quotas = QuotaGate(
            lambda: services.store.image.client_quotas,
            services.config_value("quota.window.num"),
            services.config_value("quota.window.size.seconds"),
        )
        self.requests = RequestQuota(
            lambda: services.store.image.client_quotas,
            services.config_value("quota.window.num"),
            services.config_value("quota.window.size.seconds"),
        )

    def __call__(
        self, conn: Connection, frame: memoryview
    ) -> Output | Later | Awaitable[Output | None] | None:
        if self.held is not None:
            if not self.held.done():
                return self._when_caught_up(conn, bytes(frame))
            self.held = None
        started = self.services.clock.monotonic_s()
        try:
            key, version, correlation_id = peek_request(frame)
        except CorruptFrameError as exc:
            raise FrameError(f"malformed request: {exc}") from None
        entry = api_keys.BY_KEY.get(key)
        if key not in HANDLERS or entry is None:
            raise FrameError(f"request for API key {key}, which this broker does not serve")
        if not entry.supports(version):
            if key == api_keys.API_VERSIONS:
                return codec.encode_response(key, 0, correlation_id, api_versions.response(35))
            raise FrameError(
                f"{entry.name} v{version} is not supported (versions {entry.min_version}-"
                f"{entry.max_version}): UNSUPPORTED_VERSION"
            )
        try:
            header, request = codec.decode_request(frame)
        except CorruptFrameError as exc:
            raise FrameError(f"malformed {entry.name} v{version} request: {exc}") from None
        ctx = RequestContext(self.services, header, conn.peer, conn.attributes)
        if key in MUTATION_APIS:
            refused = self._mutation_quota(conn, ctx, request)
            if refused is not None:
                return codec.encode_response(key, version, correlation_id, refused)
        if self.forwarder.wanted(key):
            return self._forward(key, version, correlation_id, bytes(frame), ctx, request)
        if key in QUOTA_APIS:
            quota = self.quotas.state(key)
            if quota is not None:
                return self._throttled(conn, quota, frame, ctx, request, started)
        try:
            result = HANDLERS[key](ctx, request)
        except AcksZeroError as exc:
            raise FrameError(f"acks=0 produce failed: {exc}") from None
        throttle = self._charge(conn, ctx, request, started)
        if result is NO_RESPONSE:
            return None
        if isinstance(result, Pending) and result.done:
            result = result.value
        if isinstance(result, Data):
            if throttle and hasattr(result, "throttle_time_ms"):
                setattr(result, "throttle_time_ms", throttle)  # noqa: B010 - not every API has it
            return codec.encode_response(key, version, correlation_id, result)
        return self._finish(key, version, correlation_id, result, throttle)  # one that waits

    def _charge(self, conn: Connection, ctx: RequestContext, request: Any, started: float) -> int:
        """request_percentage: charge the loop time since `started`; over the quota, mute the
        connection and return the throttle time for the response."""
        if self.requests.state() is None:
            return 0
        elapsed = int((self.services.clock.monotonic_s() - started) * 1e9)
        throttle = self.requests.charge(
            conn.attributes, ctx.header, request, elapsed, self.services.now_ms()
        )
        if throttle:
            conn.throttle(throttle)
        return throttle

    def _throttled(
        self,
        conn: Connection,
        quota: QuotaState,
        frame: memoryview,
        ctx: RequestContext,
        request: Any,
        started: float,
    ) -> Output | Later | Awaitable[Output] | None:
        """A Produce or Fetch under a client quota: Produce records its request's size before it
        is handled, Fetch its response's once encoded (a consumer asking for at most what fits
        in the quota window); over the quota, the response carries the throttle time and the
        connection is muted for it."""
        header = ctx.header
        key, version, cid = (
            header.request_api_key,
            header.request_api_version,
            header.correlation_id,
        )
        throttle = 0
        measured: QuotaState | None = quota
        if key == api_keys.PRODUCE:
            throttle = self.quotas.record(
                quota, conn.attributes, header.client_id, len(frame), self.services.now_ms()
            )
        elif is_follower_fetch(version, request):
            measured = None  # replication traffic: not a client's
        else:
            self._cap_fetch(conn, quota, header, request)
        try:
            result = HANDLERS[key](ctx, request)
        except AcksZeroError as exc:
            raise FrameError(f"acks=0 produce failed: {exc}") from None
        throttle = max(throttle, self._charge(conn, ctx, request, started))
        if result is NO_RESPONSE:
            if throttle:
                conn.throttle(throttle)
            return None

        def encode(body: Any) -> Output:
            body.throttle_time_ms = throttle
            out = codec.encode_response(key, version, cid, body)
            if key == api_keys.FETCH and measured is not None:
                return self._fetched(conn, measured, header, request, body, out, throttle)
            if throttle:
                conn.throttle(throttle)
            return out

        if isinstance(result, Pending) and result.done:
            result = result.value
        if isinstance(result, Data):
            return encode(result)
        return later_of(result, encode)

    def _mutation_quota(self, conn: Connection, ctx: RequestContext, request: Any) -> Any:
        """controller_mutation_rate (mutation_quota.py): the refusal of a request that comes
        while the rate is over the quota (the connection is muted for the throttle time);
        None when it may go on (its partitions counted)."""
        header = ctx.header
        key, version = header.request_api_key, header.request_api_version
        quota = self.quotas.state(key)
        if quota is None or mutation_quota.validate_only(request):
            return None
        user, client_id = self.quotas.user_of(conn.attributes), header.client_id or ""
        now_ms = self.services.now_ms()
        if mutation_quota.strict(key, version):
            throttle = quota.over(user, client_id, now_ms)
            if throttle:
                conn.throttle(throttle)
                return mutation_quota.refused(key, version, request, throttle)
        default = self.services.config_value("num.partitions")
        image = self.services.store.image
        count = mutation_quota.mutations(key, version, request, image, default)
        quota.add(user, client_id, count, now_ms)
        if not mutation_quota.strict(key, version):
            conn.throttle(quota.over(user, client_id, now_ms))  # held back, never refused
        return None

    def _cap_fetch(
        self, conn: Connection, quota: QuotaState, header: RequestHeader, request: Any
    ) -> None:
        """A consumer's Fetch asks for no more than the quota window holds (Kafka caps
        fetchMaxBytes so: more would be sure to be throttled, and never delivered)."""
        user = self.quotas.user_of(conn.attributes)
        most = quota.max_in_window(user, header.client_id or "")
        if most is not None and most < request.max_bytes:
            request.max_bytes = most
            request.min_bytes = min(request.min_bytes, most)

    def _fetched(
        self,
        conn: Connection,
        quota: QuotaState,
        header: RequestHeader,
        request: Any,
        body: Any,
        out: Output,
        floor: int,
    ) -> Output:
        """What to send for an encoded consumer Fetch response (`body`), its size recorded.
        Over the fetch quota or the request quota (`floor`, the connection already muted for
        it), as Kafka's getThrottledResponse: the size is taken back (no data goes out), the
        answer is the larger throttle time with no partitions, of the fetch session
        (`FetchSessionCache.throttled`: an incremental fetch keeps its session, a full one
        makes none), and the connection is muted for that time."""
        size = codec.total_length(out)
        now_ms = self.services.now_ms()
        throttle = self.quotas.record(quota, conn.attributes, header.client_id, size, now_ms)
        if not throttle and not floor:
            return out
        user = self.quotas.user_of(conn.attributes)
        quota.unrecord(user, header.client_id or "", size, now_ms)
        close_slices(out)
        if throttle > floor:
            conn.throttle(throttle)
        version, cid = header.request_api_version, header.correlation_id
        error, session_id = 0, 0
        if version >= 7:
            error, session_id = self.services.fetch_sessions.throttled(
                request.session_id, request.session_epoch, body.session_id, body.error_code
            )
        throttled = FetchResponse(
            throttle_time_ms=max(throttle, floor),
            error_code=error,
            session_id=session_id,
            responses=[],
        )
        return codec.encode_response(api_keys.FETCH, version, cid, throttled)

    def waiting_for_catch_up(self) -> bool:
        """True while requests are held until the initial catch-up."""
        return self.held is not None and not self.held.done()

    async def _when_caught_up(self, conn: Connection, frame: bytes) -> Output | None:
        assert self.held is not None
        await asyncio.shield(self.held)
        answer = self(conn, memoryview(frame))
        return await answer if isinstance(answer, Awaitable) else answer

    def _finish(
        self, key: int, version: int, correlation_id: int, pending: Pending, throttle: int = 0
    ) -> Later:
        """The response once `pending` completes (with `throttle` as its throttle time); if
        the connection closed first, its files are closed instead of sent."""

        def encode(body: Any) -> Output:
            if throttle and hasattr(body, "throttle_time_ms"):
                body.throttle_time_ms = throttle
            return codec.encode_response(key, version, correlation_id, body)

        return later_of(pending, encode)

    async def _forward(
        self,
        key: int,
        version: int,
        correlation_id: int,
        frame: bytes,
        ctx: RequestContext,
        request: Any,
    ) -> Output:
        """A metadata write off the active controller: the controller's answer, forwarded; if
        none comes in time, this node's own (NOT_CONTROLLER for each item)."""
        timeout_ms = int(
            getattr(request, "timeout_ms", 0)
            or FORWARD_DEFAULT_TIMEOUT_MS.get(key, FORWARD_TIMEOUT_MS)
        )
        answer = await self.forwarder.forward(
            frame,
            ctx.peer,
            min(max(timeout_ms, 1000), FORWARD_TIMEOUT_MS),
            principal_data.serialize(principal_of(ctx.connection)),
        )
        if answer is not None:
            return answer
        result = HANDLERS[key](ctx, request)
        body: Any = await future_of(result) if isinstance(result, Pending) else result
        return codec.encode_response(key, version, correlation_id, body)
