"""A blocking, one-socket Kafka protocol client on gregor's own codec: for tests and tools that
need to send exact requests (a version, a field, a byte-for-byte replayed frame) and read the
exact response, which the real clients do not expose.

    with RawClient("127.0.0.1:9092") as raw:
        r = raw.call(api_keys.API_VERSIONS, 3, ApiVersionsRequest(...))

Over TLS and SASL too: `RawClient(address, ssl_context=ctx, sasl=("SCRAM-SHA-256", client))`
wraps the socket and authenticates (SaslHandshake v1, SaslAuthenticate v1) before it returns;
a refused mechanism or failed authentication is a PermissionError saying why.

Requests may be pipelined (`send`, `send`, then `recv`, `recv`): responses come back in order
and each one's correlation id is checked against its request's.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections import deque
from typing import TYPE_CHECKING, Any

from gregor.protocol import codec
from gregor.security.client_properties import authenticate

if TYPE_CHECKING:
    from gregor.security.sasl_client import SaslClient


class RawClient:
    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "gregor-raw",
        timeout_s: float = 20.0,
        ssl_context: ssl.SSLContext | None = None,
        sasl: tuple[str, SaslClient] | None = None,
    ) -> None:
        host, _, port = bootstrap.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.client_id = client_id
        self.correlation = 0
        self._pending: deque[tuple[int, int, int]] = deque()  # (key, version, correlation id)
        try:
            if ssl_context is not None:
                self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
            if sasl is not None:
                authenticate(self.call, *sasl)
        except BaseException:
            self.sock.close()
            raise

    def encode(self, key: int, version: int, body: Any) -> bytes:
        """A whole request frame with the next correlation id (to send with `send_raw`)."""
        self.correlation += 1
        return b"".join(
            bytes(b)
            for b in codec.encode_request(key, version, self.correlation, self.client_id, body)
        )

    def send_raw(self, frame: bytes, key: int, version: int) -> None:
        """Send `frame` as it is; its response is read as `key` at `version`."""
        (correlation,) = struct.unpack_from(">i", frame, 8)
        self.sock.sendall(frame)
        self._pending.append((key, version, correlation))

    def send(self, key: int, version: int, body: Any) -> None:
        self.send_raw(self.encode(key, version, body), key, version)

    def recv(self) -> Any:
        """The response to the oldest request not yet answered."""
        key, version, expected = self._pending.popleft()
        (size,) = struct.unpack(">i", self._exact(4))
        correlation, body = codec.decode_response(key, version, self._exact(size))
        if correlation != expected:
            raise ConnectionError(f"response {correlation} to request {expected}")
        return body

    def call(self, key: int, version: int, body: Any) -> Any:
        self.send(key, version, body)
        return self.recv()

    def produce(
        self, topic: str, records: bytes, partition: int = 0, *, acks: int = -1, version: int = 9
    ) -> Any:
        """The partition's answer to a Produce of exactly these record bytes."""
        from gregor.protocol.messages import ProduceRequest

        body = ProduceRequest(
            transactional_id=None,
            acks=acks,
            timeout_ms=10000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name=topic,
                    partition_data=[
                        ProduceRequest.PartitionProduceData(index=partition, records=records)
                    ],
                )
            ],
        )
        response = self.call(0, version, body)  # Produce is API key 0
        return response.responses[0].partition_responses[0]

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
