"""When each response of a connection left, for the request metrics (request_metrics.py; only
while `metrics.listener` is on). The measuring dispatcher gives each request a `Timing`; the
connection hands it here when the response joins its output queue (`queued`), and tells how
many bytes the socket has taken so far after each write (`sent`). A response has left once the
socket has taken every byte queued up to its own last one, so a byte count per response is all
that is kept, whatever the output holds (buffers, file slices, TLS records).

    response queue   ready -> its turn in the output queue: waiting for the responses of
                     earlier requests of the connection, which leave first (pipelining)
    response send    its turn -> its last byte taken by the socket (a slow or full socket,
                     the output queued before it)
    total            the frame read whole -> its last byte taken (no response: ready)
"""

from __future__ import annotations

from collections import deque
from typing import Any

_BUFFERS = (bytes, bytearray, memoryview)


class Timing:
    """One request's times (perf_counter seconds) and where its figures go (`counters`, a
    metrics.stats.RequestCounters)."""

    __slots__ = ("counters", "received_s", "ready_s")

    def __init__(self, counters: Any, received_s: float, ready_s: float) -> None:
        self.counters = counters
        self.received_s = received_s
        self.ready_s = ready_s  # 0.0 until a waiting request's response is ready

    def left(self, queued_s: float, sent_s: float) -> None:
        self.counters.left(
            (sent_s - self.received_s) * 1000.0,
            (queued_s - self.ready_s) * 1000.0,
            (sent_s - queued_s) * 1000.0,
        )


class ResponseTimer:
    """The responses of one connection in its output queue, with the byte count of the socket
    at which each will have left."""

    __slots__ = ("queued_bytes", "pending")

    def __init__(self, queued_bytes: int) -> None:
        self.queued_bytes = queued_bytes  # bytes ever put in the output queue
        self.pending: deque[tuple[int, Timing, float]] = deque()

    def queued(self, timing: Timing, output: list[Any], now_s: float) -> None:
        size = 0
        for item in output:  # buffers, and file slices (fd, position, length)
            size += len(item) if isinstance(item, _BUFFERS) else item.length
        if not size:
            timing.left(now_s, now_s)
            return
        self.queued_bytes += size
        self.pending.append((self.queued_bytes, timing, now_s))

    def sent(self, bytes_out: int, now_s: float) -> None:
        """The socket has taken `bytes_out` bytes in all: the responses within them left."""
        pending = self.pending
        while pending and pending[0][0] <= bytes_out:
            _, timing, queued_s = pending.popleft()
            timing.left(queued_s, now_s)
