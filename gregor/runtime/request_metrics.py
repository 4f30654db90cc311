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

The connection stamps the end of each read and reports each response's departure
(runtime/response_timing.py); Kafka's throttle time has no histogram of its own (a throttled
client's next frames wait in the request queue). Bytes read and sent are counted by the
connections themselves, per system call.

Cost, for a request answered at once: three clock reads, a struct unpack, a dict lookup, a
small object and three list appends (its times, put in the histograms later with others);
bench/metrics_bench.py --micro measures the dispatcher's part.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable
from typing import Any

from gregor.metrics.stats import FOLD_AT, RequestStats
from gregor.runtime.connection import Connection, Dispatcher, Later, Output
from gregor.runtime.response_timing import ResponseTimer, Timing

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
        clock = self.clock
        start = clock()
        result = self.inner(conn, frame)
        ended = clock()
        try:
            key = _HEAD.unpack_from(frame)
        except struct.error:  # a frame held before it was read (a node catching up)
            return result
        if conn.timer is None:  # its first request: the connection times responses from now
            conn.timer = ResponseTimer(conn.bytes_out)
            received = start
        else:
            received = min(conn.received_s, start)
        counters = self.by_api.get(key) or self.requests.new(key)
        local_ms = (ended - start) * 1000.0
        counters.queued.append((start - received) * 1000.0)
        if result is None or isinstance(result, list):
            answered = counters.answered  # the hot path: bucketed later, FOLD_AT at a time
            answered.append(local_ms)
            if len(answered) >= FOLD_AT:
                counters.fold()
            if result is None:  # no response (acks=0): done now
                counters.left((ended - received) * 1000.0, 0.0, 0.0)
            else:
                conn.timing = Timing(counters, received, ended)
            return result
        counters.local.observe(local_ms)
        timing = conn.timing = Timing(counters, received, 0.0)

        def done(_f: asyncio.Future[Any] | Later) -> None:
            now = timing.ready_s = clock()
            counters.remote.observe((now - ended) * 1000.0)

        if isinstance(result, Later):
            result.add_done_callback(done)
            return result
        future = asyncio.ensure_future(result)
        future.add_done_callback(done)
        return future
