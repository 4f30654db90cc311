"""When each response of a connection left, for the request metrics (request_metrics.py; only
while `metrics.listener` is on). The measuring dispatcher gives each request a `Timing`; the
connection hands it here when the response joins its output queue (`queued`), and tells after
each write how many bytes the socket has taken in all (`sent`). A response has left once the
socket has taken every byte up to its own last one, whatever the output holds (buffers, file
slices, TLS records) and whichever responses around it are not timed.

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
from collections.abc import Callable
from typing import Any

from gregor.metrics.stats import FOLD_AT

# A request's instants (perf_counter seconds), in a list, the cheapest mutable record:
# [counters (its metrics.stats.RequestCounters), received, handler called, handler returned,
#  response ready (0.0 until then), its turn in the output, sent]
Timing = list[Any]


def left(timing: Timing, queued_s: float, sent_s: float) -> None:
    timing[5] = queued_s
    timing[6] = sent_s
    counters = timing[0]
    done = counters.done
    done.append(timing)
    if len(done) >= FOLD_AT:
        counters.fold()


class ResponseTimer:
    """The timed responses of one connection in its output queue. Most leave with the write
    that follows their queueing, the whole output taken by the socket: nothing is counted then.
    After a write the socket took part of, each is given the byte count of the socket at which
    it will have left (`pending`), from the output still ahead of its last item (`ahead`: the
    connection's, None once that item has been sent)."""

    __slots__ = ("moved", "pending")

    def __init__(self) -> None:
        self.moved: list[tuple[Timing, float, list[Any]]] = []  # queued since the last write
        self.pending: deque[tuple[int, Timing, float]] = deque()

    def queued(self, timing: Timing, output: list[Any] | None, now_s: float) -> None:
        if output:
            self.moved.append((timing, now_s, output))
        else:  # no response: done
            left(timing, now_s, now_s)

    def sent(self, bytes_out: int, now_s: float, ahead: Callable[[Any], int | None] | None) -> None:
        """A write ended: the socket has taken `bytes_out` bytes in all; `ahead` None when it
        took the whole output. The responses within those bytes left."""
        moved, pending = self.moved, self.pending
        if ahead is None:
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
            return
        for timing, queued_s, output in moved:
            still = ahead(output[-1])
            if still is None:
                left(timing, queued_s, now_s)
            else:
                pending.append((bytes_out + still, timing, queued_s))
        moved.clear()
        while pending and pending[0][0] <= bytes_out:
            _, timing, queued_s = pending.popleft()
            left(timing, queued_s, now_s)
