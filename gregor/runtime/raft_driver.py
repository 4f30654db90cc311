"""Runs one RaftNode on the event loop: its timer, its network, and its committed entries.

    driver = RaftDriver(node_id, log, store, config=config, on_commit=apply)
    port = await driver.bind("127.0.0.1", 0)        # the controller listener
    await driver.start(parse_voters("1@h:9093,2@h:9094,3@h:9095"))
    offset = await driver.append([b"record"])        # on the leader; NotLeader elsewhere
    await driver.stop()

Every call into the node (`receive`, `poll`, `append`) happens on the loop's thread, one at a
time, and what it returns is applied at once (`_apply`): the timer is re-armed for
`Effects.next_deadline_ms`, requests go out through a `NetworkClient` to the destination's
endpoint (their responses come back into `receive` when they arrive; a request that fails is
reported with `request_failed`, and the core backs off that node), responses are handed to the inbound request waiting for
them, and committed entries, a snapshot to load and leader changes go to the callbacks.

The listener serves ApiVersions and the KRaft RPCs only: Vote, BeginQuorumEpoch,
EndQuorumEpoch, Fetch for `__cluster_metadata-0`, FetchSnapshot and DescribeQuorum (wire.py
maps them). An inbound request gets a driver-local correlation id for the core, which answers
with `Send(source, response)`; the source is the node the request names (wire.request_source).
It is handled in the turn it is read, with no task: the answer the node gives at once is
returned encoded, for the connection to write in that turn; a Fetch the node parks (nothing
new yet) gets a `Later`, completed with the encoded answer in the turn the node gives it (a
leader's append wakes its followers' Fetches). One the node has not answered within the
request timeout and the fetch wait closes its connection, as a dead node would. Requests
that arrive before `start` wait for it. `handlers` adds APIs the controller listener
also serves (the broker gives BrokerRegistration and BrokerHeartbeat): api key -> an async
function of (version, decoded request) returning the response body. Anything else closes the
connection. A Fetch answer (v16+) names where the leader it reports listens, from
`controller.quorum.voters`, so that observers knowing only bootstrap servers can reach it.

An observer (a broker-only node: `node_id` not among the voters) never binds a listener: it
only makes requests. `start(voters, bootstrap=[(host, port), ...])` gives it the bootstrap
servers (`controller.quorum.bootstrap.servers`), which it addresses as nodes -2, -3, ... (as
Kafka does) until a Fetch answer names the leader and where it listens (`endpoint(id)`); with
no bootstrap servers it asks the voters. Voters may then be empty.

Flushes of the log leave the event loop: the node runs with `async_flush=True`, and an
`Effects.flush` is handed to the kernel as Linux AIO fsyncs (aio_fsync.py; its completion is
an eventfd the loop reads), or where the kernel offers none done on the driver's own flush
thread (`begin_flush` of the log: the fsync there); the flushed offset is moved back on the
loop and reported with `node.flushed`. So the loop serves requests, replays commits and
answers fetches while the disk syncs, and appends made meanwhile share the next fsync. A log
without `begin_flush` is flushed inline.

Time is the monotonic clock in milliseconds unless a clock is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from gregor.protocol import api_keys, codec, errors
from gregor.protocol.exceptions import UnsupportedVersionError
from gregor.raft import messages as m
from gregor.raft import wire
from gregor.raft.config import RaftConfig
from gregor.raft.log import RaftLog
from gregor.raft.node import Effects, Entry, LeaderAndEpoch, LoadSnapshot, NotLeader, RaftNode
from gregor.raft.storage_log import fsync_and_close
from gregor.raft.store import QuorumStateStore
from gregor.runtime.aio_fsync import AioFsync
from gregor.runtime.client import ClientError, ClientSecurity, NetworkClient
from gregor.runtime.connection import (
    Connection,
    Dispatcher,
    FrameError,
    Later,
    Output,
    after_dispatch_writes,
    write_deferred_now,
)
from gregor.runtime.connection_quotas import ConnectionQuotas
from gregor.runtime.flush_thread import FlushThread
from gregor.runtime.server import Server

log = logging.getLogger("gregor.raft_driver")

MAX_TIMER_S = 60.0  # re-poll at least this often (a deadline of NEVER)
BOOTSTRAP_FIRST_ID = -2  # bootstrap servers are nodes -2, -3, ... (-1 means "no node")
LISTENER_APIS = (*sorted(wire.RAFT_APIS), api_keys.API_VERSIONS)
# (version, request, the connection it came on: its principal for authorization) -> response
ListenerHandler = Callable[[int, Any, Connection], Awaitable[Any]]


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """`controller.quorum.voters`: "1@host:port,2@host:port" -> {1: ("host", port), ...}."""
    voters: dict[int, tuple[str, int]] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        node, sep, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not node.strip().isdigit() or not port.isdigit():
            raise ValueError(f"controller.quorum.voters: expected id@host:port, got {item!r}")
        node_id = int(node)
        if node_id in voters:
            raise ValueError(f"controller.quorum.voters: node {node_id} named twice")
        voters[node_id] = (host.strip("[]"), int(port))
    if not voters:
        raise ValueError("controller.quorum.voters: no voters")
    return voters


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class RaftDriver:
    def __init__(
        self,
        node_id: int,
        log: RaftLog,
        store: QuorumStateStore,
        *,
        config: RaftConfig | None = None,
        cluster_id: str | None = None,
        on_commit: Callable[[list[Entry]], None] | None = None,
        on_snapshot: Callable[[LoadSnapshot], None] | None = None,
        on_leader_change: Callable[[LeaderAndEpoch], None] | None = None,
        clock: Callable[[], int] = monotonic_ms,
        rng: random.Random | None = None,
        handlers: Mapping[int, ListenerHandler] | None = None,
        tls: ssl.SSLContext | None = None,
        on_secure: Callable[[Connection], None] | None = None,
        wrap: Callable[[Dispatcher], Dispatcher] | None = None,
        client_security: ClientSecurity | None = None,
        quotas: ConnectionQuotas | None = None,
        listener: str = "",
    ) -> None:
        """`tls`, `on_secure`, `wrap`: the controller listener's security (TLS, the principal of
        a TLS client, the SASL exchange in front of its dispatcher); `client_security`: how
        this node connects to the other controllers; `quotas`: the controller listener's own
        connection counts and limits, it counted as `listener` (none without)."""
        self.node_id = node_id
        self.handlers = dict(handlers or {})
        self._tls, self._on_secure = tls, on_secure
        self.wrap = wrap  # may be replaced before `bind` (the listener's authorization)
        self.client_security = client_security
        self.quotas, self.listener = quotas, listener
        self.log = log
        self.store = store
        self.config = config or RaftConfig()
        self.cluster_id = cluster_id
        self.on_commit = on_commit
        self.on_snapshot = on_snapshot
        self.on_leader_change = on_leader_change
        self.clock = clock
        self.rng = rng or random.Random()
        self.node: RaftNode | None = None
        self.voters: dict[int, tuple[str, int]] = {}
        self.endpoints: dict[int, tuple[str, int]] = {}  # every node id we can address
        self.server: Server | None = None
        self.client: NetworkClient | None = None
        self._started = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms = 0  # when `_timer` fires, on `clock`
        # The node's next deadline as of the last Effects applied: nothing in it is due before
        # (the node changes only in the calls whose Effects `_apply` takes), so a timer that
        # fires earlier, set for a deadline that has since moved on, need not poll it.
        self._deadline_ms = 0
        # (source, local id) -> an inbound request the node has not answered, in arrival order
        self._inbound: dict[tuple[int, int], _Inbound] = {}
        self._next_inbound_id = 0
        self._expiry: asyncio.TimerHandle | None = None  # for the oldest parked request
        self._tasks: set[asyncio.Future[Any]] = set()
        self._stopped = False
        self._flusher: FlushThread | None = None
        self._aio: AioFsync | None = None
        self._aio_tried = False
        self.aio_fsync = True  # False: always the flush thread
        self._flushing = False  # a flush submitted and not yet reported
        self._after_flush: list[Callable[[], object]] = []
        self._deferred: list[Entry] = []  # committed, for on_commit after the flush (_commit)
        self._appending = False  # inside `append`: a flush asked for waits for its writes only
        self._held_flush: Callable[[], object] | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    async def bind(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Open the controller listener; the port it got."""
        dispatch: Dispatcher = self._dispatch
        if self.wrap is not None:
            dispatch = self.wrap(dispatch)
        self.server = Server(
            dispatch,
            host=host,
            port=port,
            tls=self._tls,
            on_secure=self._on_secure,
            quotas=self.quotas,
            listener=self.listener,
        )
        await self.server.start()
        return self.server.port

    async def start(
        self,
        voters: Mapping[int, tuple[str, int]],
        bootstrap: Sequence[tuple[str, int]] = (),
    ) -> None:
        """Create the node (voters are the keys; this node is an observer when not among them)
        and start its timer and network. `bootstrap`: where an observer looks for the leader."""
        is_voter = self.node_id in voters
        if is_voter and self.server is None:
            log.warning("raft %d: a voter without a listener (bind first)", self.node_id)
        self.voters = dict(voters)
        bootstrap_ids = {BOOTSTRAP_FIRST_ID - i: address for i, address in enumerate(bootstrap)}
        self.endpoints = {**bootstrap_ids, **self.voters}
        if not is_voter and not self.endpoints:
            raise ValueError(f"observer {self.node_id} has neither voters nor bootstrap servers")
        self.client = NetworkClient(
            {n: a for n, a in self.endpoints.items() if n != self.node_id},
            client_id=f"raft-{self.node_id}",
            request_timeout_ms=self.config.request_timeout_ms,
            connect_timeout_ms=self.config.request_timeout_ms,
            reconnect_backoff_ms=max(1, self.config.retry_backoff_ms),
            reconnect_backoff_max_ms=max(self.config.retry_backoff_ms, 1000),
            security=self.client_security,
        )
        self.node = RaftNode(
            self.node_id,
            sorted(voters),
            self.log,
            self.store,
            self.rng,
            self.clock(),
            self.config,
            self.cluster_id,
            bootstrap=sorted(bootstrap_ids, reverse=True),
            async_flush=True,
        )
        self._started.set()
        self._apply(self.node.poll(self.clock()))

    def endpoint(self, node_id: int) -> tuple[str, int] | None:
        """Where `node_id` listens (configured, or named by a leader's Fetch answer); None if
        unknown."""
        return self.endpoints.get(node_id)

    def _learn_endpoints(self, answer: Any) -> None:
        """Keep the endpoints a Fetch answer names, for nodes not configured as voters."""
        assert self.client is not None
        for node_id, address in wire.node_endpoints(answer).items():
            if node_id in self.voters or self.endpoints.get(node_id) == address:
                continue
            log.info("raft %d: node %d listens on %s:%d", self.node_id, node_id, *address)
            self.endpoints[node_id] = address
            self.client.set_endpoint(node_id, *address)

    async def stop(self, resign: bool = False) -> None:
        """Stop the timer, the listener and the client. `resign`: a leader first sends
        EndQuorumEpoch so the others elect a successor without waiting for a timeout."""
        if self._stopped:
            return
        if resign and self.node is not None and self.node.resign(self.clock()):
            self._apply(self.node.poll(self.clock()))
            await asyncio.sleep(0.05)  # let the EndQuorumEpoch requests leave
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        if self._expiry is not None:
            self._expiry.cancel()
        inbound, self._inbound = self._inbound, {}
        for pending in inbound.values():
            if pending.later is not None:  # no answer: the connection closes with the listener
                pending.later.set_result(None)
        for task in list(self._tasks):
            task.cancel()
        if self.server is not None:
            await self.server.stop(grace_s=0.1)
        if self.client is not None:
            await self.client.close()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        if self._flusher is not None:
            self._flusher.stop()  # a flush under way finishes before the close
        if self._aio is not None:
            self._aio.stop()
        close = getattr(self.log, "close", None)
        if close is not None:
            self.log.flush()
            close()

    # -- the node's API -------------------------------------------------------------------------

    def append(self, records: Sequence[bytes]) -> int | NotLeader:
        """Append on the leader; the offset of the last record (it commits later), or NotLeader.

        The Fetch answers the append completes (the followers' parked Fetches) are written at
        once, inside the dispatch of the request that appended: the other voters start their
        append and fsync while that request's handler builds its answer and the connection
        its other writes. This node's fsync starts right after those answers (`_flush`), not
        at the end of the dispatch: a commit needs it as much as a follower's Fetch, and on
        3 nodes it came last for about a third of the creations."""
        node = self._node()
        now = self.clock()
        result = node.append(records, now)
        self._appending = True
        try:
            self._apply(node.poll(now))
        finally:
            self._appending = False
            write_deferred_now()
            start, self._held_flush = self._held_flush, None
            if start is not None:
                start()
        return result

    def describe_quorum(self) -> m.DescribeQuorumResponse:
        return self._node().describe_quorum(self.clock())

    def _node(self) -> RaftNode:
        if self.node is None or self._stopped:
            raise RuntimeError(f"raft driver {self.node_id} is not running")
        return self.node

    # -- effects --------------------------------------------------------------------------------

    def _apply(self, effects: Effects) -> None:
        if self._stopped:
            return
        for send in effects.outbound:
            message = send.message
            if isinstance(message, m.REQUEST_TYPES):
                self._request(send.destination, message)
            else:
                pending = self._inbound.pop((send.destination, message.correlation_id), None)
                if pending is not None:
                    self._give(pending, message)
        if effects.flush is not None:
            self._flush(effects.flush)
        if effects.snapshot is not None or effects.leader_change is not None:
            self._replay_deferred()  # what was committed before, first
        if effects.snapshot is not None and self.on_snapshot is not None:
            self.on_snapshot(effects.snapshot)
        if effects.committed and self.on_commit is not None:
            self._commit(list(effects.committed))
        if effects.leader_change is not None and self.on_leader_change is not None:
            self.on_leader_change(effects.leader_change)
        self._deadline_ms = effects.next_deadline_ms
        if self._timer is None or effects.next_deadline_ms < self._timer_at_ms:
            self._arm_timer(effects.next_deadline_ms)

    def _commit(self, entries: list[Entry]) -> None:
        """Hand committed entries to `on_commit`; a follower with a flush under way hands them
        over once it is done and its acknowledging Fetch has gone out (in order, before any
        later ones): the leader waits for that Fetch, nobody for a follower's replay."""
        assert self.on_commit is not None
        node = self.node
        if self._deferred or (self._flushing and node is not None and not node.is_leader):
            if not self._deferred:
                self.after_flush(self._replay_deferred)
            self._deferred += entries
            return
        self.on_commit(entries)

    def _replay_deferred(self) -> None:
        entries, self._deferred = self._deferred, []
        if entries and self.on_commit is not None and not self._stopped:
            self.on_commit(entries)

    def _flush(self, offset: int) -> None:
        """Make the log durable below `offset` off the loop, then tell the node: by Linux AIO
        (aio_fsync.py: the kernel fsyncs, an eventfd tells the loop) where the kernel offers
        it, else on the flush thread (flush_thread.py: a queue, the fsync, one
        `call_soon_threadsafe`). Either starts once the answers the dispatch under way
        deferred are written (asked for in `append`: once the Fetch answers it completed are),
        the Fetch answers taking these records to the other voters among them: the kernel
        worker an AIO fsync wakes runs on this CPU ahead of this thread, and the flush thread
        takes the GIL back at this thread's first system call."""
        loop = asyncio.get_running_loop()
        begin = getattr(self.log, "begin_flush", None)
        if begin is None:
            self.log.flush(offset)
            loop.call_soon(self._flushed, offset)
            return
        self._flushing = True
        aio = self._aio_fsync(loop)
        begin_fds = getattr(self.log, "begin_flush_fds", None)
        if aio is not None and begin_fds is not None:
            fds, done = begin_fds(offset)
            finished = self._finisher(offset, done)
            self._after_writes(partial(self._start_aio, aio, fds, finished))
            return
        sync, done = begin(offset)
        self._after_writes(partial(self._thread().submit, sync, self._finisher(offset, done)))

    def _after_writes(self, start: Callable[[], object]) -> None:
        """`start` the flush once the answers written before it are: inside `append`, those
        its append completed (it starts it); else those of the dispatch under way."""
        if self._appending:
            assert self._held_flush is None, "one flush in flight at a time"
            self._held_flush = start
        else:
            after_dispatch_writes(start)

    def _finisher(self, offset: int, done: Callable[[], None]) -> Callable[..., None]:
        def finished(exc: BaseException | None) -> None:
            if exc is not None:
                # Kafka stops on a failed metadata log write; here the node waits for a flush
                # that never completes (it stops acknowledging and committing) and says why.
                log.error("raft %d: flushing the metadata log failed: %s", self.node_id, exc)
                self._flushing = False
                self._run_after_flush()  # the replay and hosting held for it need no fsync
                return
            done()
            self._flushed(offset)

        return finished

    def _start_aio(self, aio: AioFsync, fds: list[int], finished: Callable[..., None]) -> None:
        if aio.submit(fds, finished):
            return
        if self._stopped:  # stopped meanwhile: made durable here, and nobody is told
            fsync_and_close(fds)
        else:  # refused by the kernel: fsynced on the thread
            self._thread().submit(partial(fsync_and_close, fds), finished)

    def _thread(self) -> FlushThread:
        if self._flusher is None:
            self._flusher = FlushThread(asyncio.get_running_loop(), f"raft-{self.node_id}-flush")
        return self._flusher

    def _aio_fsync(self, loop: asyncio.AbstractEventLoop) -> AioFsync | None:
        if self._aio is None and not self._aio_tried:
            self._aio_tried = True
            self._aio = AioFsync.open(loop) if self.aio_fsync else None
        return self._aio

    def _flushed(self, offset: int) -> None:
        self._flushing = False
        if self.node is not None and not self._stopped:
            self._apply(self.node.flushed(self.clock(), offset))
        self._run_after_flush()

    def _run_after_flush(self) -> None:
        later, self._after_flush = self._after_flush, []
        loop = asyncio.get_running_loop()
        for callback in later:
            loop.call_soon(callback)

    def after_flush(self, callback: Callable[[], object]) -> None:
        """Run `callback` at a later turn of the loop, once the metadata log's flush under way
        (if any) is done and what it lets the node send has gone out: work that can wait (a
        broker creating the partitions of what it just replayed) stays behind the fsync, the
        follower's acknowledging Fetch and the leader's commit, which the other nodes and the
        clients wait for. The thread that fsyncs needs the GIL the loop's thread holds while
        it runs Python, so a loop kept busy keeps the fsync waiting."""
        if self._flushing and not self._stopped:
            self._after_flush.append(callback)
        else:
            asyncio.get_running_loop().call_soon(callback)

    def _arm_timer(self, deadline_ms: int) -> None:
        """Poll the node at `deadline_ms`. A timer already set for no later is kept: an early
        poll finds nothing due and sets the next one, and most deadlines only move later (each
        Fetch pushes a follower's fetch timeout and a leader's parked Fetches on)."""
        if self._timer is not None:
            if self._timer_at_ms <= deadline_ms:
                return
            self._timer.cancel()
        now = self.clock()
        delay_ms = min(max(0, deadline_ms - now), int(MAX_TIMER_S * 1000))
        self._timer_at_ms = now + delay_ms
        self._timer = asyncio.get_running_loop().call_later(delay_ms / 1000, self._on_timer)

    def _on_timer(self) -> None:
        """Poll the node when its deadline has come. A timer set for an earlier deadline that
        has moved on since (a parked Fetch answered by an append before its high-watermark
        linger ran out, the usual case while writes follow each other) is set again for the
        deadline instead: an early poll would find nothing due. A far deadline still gets its
        poll every MAX_TIMER_S."""
        self._timer = None
        if self.node is None or self._stopped:
            return
        now = self.clock()
        if now < self._deadline_ms <= now + MAX_TIMER_S * 1000:
            self._arm_timer(self._deadline_ms)
            return
        self._apply(self.node.poll(now))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _request(self, destination: int, request: m.Request) -> None:
        """Send `request`: written now on an open connection, its answer handled as it is read
        (no task); else in a task that opens the connection first."""
        assert self.client is not None
        key, version, body = wire.to_request(request)

        def done(answer: Any, exc: BaseException | None) -> None:
            if exc is None:
                self._answered(destination, request, key, version, answer, None)
            else:  # maybe inside `submit` (a failed write): told after the effects in hand
                asyncio.get_running_loop().call_soon(
                    self._answered, destination, request, key, version, None, exc
                )

        if not self.client.submit(destination, key, version, body, None, done):
            self._spawn(self._exchange(destination, request, key, version, body))

    async def _exchange(
        self, destination: int, request: m.Request, key: int, version: int, body: Any
    ) -> None:
        assert self.client is not None
        try:
            answer = await self.client.send(destination, key, version, body)
        except (ClientError, KeyError) as e:
            self._answered(destination, request, key, version, None, e)
            return
        self._answered(destination, request, key, version, answer, None)

    def _answered(
        self,
        destination: int,
        request: m.Request,
        key: int,
        version: int,
        answer: Any,
        exc: BaseException | None,
    ) -> None:
        """The answer to a request to another node (or why there is none) into the node."""
        if exc is None:
            try:
                if key == api_keys.FETCH:
                    self._learn_endpoints(answer)
                response = wire.from_response(key, version, answer, request.correlation_id)
            except (KeyError, wire.WireError) as e:
                exc = e
        if self.node is None or self._stopped:
            return
        if exc is not None:
            log.debug("raft %d -> %d %s: %s", self.node_id, destination, api_keys.name_of(key), exc)
            self._apply(self.node.request_failed(self.clock(), destination, request.correlation_id))
            return
        self._apply(self.node.receive(self.clock(), destination, response))

    # -- the listener ---------------------------------------------------------------------------

    def _dispatch(self, conn: Connection, frame: memoryview) -> Output | Any:
        try:
            header, body = codec.decode_request(frame)
        except UnsupportedVersionError as e:
            if e.header.request_api_key == api_keys.API_VERSIONS:
                fallback = _api_versions_body(errors.UNSUPPORTED_VERSION)
                return codec.encode_response(
                    api_keys.API_VERSIONS, 0, e.header.correlation_id, fallback
                )
            raise FrameError(str(e)) from e
        key, version = header.request_api_key, header.request_api_version
        if key == api_keys.API_VERSIONS:
            body = _api_versions_body(extra=self.handlers)
            return codec.encode_response(key, version, header.correlation_id, body)
        if key in self.handlers:
            return self._serve(conn, key, version, header.correlation_id, body)
        if key not in wire.RAFT_APIS:
            raise FrameError(f"{api_keys.name_of(key)} is not served on the controller listener")
        if not self._started.is_set():
            return self._answer_started(key, version, header.correlation_id, body)
        return self._answer(key, version, header.correlation_id, body)

    async def _serve(
        self, conn: Connection, key: int, version: int, correlation_id: int, body: Any
    ) -> Output:
        await self._started.wait()
        if self._stopped:
            raise FrameError(f"raft driver {self.node_id} is stopping")
        answer = await self.handlers[key](version, body, conn)
        return codec.encode_response(key, version, correlation_id, answer)

    async def _answer_started(
        self, key: int, version: int, correlation_id: int, body: Any
    ) -> Output | None:
        """A KRaft request read before `start`: handled once the node runs."""
        await self._started.wait()
        output = self._answer(key, version, correlation_id, body)
        if isinstance(output, Later):
            return await output
        return output

    def _answer(self, key: int, version: int, correlation_id: int, body: Any) -> Output | Later:
        """A KRaft request, in the turn it is read: the node's answer encoded, or a `Later`
        for one the node parks (`_give` completes it)."""
        if self._stopped:
            # A request that arrived while stopping: close that connection, as a dead node would.
            raise FrameError(f"raft driver {self.node_id} is stopping")
        node = self._node()
        local_id = self._next_inbound_id
        self._next_inbound_id += 1
        try:
            request = wire.from_request(key, version, body, local_id)
        except wire.WireError as e:
            raise FrameError(str(e)) from e
        if isinstance(request, m.DescribeQuorumRequest):
            return self._encode(key, version, correlation_id, node.describe_quorum(self.clock()))
        source = wire.request_source(request)
        assert source is not None
        pending = _Inbound(key, version, correlation_id)
        inbound = (source, local_id)
        self._inbound[inbound] = pending
        try:
            self._apply(node.receive(self.clock(), source, request))
        except BaseException:
            self._inbound.pop(inbound, None)
            raise
        response = pending.response
        if response is not None:  # answered at once (most are; a Fetch with nothing new waits)
            return self._encode(key, version, correlation_id, response)
        if self._stopped:
            raise FrameError(f"raft driver {self.node_id} is stopping")
        return self._park(pending)

    def _park(self, pending: _Inbound) -> Later:
        """A Later for a request the node answers later; closed at its deadline if it never
        does. Deadlines come in arrival order (one wait for all), so one timer serves them:
        set for the oldest, it closes what is due and is set again for the next."""
        later = pending.later = Later()
        loop = asyncio.get_running_loop()
        wait_ms = self.config.request_timeout_ms + self.config.fetch_max_wait_ms
        pending.expires = loop.time() + wait_ms / 1000
        if self._expiry is None:
            self._expiry = loop.call_at(pending.expires, self._expire)
        return later

    def _expire(self) -> None:
        """Close the requests the node has not answered by their deadline (`_park`)."""
        self._expiry = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        due = []
        for inbound, pending in self._inbound.items():
            if pending.expires > now:
                self._expiry = loop.call_at(pending.expires, self._expire)
                break
            due.append(inbound)
        wait_ms = self.config.request_timeout_ms + self.config.fetch_max_wait_ms
        for inbound in due:
            later = self._inbound.pop(inbound).later
            assert later is not None
            later.set_exception(FrameError(f"raft {self.node_id}: no answer in {wait_ms} ms"))

    def _give(self, pending: _Inbound, response: m.Response) -> None:
        """The node's answer to an inbound request: kept for `_answer` to return (the request's
        own turn) or, encoded, to its Later (the connection writes it now)."""
        later = pending.later
        if later is None:
            pending.response = response
            return
        try:
            output = self._encode(pending.key, pending.version, pending.correlation_id, response)
        except Exception as exc:  # an answer that cannot be encoded closes the connection
            later.set_exception(exc)
            return
        later.set_result(output)

    def _encode(self, key: int, version: int, correlation_id: int, response: m.Response) -> Output:
        body = wire.to_response(response, version)
        if isinstance(response, m.FetchResponse) and response.leader_id in self.voters:
            wire.add_leader_endpoint(
                body, version, response.leader_id, *self.voters[response.leader_id]
            )
        return codec.encode_response(key, version, correlation_id, body)


class _Inbound:
    """An inbound request the node has not answered (yet): how to encode its answer, the answer
    given in the request's own turn, or the Later given to its connection and its deadline."""

    __slots__ = ("key", "version", "correlation_id", "response", "later", "expires")

    def __init__(self, key: int, version: int, correlation_id: int) -> None:
        self.key, self.version, self.correlation_id = key, version, correlation_id
        self.response: m.Response | None = None
        self.later: Later | None = None
        self.expires = 0.0  # on the loop's clock


def _api_versions_body(error_code: int = 0, extra: Mapping[int, Any] | None = None) -> Any:
    """ApiVersions listing only what this listener serves (also the v0 fallback, KIP-511)."""
    served = sorted({*LISTENER_APIS, *(extra or {})})
    cls: Any = codec.message_class(api_keys.API_VERSIONS, "response")
    row = cls.ApiVersion
    return cls(
        error_code=error_code,
        api_keys=[
            row(api_key=a.key, min_version=a.min_version, max_version=a.max_version)
            for a in (api_keys.BY_KEY[k] for k in served)
        ],
    )
