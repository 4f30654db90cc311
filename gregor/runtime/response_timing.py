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

A request's instants go to its counters as they are, once its response has left; the
differences are taken when they are folded into histograms (metrics/stats.py), many at a
time, off the path of each response.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from gregor.metrics.stats import FOLD_AT

# A request's instants (perf_counter seconds), in a list, the cheapest mutable record:
# [counters (its metrics.stats.RequestCounters), received, handler called, handler returned,
#  response ready (0.0 until then), its turn in the output, sent]
Timing = list[Any]
_BUFFERS = (bytes, bytearray, memoryview)


def _size(output: list[Any]) -> int:
    try:
        return sum(map(len, output))  # buffers, and file slices that know their length
    except TypeError:  # a slice with `length` only
        return sum(len(i) if isinstance(i, _BUFFERS) else i.length for i in output)


def left(timing: Timing, queued_s: float, sent_s: float) -> None:
    timing[5] = queued_s
    timing[6] = sent_s
    counters = timing[0]
    done = counters.done
    done.append(timing)
    if len(done) >= FOLD_AT:
        counters.fold()


class ResponseTimer:
    """The responses of one connection in its output queue. Most leave with the write that
    follows their queueing, the whole output taken by the socket: nothing is counted then but
    the responses. Only after a write the socket took part of is each response given the byte
    count at which it will have left (`pending`)."""

    __slots__ = ("queued_bytes", "moved", "pending")

    def __init__(self, queued_bytes: int) -> None:
        self.queued_bytes = queued_bytes  # bytes queued before the responses in `pending`
        self.moved: list[tuple[Timing, float, list[Any]]] = []  # queued since the last write
        self.pending: deque[tuple[int, Timing, float]] = deque()

    def queued(self, timing: Timing, output: list[Any] | None, now_s: float) -> None:
        if output:
            self.moved.append((timing, now_s, output))
        else:  # no response: done
            left(timing, now_s, now_s)

    def sent(self, bytes_out: int, now_s: float, all_sent: bool) -> None:
        """A write ended: the socket has taken `bytes_out` bytes in all, the whole output if
        `all_sent`; the responses within them left."""
        moved, pending = self.moved, self.pending
        if all_sent:
            while pending:
                _, timing, queued_s = pending.popleft()
                left(timing, queued_s, now_s)
            for timing, queued_s, _ in moved:
                timing[5] = queued_s
                timing[6] = now_s
                done = timing[0].done
                done.append(timing)
                if len(done) >= FOLD_AT:
                    timing[0].fold()
            moved.clear()
            self.queued_bytes = bytes_out
            return
        for timing, queued_s, output in moved:
            self.queued_bytes += _size(output)
            pending.append((self.queued_bytes, timing, queued_s))
        moved.clear()
        while pending and pending[0][0] <= bytes_out:
            _, timing, queued_s = pending.popleft()
            left(timing, queued_s, now_s)
