"""Request metrics around a listener's dispatcher (on when `metrics.listener` is set): per
request, its API and version from the frame's first four bytes, and its times in ms
(gregor/metrics/stats.py keeps them):

    local   the dispatcher's call: decode, the handler, and the encoding of an answer given at
            once (Kafka's LocalTimeMs)
    remote  for a request that waits (acks=all, a long-poll fetch, a forwarded admin write, a
            coordinator write being replicated): from the end of that call to its answer; 0
            for one answered at once
    total   local + remote: from the frame being read whole to its response being ready

Kafka's RequestQueueTimeMs, ResponseQueueTimeMs and ResponseSendTimeMs have no counterpart: a
frame is handed to its handler the moment it is read (there is no request queue or handler
pool), and a response goes to the socket as soon as the ones before it have, without a queue.
(Bytes read and sent are counted by the connections themselves, per system call.)

Cost, for a request answered at once: two clock reads, a struct unpack, a dict lookup and a
list append (its time, put in the histogram later with others); bench/metrics_bench.py
--micro measures it.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Awaitable
from typing import Any

from gregor.metrics.stats import FOLD_AT, RequestStats
from gregor.runtime.connection import Connection, Dispatcher, Output

_HEAD = struct.Struct(">hh")  # api key, api version


class MeasuredDispatcher:
    def __init__(self, inner: Dispatcher, requests: RequestStats) -> None:
        self.inner = inner
        self.requests = requests
        self.by_api = requests.by_api
        self.clock = time.perf_counter

    def __call__(
        self, conn: Connection, frame: memoryview
    ) -> Output | Awaitable[Output | None] | None:
        clock = self.clock
        start = clock()
        result = self.inner(conn, frame)
        local_ms = (clock() - start) * 1000.0
        try:
            key = _HEAD.unpack_from(frame)
        except struct.error:  # a frame held before it was read (a node catching up)
            return result
        counters = self.by_api.get(key) or self.requests.new(key)
        if result is None or isinstance(result, list):
            answered = counters.answered  # the hot path: bucketed later, FOLD_AT at a time
            answered.append(local_ms)
            if len(answered) >= FOLD_AT:
                counters.fold()
            return result
        counters.local.observe(local_ms)
        future = asyncio.ensure_future(result)
        ended = start + local_ms / 1000.0

        def done(_f: asyncio.Future[Any]) -> None:
            now = clock()
            counters.total.observe((now - start) * 1000.0)
            counters.remote.observe((now - ended) * 1000.0)

        future.add_done_callback(done)
        return future
