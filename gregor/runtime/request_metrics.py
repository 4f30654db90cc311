"""Request metrics around a listener's dispatcher (on when `metrics.listener` is set): per
request, its API and version from the frame's first four bytes, and its times in ms, Kafka's
RequestMetrics (gregor/metrics/stats.py keeps them):

    request queue   the frame read whole -> its handler called: waiting behind the frames read
                    before it, a client's throttle, the memory pool (Kafka's RequestQueueTimeMs)
    local           the dispatcher's call: decode, the handler, and the encoding of an answer
                    given at once (LocalTimeMs)
    remote          for a request that waits (acks=all, a long-poll fetch, a forwarded admin
                    write, a coordinator write being replicated): from the end of that call to
                    its answer; 0 for one answered at once (RemoteTimeMs)
    response queue  the answer ready -> its turn in the connection's output, after the answers
                    of earlier requests (ResponseQueueTimeMs)
    response send   its turn -> its last byte taken by the socket (ResponseSendTimeMs)
    total           the frame read whole -> its last byte taken by the socket (TotalTimeMs)

Every request is counted; the times are those of a sample: the first request of each API and
version, then one in SAMPLE_EVERY (8), each with all six parts, recorded once its response has
left (a request without a response: once handled), so the parts of each sampled request add
up to its total. The connection stamps the end of each read and reports the departure of the
sampled requests' responses (runtime/response_timing.py). Kafka's throttle time has no
histogram of its own (a throttled client's next frames wait in the request queue). Bytes read
and sent are counted by the connections themselves, per system call.

Cost: a struct unpack, a dict lookup and an addition per request; a sampled one adds three
clock reads, a small list of its instants and two appends (put in the histograms later, many
at a time). bench/metrics_bench.py --micro measures it.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable
from typing import Any

from gregor.metrics.stats import SAMPLE_EVERY, RequestCounters, RequestStats
from gregor.runtime.connection import Connection, Dispatcher, Later, Output
from gregor.runtime.response_timing import ResponseTimer, left

_HEAD = struct.Struct(">hh")  # api key, api version


class MeasuredDispatcher:
    def __init__(self, inner: Dispatcher, requests: RequestStats) -> None:
        self.inner = inner
        self.requests = requests
        self.by_api = requests.by_api
        self.clock = time.perf_counter

    def __call__(
        self, conn: Connection, frame: memoryview
    ) -> Output | Later | Awaitable[Output | None] | None:
        try:
            key = _HEAD.unpack_from(frame)
        except struct.error:  # not even an API key: the handler says what is wrong
            return self.inner(conn, frame)
        if conn.timer is None:  # its first request: the connection times responses from now
            conn.timer = ResponseTimer()
            conn.received_s = self.clock()
        counters = self.by_api.get(key) or self.requests.new(key)
        counters.requests += 1
        if counters.requests % SAMPLE_EVERY != 1:
            return self.inner(conn, frame)
        return self._timed(conn, frame, counters)

    def _timed(
        self, conn: Connection, frame: memoryview, counters: RequestCounters
    ) -> Output | Later | Awaitable[Output | None] | None:
        clock = self.clock
        received = conn.received_s
        start = clock()
        result = self.inner(conn, frame)
        ended = clock()
        if result is None or isinstance(result, list):
            timing = [counters, received, start, ended, ended, 0.0, 0.0]
            if result is None:  # no response (acks=0): done now
                left(timing, ended, ended)
            else:
                conn.timing = timing
            return result
        timing = conn.timing = [counters, received, start, ended, 0.0, 0.0, 0.0]

        def done(_f: asyncio.Future[Any] | Later) -> None:
            timing[4] = clock()

        if isinstance(result, Later):
            result.add_done_callback(done)
            return result
        future = asyncio.ensure_future(result)
        future.add_done_callback(done)
        return future
