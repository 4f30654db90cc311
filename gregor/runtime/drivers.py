"""The driver of one sans-I/O core: a timer and the sends, nothing decided here.

    driver = CoreDriver(core, send=controller_send(channel), clock=now_ms, name="alter-partition")
    driver.start()            # polls now; core.wakeup polls again on the next turn of the loop
    await driver.stop()       # no more polls; the sends in flight are cancelled

A core has `poll(now_ms) -> Poll`, `on_response(out, answer, now_ms)`,
`on_error(out, exc, now_ms)` and a `wakeup` attribute the driver sets (gregor/protocol/outbound.py).
The driver polls when woken and at the core's deadline, sends each request it returns as its own
task (over `send`, which the composition gives: a controller channel, a client to other nodes),
and hands the answer, or the failure, back with the time. A `send` with a `submit` (NodeSend)
is asked first: a request it takes is written at once and its answer comes back through a
callback, with no task, and polls the core again at once (the replica fetchers' Fetch per
record). What was sent, how many at
once, when to retry: all the core's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Protocol

from gregor.protocol.outbound import Outbound, Poll
from gregor.runtime.client import ClientError, Done, NetworkClient
from gregor.runtime.controller_channel import ControllerChannel
from gregor.runtime.inter_broker import InterBroker

log = logging.getLogger("gregor.drivers")

Send = Callable[[Outbound], Awaitable[Any]]
POLL_FAILED_RETRY_MS = 1000


class Core(Protocol):
    wakeup: Callable[[], None]

    def poll(self, now_ms: int) -> Poll: ...

    def on_response(self, out: Outbound, answer: Any, now_ms: int) -> None: ...

    def on_error(self, out: Outbound, error: Exception, now_ms: int) -> None: ...


def controller_send(channel: ControllerChannel) -> Send:
    """Send to the active controller (NoControllerError, a ClientError, when none is known)."""

    def send(out: Outbound) -> Awaitable[Any]:
        return channel.send(out.api_key, out.version, out.body, out.timeout_ms)

    return send


class NodeSend:
    """Send to `out.destination` at `out.address` (the core read it from the metadata).

    `submit` is the lighter path the driver takes first: written at once on an open
    connection, the answer handed to a callback, no task per request."""

    def __init__(self, client: NetworkClient) -> None:
        self.client = client

    def __call__(self, out: Outbound) -> Awaitable[Any]:
        assert out.destination is not None and out.address is not None
        self.client.set_endpoint(out.destination, *out.address)
        return self.client.send(out.destination, out.api_key, out.version, out.body, out.timeout_ms)

    def submit(self, out: Outbound, done: Done) -> bool:
        """Sent now, `done` called with the answer; False when it must go through `__call__`
        (no connection open and ready yet)."""
        assert out.destination is not None and out.address is not None
        client = self.client
        client.set_endpoint(out.destination, *out.address)
        return client.submit(
            out.destination, out.api_key, out.version, out.body, out.timeout_ms, done
        )


def node_send(client: NetworkClient) -> NodeSend:
    return NodeSend(client)


def links_send(links: InterBroker) -> Send:
    """Send to broker `out.destination` over the inter-broker links (its endpoint set there)."""

    def send(out: Outbound) -> Awaitable[Any]:
        assert out.destination is not None
        return links.send(out.destination, out.api_key, out.version, out.body)

    return send


class CoreDriver:
    def __init__(
        self,
        core: Any,
        send: Send,
        clock: Callable[[], int],
        *,
        name: str,
        spawn: Callable[[Coroutine[Any, Any, None]], None] | None = None,
        close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`spawn`: who runs the sends (InterBroker.spawn, so closing it ends them); the
        driver's own tasks when None. `close`: what `stop` closes last (the channel)."""
        self.core = core
        self._close = close
        self.send = send
        self.clock = clock
        self.name = name
        self._spawn = spawn
        # the lighter path of a send that has one (not under a spawner, whose close ends sends)
        self._submit = getattr(send, "submit", None) if spawn is None else None
        self._tasks: set[asyncio.Task[None]] = set()
        self._scheduled = False
        self._polling = False  # in _poll: an answer met meanwhile polls on the next turn
        self._timer: asyncio.TimerHandle | None = None
        self._started = False
        self._stopped = False
        core.wakeup = self.wakeup

    def start(self) -> None:
        self._started = True
        self.wakeup()

    def wakeup(self) -> None:
        """Poll the core on the next turn of the event loop (once, however often woken).
        Before `start` nothing is polled: the start polls. With no event loop running (a
        core used outside serving) nothing is either."""
        if not self._started or self._stopped or self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._scheduled = True
        loop.call_soon(self._poll)

    def _poll(self, now: int | None = None) -> None:
        """Poll the core (at `now`, the time an answer was just handed over at, or the
        clock's) and send what it asks."""
        self._scheduled = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._stopped:
            return
        self._polling = True
        try:
            self._poll_and_send(self.clock() if now is None else now)
        finally:
            self._polling = False

    def _poll_and_send(self, now: int) -> None:
        try:
            result = self.core.poll(now)
        except Exception:
            log.exception("%s: poll failed", self.name)
            result = Poll([], now + POLL_FAILED_RETRY_MS)
        submit = self._submit
        for out in result.outbound:
            if submit is not None and submit(out, partial(self._answered, out)):
                continue  # sent; its answer comes to _answered, with no task
            self._run(self._exchange(out))
        if result.next_deadline_ms is not None and not self._scheduled:
            delay_s = max(0, result.next_deadline_ms - self.clock()) / 1000.0
            self._timer = asyncio.get_running_loop().call_later(delay_s, self._poll)

    def _run(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._spawn is not None:
            self._spawn(coro)
            return
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _exchange(self, out: Outbound) -> None:
        try:
            answer = await self.send(out)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a ClientError mostly; the core decides
            if not isinstance(exc, ClientError):
                log.exception("%s: sending failed", self.name)
            self._feed(self.core.on_error, out, exc)
        else:
            self._feed(self.core.on_response, out, answer)
        self.wakeup()

    def _answered(self, out: Outbound, answer: Any, error: BaseException | None) -> None:
        """The answer to a request sent by `submit` (ignored once stopped, as a cancelled
        exchange's would be)."""
        if self._stopped:
            return
        if error is None:
            now = self._feed(self.core.on_response, out, answer)
        else:
            exc = error if isinstance(error, Exception) else ClientError(str(error))
            now = self._feed(self.core.on_error, out, exc)
        if self._polling or self._scheduled:
            self.wakeup()
        else:
            self._poll(now)  # at once: the next request goes out in this turn of the loop

    def _feed(self, handler: Callable[[Outbound, Any, int], None], out: Outbound, arg: Any) -> int:
        """Hand the answer over; the time it was handed over at."""
        now = self.clock()
        try:
            handler(out, arg, now)
        except Exception:
            log.exception("%s: handling an answer failed", self.name)
        return now

    async def stop(self) -> None:
        """No more polls; the sends still in flight are cancelled; the channel is closed."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._close is not None:
            await self._close()
