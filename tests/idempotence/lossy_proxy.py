"""A TCP proxy that loses acknowledgements: every `every`-th Produce response from the broker is
not passed on; the proxy closes that client connection instead. The batch was written, the
producer never hears so, reconnects and sends it again with the same producer id, epoch and
sequence: exactly what idempotence is for.

Clients bootstrap to the proxy; the broker advertises the proxy's address (advertised.listeners)
so every connection goes through it. Frames are read whole on both sides: requests for their
api key and correlation id, responses for their correlation id.
"""

from __future__ import annotations

import socket
import struct
import threading

from gregor.testing.cluster import free_ports

PRODUCE = 0


class LossyProxy:
    def __init__(self, every: int = 25) -> None:
        self.every = every
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.target_port = 0
        self.produce_responses = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._closed = False
        self._sockets: list[socket.socket] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, target_port: int) -> LossyProxy:
        self.target_port = target_port
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        for s in list(self._sockets):
            _close(s)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)  # the broker is down (restarting): the client retries
                continue
            self._sockets += [client, upstream]
            produce_ids: set[int] = set()
            threading.Thread(
                target=self._requests, args=(client, upstream, produce_ids), daemon=True
            ).start()
            threading.Thread(
                target=self._responses, args=(upstream, client, produce_ids), daemon=True
            ).start()

    def _requests(
        self, client: socket.socket, upstream: socket.socket, produce_ids: set[int]
    ) -> None:
        try:
            while True:
                frame = _read_frame(client)
                api_key, _version, correlation = struct.unpack_from(">hhi", frame, 4)
                if api_key == PRODUCE:
                    produce_ids.add(correlation)
                upstream.sendall(frame)
        except OSError:
            pass
        _close(client)
        _close(upstream)

    def _responses(
        self, upstream: socket.socket, client: socket.socket, produce_ids: set[int]
    ) -> None:
        try:
            while True:
                frame = _read_frame(upstream)
                (correlation,) = struct.unpack_from(">i", frame, 4)
                if correlation in produce_ids:
                    produce_ids.discard(correlation)
                    with self._lock:
                        self.produce_responses += 1
                        drop = self.produce_responses % self.every == 0
                        self.dropped += drop
                    if drop:
                        break
                client.sendall(frame)
        except OSError:
            pass
        _close(client)
        _close(upstream)


def _read_frame(sock: socket.socket) -> bytes:
    head = _exact(sock, 4)
    (size,) = struct.unpack(">i", head)
    return head + _exact(sock, size)


def _exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise OSError("closed")
        out += chunk
    return bytes(out)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


def free_port() -> int:
    return free_ports(1)[0]
