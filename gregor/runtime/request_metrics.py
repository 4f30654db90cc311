"""Request metrics around a listener's dispatcher (on when `metrics.listener` is set): per
request, its API and version from the frame's first four bytes, its count, the bytes read and
written, and its times in ms (gregor/metrics/stats.py keeps them):

    local   the dispatcher's call: decode, the handler, and the encoding of an answer given at
            once (Kafka's LocalTimeMs)
    remote  for a request that waits (acks=all, a long-poll fetch, a forwarded admin write, a
            coordinator write being replicated): from the end of that call to its answer
    total   local + remote: from the frame being read whole to its response being ready

Kafka's RequestQueueTimeMs, ResponseQueueTimeMs and ResponseSendTimeMs have no counterpart: a
frame is handed to its handler the moment it is read (there is no request queue or handler
pool), and a response goes to the socket as soon as the ones before it have, without a queue.
Bytes out are the responses' sizes as handed to the connection (sendfile slices included).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from gregor.metrics.stats import NetworkStats, RequestStats
from gregor.runtime.connection import Connection, Dispatcher, Output


def output_size(out: Output) -> int:
    n = 0
    for item in out:
        kind = type(item)
        if kind is memoryview:
            n += item.nbytes
        elif kind is bytes or kind is bytearray:
            n += len(item)
        else:
            n += item.length  # a file slice, sent with sendfile
    return n


class MeasuredDispatcher:
    def __init__(self, inner: Dispatcher, requests: RequestStats, network: NetworkStats) -> None:
        self.inner = inner
        self.requests = requests
        self.network = network
        self.clock = time.perf_counter

    def __call__(
        self, conn: Connection, frame: memoryview
    ) -> Output | Awaitable[Output | None] | None:
        start = self.clock()
        self.network.bytes_in += len(frame) + 4
        result = self.inner(conn, frame)
        local_ms = (self.clock() - start) * 1000.0
        if len(frame) >= 4:
            counters = self.requests.of((frame[0] << 8) | frame[1], (frame[2] << 8) | frame[3])
            counters.count += 1
            counters.local.observe(local_ms)
        else:
            return result
        if result is None:
            counters.total.observe(local_ms)
            return None
        if isinstance(result, list):
            self.network.bytes_out += output_size(result)
            counters.total.observe(local_ms)
            counters.remote.observe(0.0)
            return result
        future = asyncio.ensure_future(result)
        ended = start + local_ms / 1000.0

        def done(f: asyncio.Future[Any]) -> None:
            now = self.clock()
            counters.total.observe((now - start) * 1000.0)
            counters.remote.observe((now - ended) * 1000.0)
            if not f.cancelled() and f.exception() is None and f.result():
                self.network.bytes_out += output_size(f.result())

        future.add_done_callback(done)
        return future
