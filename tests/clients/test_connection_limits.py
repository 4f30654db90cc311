"""connections.max.idle.ms and queued.max.requests, on raw sockets."""

from __future__ import annotations

import socket
import struct
import time

from client_helpers import frame, parse_api_versions_v0, recv_frame, request_header

from gregor import Broker


def api_versions_v0(corr: int) -> bytes:
    return frame(request_header(18, 0, corr, b"limits"))


def test_idle_connection_is_closed_and_busy_one_is_not():
    with Broker({"connections.max.idle.ms": "600"}, log_level="INFO") as broker:
        idle = socket.create_connection(("127.0.0.1", broker.port))
        busy = socket.create_connection(("127.0.0.1", broker.port))
        busy.settimeout(5)
        deadline = time.monotonic() + 2.5
        corr = 0
        while time.monotonic() < deadline:
            corr += 1
            busy.sendall(api_versions_v0(corr))
            assert struct.unpack(">i", recv_frame(busy)[:4])[0] == corr
            time.sleep(0.1)
        idle.settimeout(5)
        assert idle.recv(1) == b""  # the broker closed the idle one
        busy.sendall(api_versions_v0(corr + 1))
        assert struct.unpack(">i", recv_frame(busy)[:4])[0] == corr + 1
        assert "connections.max.idle.ms" in broker.read_log()
        busy.close()
        idle.close()


def test_queued_max_requests_backpressure_loses_and_reorders_nothing():
    with Broker({"queued.max.requests": "2"}) as broker:
        s = socket.create_connection(("127.0.0.1", broker.port))
        s.settimeout(10)
        # 300 pipelined requests in one write: the broker reads at most two ahead of its answers.
        s.sendall(b"".join(api_versions_v0(i) for i in range(300)))
        for i in range(300):
            data = recv_frame(s)
            corr, error, apis = parse_api_versions_v0(data)
            assert corr == i and error == 0 and 0 in apis
        s.close()
