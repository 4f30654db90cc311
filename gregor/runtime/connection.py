"""One client connection: frames in, responses out, in request order, with zero-copy sends.

The socket is non-blocking and driven by the event loop's reader/writer callbacks rather than an
asyncio transport, because a transport cannot `sendfile` a slice of a segment between two
buffers of a response. Output is a queue of items: bytes-like buffers, sent with one `sendmsg`
per run of them (a response is never joined into one bytes), and file slices (anything with
`fd`, `position`, `length`), sent with `os.sendfile`. The runtime owns the fd of every file
slice it is given and closes it once sent, or when the connection dies.

Requests are pipelined: each complete frame gets a slot in `_slots` in arrival order and is
handed to the dispatcher at once. A slot is filled when its response is ready (at once, or when
an awaitable completes: a long-poll fetch, an acks=all produce) and responses leave strictly
from the head, so they go out in request order whatever order they complete in.

TLS (`tls`, a server SSLContext): the socket is wrapped and its handshake driven by the same
callbacks before the first read; `on_secure` then sees the connection (the peer's certificate).
`sendmsg` and `sendfile` cannot go through an SSL object, so on TLS the output is copied into
records of up to `_TLS_WRITE` bytes (file slices read with `pread`) and each is written whole,
retried unchanged after a would-block as OpenSSL requires. Decrypted bytes OpenSSL holds beyond
one read are not signalled by the socket: they are read on the loop's next turn.

Limits: a frame above `socket.request.max.bytes` is logged and closes this connection only;
with `queued.max.requests` responses outstanding, reading pauses until they drain; with a
`MemoryPool` (`queued.max.request.bytes`), a frame is read only once the pool has memory for it;
the server closes connections idle for `connections.max.idle.ms`; `throttle(ms)` (a client
over its quota) reads and dispatches nothing for that time, frames already received included. Memory follows the bytes that
arrived, never a size prefix alone: see the receive buffer sizes below.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import mmap
import os
import socket
import ssl
import struct
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Protocol

from gregor.runtime.response_timing import ResponseTimer, Timing

log = logging.getLogger("gregor.connection")

_SIZE = struct.Struct(">i")
_IOV_MAX = 512
# Receive buffers (`_on_readable`). A chunk is allocated when a read needs one and is small at
# first. A receive that fills the chunk doubles the next one, up to _MAX_CHUNK, so a busy
# connection gets many frames per recv. One that has caught up (all read, all framed) lets its
# chunk go (with the last view of it) and takes a _MIN_CHUNK one at its next read: a connection
# between requests holds no receive buffer, so 1,000 idle ones cost about 3 MiB of heap (a 4 KiB
# chunk kept each doubled that; the 256 KiB they once got each, 250 MiB), for one small
# allocation per read that catches up.
_MIN_CHUNK = 4 * 1024
_MAX_CHUNK = 256 * 1024
# A frame larger than the chunk is received into a buffer of its own: a bytearray up to
# _WHOLE_FRAME_MAX (a produce of a 1 MiB batch, at the cost of one malloc), above it an
# anonymous private mmap, whose pages the kernel backs only as bytes are written into them.
# So a size prefix of 100 MB followed by nothing costs a page, not 100 MB, and the memory of
# a frame being received is at most max(2 MiB, the bytes that arrived).
# After such a frame the next read takes only the next size prefix: a client sending large
# frames usually sends another, which then goes straight into a buffer of its own rather than
# a chunk's worth of it being received into the chunk and copied over (a quarter of a 1 MiB
# produce), for one more recv when the next frame is small.
_WHOLE_FRAME_MAX = 2 * 1024 * 1024
_NO_CHUNK = memoryview(bytearray(0))
_TLS_WRITE = 256 * 1024  # bytes given to one SSL write (several TLS records)
# A connection closed after its last answer (`close_after_responses`) first sends FIN and drops
# what the client still sends, for up to this long, so the answer is read before the close: a
# close with unread input sends RST, and an RST makes the client's kernel discard an answer it
# has not read yet.
_LINGER_S = 1.0
# ... and sends that FIN this long after the answer: a client that reads the answer and the FIN
# in one go may drop the answer (kafka-python 3 does), so the answer is left to arrive alone.
_FIN_DELAY_S = 0.2

Output = list[Any]  # bytes-like buffers and file slices, in wire order


class _Deferred(threading.local):
    """The connections whose answers completed while another connection's receive was being
    dispatched (an acks=all write replicated by a follower's Fetch, a parked fetch woken by a
    produce): written once that dispatch ends, so the answers one event completes for one
    connection leave in one send. None outside a dispatch. Per thread: one event loop each."""

    waiting: list[Connection] | None = None
    after: list[Callable[[], object]] | None = None  # run once those writes are made


_DEFERRED = _Deferred()


def after_dispatch_writes(callback: Callable[[], object]) -> None:
    """`callback()` once the answers deferred by the dispatch under way are written; at once
    outside a dispatch. For work that would hold up those writes (a metadata log's fsync)."""
    deferred = _DEFERRED
    if deferred.waiting is None:
        callback()
    elif deferred.after is None:
        deferred.after = [callback]
    else:
        deferred.after.append(callback)


def write_deferred_now() -> None:
    """Write at once the answers the dispatch under way has deferred so far (it goes on
    deferring later ones): the answers a metadata commit completed leave before its replay."""
    deferred = _DEFERRED
    if deferred.waiting:
        waiting, deferred.waiting = deferred.waiting, []
        _write_waiting(waiting)


class Dispatcher(Protocol):
    def __call__(
        self, conn: Connection, frame: memoryview
    ) -> Output | Later | Awaitable[Output | None] | None:
        """Handle one request frame (a writable view, without its size prefix); None means
        "no response"; a Later or an awaitable, a response ready later."""


class FrameError(Exception):
    pass


_BUFFER_TYPES = frozenset({bytes, bytearray, memoryview})


def is_buffer(item: object) -> bool:
    return type(item) in _BUFFER_TYPES or isinstance(item, (bytes, bytearray, memoryview))


def close_slices(items: Output) -> None:
    for item in items:
        if not is_buffer(item):
            try:
                os.close(item.fd)
            except OSError:
                pass


class MemoryPool:
    """`queued.max.request.bytes`: the bytes of the requests being received and handled, over
    every connection of a listener; Kafka's SimpleMemoryPool as its broker uses it (non-strict).

    A frame takes its size when its size prefix has been read and gives it back when its
    handler returns. It is taken while any memory is left (`available > 0`), so a request larger
    than what is left still goes ahead, alone, and `available` dips below zero; a connection
    refused stops reading and waits. Waiters are woken in arrival order, through `schedule` (the
    loop's `call_soon`), never from inside the `release` that freed the memory; while any wait,
    newcomers queue behind them.
    """

    def __init__(self, capacity: int, schedule: Callable[[Callable[[], None]], object]) -> None:
        assert capacity > 0
        self.capacity = capacity
        self.available = capacity
        self._schedule = schedule
        self._waiters: dict[Callable[[], None], None] = {}  # an ordered set
        self._wake_pending = False
        self._waking = False

    def try_allocate(self, size: int) -> bool:
        if self.available <= 0 or (self._waiters and not self._waking):
            return False
        self.available -= size
        return True

    def release(self, size: int) -> None:
        self.available += size
        assert self.available <= self.capacity, "released more than was taken"
        if self._waiters and self.available > 0 and not self._wake_pending:
            self._wake_pending = True
            self._schedule(self._wake)

    def wait(self, wake: Callable[[], None]) -> None:
        self._waiters[wake] = None

    def forget(self, wake: Callable[[], None]) -> None:
        self._waiters.pop(wake, None)

    def _wake(self) -> None:
        self._wake_pending = False
        while self._waiters and self.available > 0:
            wake = next(iter(self._waiters))
            del self._waiters[wake]
            self._waking = True
            try:
                wake()
            finally:
                self._waking = False


class Later:
    """An answer that is ready later, handed to its connection the moment it is: the callbacks
    run inside `set_result` / `set_exception`, not on a later turn of the event loop as an
    asyncio future's do. An answer completed by an event (an acks=all write replicated, a
    long-poll fetch woken) is so written before the loop reads more requests: under load a
    turn of the loop holds many of them, and each waiting answer would queue behind them all.

    A dispatcher returns one for a request that waits; once done it stays done (a second
    completion is ignored)."""

    __slots__ = ("_callbacks", "_done", "_output", "_error")

    def __init__(self) -> None:
        self._callbacks: list[Callable[[Later], object]] = []
        self._done = False
        self._output: Output | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._done

    def result(self) -> Output | None:
        """The output (None: no response); raises what `set_exception` was given."""
        if self._error is not None:
            raise self._error
        return self._output

    def exception(self) -> BaseException | None:
        return self._error

    def set_result(self, output: Output | None) -> None:
        if not self._done:
            self._output = output
            self._finish()

    def set_exception(self, error: BaseException) -> None:
        if not self._done:
            self._error = error
            self._finish()

    def add_done_callback(self, callback: Callable[[Later], object]) -> None:
        """`callback(self)` once done: at once if it is."""
        if self._done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def __await__(self) -> Generator[Any, None, Output | None]:
        """Awaited (a request held, then dispatched from a coroutine): the output, through an
        asyncio future; cancelled first, the output's file slices are closed."""
        if not self._done:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def wake(later: Later) -> None:
                if fut.done():
                    if later._output:
                        close_slices(later._output)
                else:
                    fut.set_result(None)

            self.add_done_callback(wake)
            yield from fut.__await__()
        return self.result()

    def _finish(self) -> None:
        self._done = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)


class _Slot:
    __slots__ = ("output", "ready", "timing")

    def __init__(self) -> None:
        self.output: Output | None = None
        self.ready = False
        self.timing: Timing | None = None


def _write_deferred(deferred: _Deferred) -> None:
    """Write what the connections deferred while a dispatch ran (see _Deferred)."""
    waiting = deferred.waiting  # (read once: a thread-local's attributes cost a lookup each)
    while waiting:
        deferred.waiting = []
        _write_waiting(waiting)
        waiting = deferred.waiting
    deferred.waiting = None
    after = deferred.after
    if after is not None:
        deferred.after = None
        for callback in after:
            callback()


def _write_waiting(waiting: list[Connection]) -> None:
    for conn in waiting:
        conn._deferred = False
        if conn._out and not conn.closed:
            conn._write()


class Connection:
    # Slots: an idle connection is mostly this object (no dict of ~40 entries each).
    __slots__ = (
        "_after_big",
        "_big",
        "_big_filled",
        "_chunk",
        "_chunk_size",
        "_close_after",
        "_deferred",
        "_end",
        "_final_write",
        "_handshaking",
        "_in_read",
        "_linger",
        "_out",
        "_out_offset",
        "_reading",
        "_reserved",
        "_slots",
        "_start",
        "_tasks",
        "_tls_record",
        "_unmute",
        "_waiting_memory",
        "_writing",
        "attributes",
        "bytes_in",
        "bytes_out",
        "closed",
        "dispatch",
        "fd",
        "last_active_ms",
        "loop",
        "max_queued_requests",
        "max_request_bytes",
        "now_ms",
        "on_close",
        "on_secure",
        "peer",
        "pool",
        "received_s",
        "sock",
        "timer",
        "timing",
        "tls",
    )

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        dispatch: Dispatcher,
        *,
        max_request_bytes: int,
        max_queued_requests: int,
        on_close: Callable[[Connection], None],
        now_ms: Callable[[], int],
        pool: MemoryPool | None = None,
        tls: ssl.SSLContext | None = None,
        on_secure: Callable[[Connection], None] | None = None,
    ) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.loop = loop
        self.dispatch = dispatch
        self.max_request_bytes = max_request_bytes
        self.max_queued_requests = max_queued_requests
        self.on_close = on_close
        self.now_ms = now_ms
        self.pool = pool
        try:
            host, port = sock.getpeername()[:2]
            self.peer = f"{host}:{port}"
        except (OSError, ValueError):  # gone already, or not an address and port
            self.peer = "?"
        self.closed = False
        self.last_active_ms = now_ms()
        # Input: frames are views into a receive chunk that is only ever filled forward (see
        # `_on_readable`); a large frame gets a buffer of its own.
        self._chunk = _NO_CHUNK
        self._chunk_size = _MIN_CHUNK  # of the next chunk
        self._start = 0  # first byte not yet consumed
        self._end = 0  # first byte not yet received
        self._after_big = False  # the last frame was received into a buffer of its own
        self._big: bytearray | mmap.mmap | None = None  # a large frame, received directly
        self._big_filled = 0
        self._reserved = 0  # bytes of `pool` taken by the frame being received
        self._waiting_memory = False  # for `pool`: not reading until it wakes us
        self._reading = False
        self._in_read = False  # while frames of one receive are dispatched, writes wait
        self._deferred = False  # in _DEFERRED.waiting: written when the dispatch ends
        self._final_write = False
        # Output.
        self._slots: deque[_Slot] = deque()
        self._out: deque[Any] = deque()
        self._out_offset = 0  # bytes of the head item already sent
        self._writing = False
        self._tasks: set[asyncio.Future[Any]] = set()
        self.tls = tls
        self.on_secure = on_secure
        self._tls_record: memoryview | None = None  # being written; retried unchanged
        self._handshaking = False
        self._close_after: str | None = None  # close once the responses queued are sent
        self._linger: asyncio.TimerHandle | None = None  # set while lingering (see _LINGER_S)
        self._unmute: asyncio.TimerHandle | None = None  # set while throttled (a quota)
        # Per-connection state handlers may keep (client software name, fetch sessions...).
        self.attributes: dict[str, Any] = {}
        self.bytes_in = self.bytes_out = 0  # read and sent (the metrics' socket-server bytes)
        # Request metrics (response_timing.py), set by the measuring dispatcher: when the last
        # bytes were read, the timer of responses, and the timing of the request dispatched.
        self.timer: ResponseTimer | None = None
        self.received_s = 0.0
        self.timing: Timing | None = None

    # -- reading ------------------------------------------------------------------------------

    def start(self) -> None:
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is None:
            self._resume_reading()
            return
        try:
            self.sock = self.tls.wrap_socket(
                self.sock, server_side=True, do_handshake_on_connect=False
            )
        except (OSError, ValueError) as exc:
            self.close(f"TLS setup failed: {exc}")
            return
        self._handshaking = True
        self._handshake()

    def _handshake(self) -> None:
        """One step of the TLS handshake; reading starts once it is done."""
        assert isinstance(self.sock, ssl.SSLSocket)
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            self.loop.remove_writer(self.fd)
            self.loop.add_reader(self.fd, self._handshake)
            return
        except ssl.SSLWantWriteError:
            self.loop.remove_reader(self.fd)
            self.loop.add_writer(self.fd, self._handshake)
            return
        except (ssl.SSLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            self.close(f"TLS handshake failed: {reason}", error=True)
            return
        self.loop.remove_reader(self.fd)
        self.loop.remove_writer(self.fd)
        self._handshaking = False
        self.last_active_ms = self.now_ms()
        if self.on_secure is not None:
            try:
                self.on_secure(self)
            except ValueError as exc:  # no principal for this certificate
                self.close(f"TLS authentication failed: {exc}", error=True)
                return
        self._resume_reading()

    def _resume_reading(self) -> None:
        if (
            not self._reading
            and not self.closed
            and not self._waiting_memory
            and not self._handshaking
            and self._unmute is None
            and self._close_after is None
            and len(self._slots) < self.max_queued_requests
        ):
            self.loop.add_reader(self.fd, self._on_readable)
            self._reading = True
            self._maybe_pending()

    def _maybe_pending(self) -> None:
        """TLS: bytes OpenSSL decrypted beyond the last read make no fd readable: read them
        on the loop's next turn."""
        sock = self.sock
        if isinstance(sock, ssl.SSLSocket) and self._reading and not self.closed and sock.pending():
            self.loop.call_soon(self._on_pending)

    def _on_pending(self) -> None:
        if self._reading and not self.closed:
            self._on_readable()

    def _pause_reading(self) -> None:
        if self._reading:
            self.loop.remove_reader(self.fd)
            self._reading = False

    def _recv_into(self, view: memoryview) -> int:
        """Bytes received into `view`; 0 when there is nothing now or the connection ended
        (then it is closed)."""
        try:
            n = self.sock.recv_into(view)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return 0
        except OSError as exc:
            self.close(f"read failed: {exc}")
            return 0
        if n == 0:
            self.close(None)
            return 0
        self.last_active_ms = self.now_ms()
        self.bytes_in += n
        if self.timer is not None:
            self.received_s = time.perf_counter()
        return n

    def _on_readable(self) -> None:
        """Receive into the chunk and dispatch every whole frame as a view of it.

        Zero copies for a frame that arrives within one chunk: the request (and its records,
        which produce patches and writes) is a view of the bytes `recv_into` wrote. The chunk
        is never rewound, because views of frames already dispatched may still be alive (a
        request waiting for acks); when it is full, the unconsumed tail moves to a new chunk
        and the old one is freed with its last view.
        """
        if self._big is not None:
            self._read_big()
            self._maybe_pending()
            return
        if self._waiting_memory:
            return
        if self._end == len(self._chunk):
            self._new_chunk()
        room = len(self._chunk) - self._end
        if self._after_big and self._start == self._end:
            room, self._after_big = 4, False  # the size prefix alone (_WHOLE_FRAME_MAX)
        n = self._recv_into(self._chunk[self._end : self._end + room])
        if not n:
            return
        self._end += n
        if n == room and room >= self._chunk_size // 2:
            self._chunk_size = min(2 * self._chunk_size, _MAX_CHUNK)  # more may be waiting
        self._consume_received()
        if self._start == self._end and n < room:
            # Caught up: no chunk until the next read, which takes a small one; this one goes
            # with its frames' last views.
            self._chunk, self._start, self._end = _NO_CHUNK, 0, 0
            self._chunk_size = _MIN_CHUNK
        if self.tls is not None:
            self._maybe_pending()

    @property
    def receive_buffer_bytes(self) -> int:
        """Bytes of receive buffer this connection holds now (its chunk, a large frame's own)."""
        return len(self._chunk) + (len(self._big) if self._big is not None else 0)

    def _consume_received(self) -> None:
        deferred = _DEFERRED
        outer = deferred.waiting is None
        if outer:
            deferred.waiting = []
        self._in_read = True
        try:
            self._consume()
        except FrameError as exc:
            self.close(str(exc), error=True)
        finally:
            self._in_read = False
            if self._out and not self.closed:
                self._write()
            if outer:
                _write_deferred(deferred)

    def _new_chunk(self) -> None:
        """A fresh chunk of `_chunk_size` bytes holding the unconsumed tail of the old one."""
        chunk = memoryview(bytearray(self._chunk_size))
        left = self._end - self._start
        if left:
            chunk[:left] = self._chunk[self._start : self._end]
        self._chunk, self._start, self._end = chunk, 0, left

    def _consume(self) -> None:
        """Dispatch each whole frame received (each admitted by the pool first, if there is
        one), then make room for the partial frame after them."""
        chunk = self._chunk
        pos, end = self._start, self._end
        while end - pos >= 4 and self._unmute is None:
            (size,) = _SIZE.unpack_from(chunk, pos)
            if size < 0 or size > self.max_request_bytes:
                if self.tls is None and chunk[pos] == 0x16 and chunk[pos + 1] == 0x03:
                    raise FrameError("TLS handshake on a PLAINTEXT listener (a TLS ClientHello)")
                raise FrameError(
                    f"frame of {size} bytes is above socket.request.max.bytes "
                    f"{self.max_request_bytes}"
                    if size > 0
                    else f"frame has a negative size {size}"
                )
            if self.pool is not None and not self._admit(size):
                break
            if end - pos - 4 < size:
                break
            self._start = pos = pos + 4 + size
            self._on_frame(chunk[pos - size : pos])
            if self._reserved:
                self._release()
            if self.closed:
                return
        self._start = pos
        left = end - pos
        if self._waiting_memory or left < 4 or self._unmute is not None:
            if left and pos + 4 > len(chunk):
                self._new_chunk()
            return
        total = _SIZE.unpack_from(chunk, pos)[0] + 4
        if pos + total <= len(chunk):
            return  # the rest of the frame fits here
        if total <= self._chunk_size:
            self._new_chunk()
        else:
            self._start_big(total - 4, chunk[pos + 4 : end])
            self._start = self._end = end

    def _start_big(self, size: int, head: memoryview) -> None:
        buf: bytearray | mmap.mmap
        if size <= _WHOLE_FRAME_MAX:
            buf = bytearray(size)
        else:
            buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)  # anonymous: fd -1
        memoryview(buf)[: len(head)] = head
        self._big, self._big_filled = buf, len(head)

    def _read_big(self) -> None:
        buf = self._big
        assert buf is not None
        n = self._recv_into(memoryview(buf)[self._big_filled :])
        self._big_filled += n
        if n and self._big_filled == len(buf):
            self._big, self._after_big = None, True
            self._chunk, self._start, self._end = _NO_CHUNK, 0, 0  # all of it framed
            self._on_frame(memoryview(buf))
            self._release()
            if self._out and not self.closed:
                self._write()

    # -- client quotas ------------------------------------------------------------------------

    def throttle(self, delay_ms: int) -> None:
        """Mute this connection for `delay_ms` (a client over its quota, KIP-219): responses
        still go out; no request is read or dispatched until the time is up. A longer throttle
        while muted extends it."""
        if self.closed or delay_ms <= 0:
            return
        when = self.loop.time() + delay_ms / 1000
        if self._unmute is not None:
            if self._unmute.when() >= when:
                return
            self._unmute.cancel()
        self._pause_reading()
        self._unmute = self.loop.call_at(when, self._on_unmute)

    def _on_unmute(self) -> None:
        self._unmute = None
        if self.closed:
            return
        self._consume_received()
        self._resume_reading()

    # -- the memory pool (queued.max.request.bytes) ---------------------------------------------

    def _admit(self, size: int) -> bool:
        """Whether the frame whose size prefix was just read may be received: once the pool
        gives it `size` bytes; if it will not now, this connection stops reading and waits."""
        assert self.pool is not None
        if self._reserved or size == 0:
            return True
        if self.pool.try_allocate(size):
            self._reserved = size
            return True
        self._waiting_memory = True
        self._pause_reading()
        self.pool.wait(self._on_memory)
        return False

    def _release(self) -> None:
        if self._reserved:
            assert self.pool is not None
            reserved, self._reserved = self._reserved, 0
            self.pool.release(reserved)

    def _on_memory(self) -> None:
        """The pool has memory again: frames already received first, then reading again."""
        self._waiting_memory = False
        if self.closed:
            return
        self._consume_received()
        self._resume_reading()

    # -- requests and responses ---------------------------------------------------------------

    def _on_frame(self, frame: memoryview) -> None:
        try:
            result = self.dispatch(self, frame)
        except FrameError as exc:
            self.close(str(exc), error=True)
            return
        except Exception:
            log.exception("%s: request handling failed; closing the connection", self.peer)
            self.close("request handling failed", error=True)
            return
        if result is None:
            self._maybe_close_after()
            return
        if (
            type(result) is list
            and self._in_read  # written once the frames received are dispatched
            and not self._slots
            and self.timer is None
            and self._close_after is None
        ):  # an answer given at once with none ahead of it: no slot to wait in
            self._out.extend(result)
            return
        slot = _Slot()
        if self.timer is not None:
            slot.timing, self.timing = self.timing, None
        self._slots.append(slot)
        if isinstance(result, list):
            slot.output = result
            slot.ready = True
            self._drain_slots()
        elif isinstance(result, Later):
            result.add_done_callback(lambda later, s=slot: self._on_done(later, s))  # type: ignore[misc]
        else:
            fut = asyncio.ensure_future(result)
            self._tasks.add(fut)
            fut.add_done_callback(lambda f, s=slot: self._on_done(f, s))  # type: ignore[misc]
        if len(self._slots) >= self.max_queued_requests:
            self._pause_reading()

    def _on_done(self, fut: asyncio.Future[Any] | Later, slot: _Slot) -> None:
        cancelled = False
        if not isinstance(fut, Later):
            self._tasks.discard(fut)
            cancelled = fut.cancelled()
        if self.closed:
            if not cancelled and fut.exception() is None and fut.result():
                close_slices(fut.result())  # type: ignore[arg-type]
            return
        if cancelled:
            self.close("request cancelled")
            return
        exc = fut.exception()
        if isinstance(exc, FrameError):  # a request refused after the fact: no traceback
            self.close(str(exc), error=True)
            return
        if exc is not None:
            log.error("%s: request handling failed: %r", self.peer, exc, exc_info=exc)
            self.close("request handling failed", error=True)
            return
        output = fut.result()
        slot.output = output or []
        slot.ready = True
        self._drain_slots()

    def _drain_slots(self) -> None:
        moved = False
        timer, now_s = self.timer, 0.0
        while self._slots and self._slots[0].ready:
            slot = self._slots.popleft()
            if timer is not None and slot.timing is not None:
                now_s = now_s or time.perf_counter()
                timer.queued(slot.timing, slot.output, now_s)
            if slot.output:
                self._out.extend(slot.output)
                moved = True
        if moved and not self._in_read:
            waiting = _DEFERRED.waiting
            if waiting is None:
                self._write()
            elif not self._deferred:
                self._deferred = True
                waiting.append(self)
        if len(self._slots) < self.max_queued_requests:
            if not self._reading:
                self._resume_reading()
        if self._close_after is not None:
            self._maybe_close_after()

    def close_after_responses(self, reason: str) -> None:
        """Read no more; close once every response asked for (this request's too, when called
        while it is dispatched) has been sent: a failed authentication's answer goes out, then
        the connection closes."""
        self._close_after = reason
        self._pause_reading()

    def _maybe_close_after(self) -> None:
        if (
            self._close_after is not None
            and not self.closed
            and self._linger is None
            and not self._slots
            and not self._out
            and self._tls_record is None
        ):
            self._start_linger(self._close_after)

    def _start_linger(self, reason: str) -> None:
        """FIN after _FIN_DELAY_S, the close once the client closes too (or after _LINGER_S);
        what the client sends meanwhile is read and dropped."""
        self._linger = self.loop.call_later(_LINGER_S, self.close, reason)
        self.loop.call_later(_FIN_DELAY_S, self._fin, reason)
        self.loop.add_reader(self.fd, self._discard, reason)

    def _fin(self, reason: str) -> None:
        if self.closed:
            return
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close(reason)

    def _discard(self, reason: str) -> None:
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError:
            data = b""
        if not data:
            self.close(reason)

    # -- writing ------------------------------------------------------------------------------

    def _write(self) -> None:
        if self.tls is not None:
            self._write_tls()
            return
        out = self._out
        try:
            while out:
                head = out[0]
                if is_buffer(head):
                    batch, total = self._buffer_run(out)
                    if self._out_offset:
                        total -= self._out_offset
                        batch[0] = memoryview(batch[0])[self._out_offset :]
                    sent = self.sock.sendmsg(batch)
                    self.bytes_out += sent
                    if sent < total:
                        self._advance_buffers(sent)
                        break
                    if len(batch) == len(out):
                        out.clear()
                    else:
                        for _ in batch:
                            out.popleft()
                    self._out_offset = 0
                else:
                    remaining = head.length - self._out_offset
                    sent = os.sendfile(
                        self.fd, head.fd, head.position + self._out_offset, remaining
                    )
                    self.bytes_out += sent
                    if sent == 0:
                        raise FrameError(
                            f"segment file was truncated while sending ({remaining} bytes short)"
                        )
                    if sent < remaining:
                        self._out_offset += sent
                        break
                    out.popleft()
                    os.close(head.fd)
                    self._out_offset = 0
        except (BlockingIOError, InterruptedError):
            pass
        except FrameError as exc:
            self.close(str(exc), error=True)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.close(f"write failed: {exc}")
                return
        self._wait_writable(bool(out))

    @staticmethod
    def _buffer_run(out: deque[Any]) -> tuple[list[Any], int]:
        """The buffers at the head of `out` (up to _IOV_MAX, up to the first file slice) and
        their bytes: what one `sendmsg` takes."""
        batch: list[Any] = []
        total = 0
        kinds = _BUFFER_TYPES
        for item in out:
            if len(batch) >= _IOV_MAX or not (type(item) in kinds or is_buffer(item)):
                break
            batch.append(item)
            total += len(item)
        return batch, total

    def _wait_writable(self, more: bool) -> None:
        """Be called back when the socket can take more, while output is left."""
        timer = self.timer
        if timer is not None and (timer.moved or timer.pending):
            timer.sent(self.bytes_out, time.perf_counter(), self._bytes_ahead if more else None)
        if more and not self._writing:
            self.loop.add_writer(self.fd, self._write)
            self._writing = True
        elif not more and self._writing:
            self.loop.remove_writer(self.fd)
            self._writing = False
        if not more:
            self.last_active_ms = self.now_ms()
            if self._close_after is not None:
                self._maybe_close_after()

    def _bytes_ahead(self, last: Any) -> int | None:
        """Bytes the socket has still to take up to and including the output item `last`
        (request metrics: when a timed response will have left); None if it has taken it."""
        ahead = (len(self._tls_record) if self._tls_record is not None else 0) - self._out_offset
        for item in self._out:
            ahead += len(item) if is_buffer(item) else item.length
            if item is last:
                return ahead
        return None

    def _write_tls(self) -> None:
        """The output through the SSL object, one record of up to _TLS_WRITE bytes at a time."""
        try:
            while True:
                record = self._tls_record
                if record is None:
                    record = self._tls_record = self._next_tls_record()
                    if record is None:
                        break
                sent = self.sock.send(record)
                self.bytes_out += sent
                self._tls_record = record[sent:] if sent < len(record) else None
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError, InterruptedError):
            pass
        except FrameError as exc:
            self.close(str(exc), error=True)
            return
        except OSError as exc:
            self.close(f"write failed: {exc}")
            return
        self._wait_writable(self._tls_record is not None or bool(self._out))

    def _next_tls_record(self) -> memoryview | None:
        """Up to _TLS_WRITE bytes from the head of the output (file slices read by pread)."""
        out, parts, size = self._out, [], 0
        while out and size < _TLS_WRITE:
            head = out[0]
            if is_buffer(head):
                view = memoryview(head)[self._out_offset :]
                part = view[: _TLS_WRITE - size]
                if len(part) < len(view):
                    self._out_offset += len(part)
                else:
                    out.popleft()
                    self._out_offset = 0
            else:
                want = min(head.length - self._out_offset, _TLS_WRITE - size)
                part = memoryview(os.pread(head.fd, want, head.position + self._out_offset))
                if not part:
                    raise FrameError(f"segment file was truncated while sending ({want} short)")
                self._out_offset += len(part)
                if self._out_offset == head.length:
                    out.popleft()
                    os.close(head.fd)
                    self._out_offset = 0
            parts.append(part)
            size += len(part)
        return memoryview(b"".join(parts)) if parts else None

    def _advance_buffers(self, sent: int) -> None:
        """Drop fully sent buffers from the head; remember how far into the next one we got."""
        out = self._out
        sent += self._out_offset
        self._out_offset = 0
        while sent:
            n = len(out[0])
            if sent >= n:
                out.popleft()
                sent -= n
            else:
                self._out_offset = sent
                break

    @property
    def idle(self) -> bool:
        return not self._slots and not self._out and not self._tasks and self._tls_record is None

    # -- closing ------------------------------------------------------------------------------

    def close(self, reason: str | None, error: bool = False) -> None:
        if self.closed:
            return
        if (self._out or self._tls_record is not None) and not self._final_write:
            # Responses already complete go out first (best effort, without blocking): a bad
            # frame after good requests still lets their answers through.
            self._final_write = True
            self._in_read = False
            self._write()
            if self.closed:
                return
        self.closed = True
        if reason:
            (log.warning if error else log.info)(
                "closing connection from %s: %s", self.peer, reason
            )
        self._pause_reading()
        if self._unmute is not None:
            self._unmute.cancel()
            self._unmute = None
        if self._linger is not None:
            self._linger.cancel()
            self.loop.remove_reader(self.fd)
        if self._handshaking:
            self.loop.remove_reader(self.fd)
            self.loop.remove_writer(self.fd)
        self._release()
        if self.pool is not None:
            self.pool.forget(self._on_memory)
        self._chunk, self._big = _NO_CHUNK, None  # freed with the last views of their frames
        self._start = self._end = 0
        if self._writing:
            self.loop.remove_writer(self.fd)
            self._writing = False
        for fut in list(self._tasks):
            fut.cancel()
        close_slices(list(self._out))
        for slot in self._slots:
            if slot.output:
                close_slices(slot.output)
        self._out.clear()
        self._slots.clear()
        try:
            self.sock.close()
        except OSError:
            pass
        self.on_close(self)
