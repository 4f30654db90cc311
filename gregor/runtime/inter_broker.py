"""Requests from this broker to the other brokers of a networked cluster, on their inter-broker
listener (inter.broker.listener.name), by broker id: what Kafka's inter-broker send threads
share. The marker sender (coordinator/txn/markers.py, broker/cores.py) and the produce path's
transaction verifier (coordinator/txn/verifier.py) use it, each driven by a CoreDriver
(broker/cores.py).

    links = InterBroker(node_id, lambda: store.image, NetworkClient(client_id="broker-1"))
    links.leader("orders", 2)          # the partition's leader by the image; None: no such partition
    if links.reachable(3):             # registered with an inter-broker endpoint (now the transport's)
        links.spawn(send_something())  # a task kept until it ends; links.close() ends them all
        body = await links.send(3, api_keys.WRITE_TXN_MARKERS, 1, request)

Where a broker listens comes from its registration in the metadata image (its advertised
endpoint on the inter-broker listener; none: unreachable), read at each use, so a broker that
moved is found at its new address. A fenced broker is still asked: it may well be serving (it
may have been restarted and not be unfenced yet); a request that cannot reach it fails with a
`ClientError` and its caller retries. Requests are pipelined on one connection per broker
(`gregor.runtime.client.NetworkClient`); `Transport` is its shape, which tests fake.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from gregor.metadata.cluster import broker_endpoint
from gregor.metadata.image import MetadataImage

LISTENER = "PLAINTEXT"
REQUEST_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms default, which its send threads use


class Transport(Protocol):
    def set_endpoint(self, node_id: int, host: str, port: int) -> None: ...

    async def send(
        self, node_id: int, api_key: int, api_version: int, body: Any, timeout_ms: int | None = None
    ) -> Any: ...

    async def close(self) -> None: ...


class InterBroker:
    def __init__(
        self,
        node_id: int,
        image: Callable[[], MetadataImage],
        transport: Transport,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS,
        listener: str = LISTENER,
    ) -> None:
        """`listener`: the inter-broker listener's name (inter.broker.listener.name)."""
        self.node_id = node_id
        self.listener = listener
        self.image = image
        self.transport = transport
        self.request_timeout_ms = request_timeout_ms
        self._tasks: set[asyncio.Task[Any]] = set()

    def leader(self, topic: str, index: int) -> int | None:
        """The partition's leader by the image (-1: none now); None when it does not exist."""
        part = self.image().partition(topic, index)
        return None if part is None else part.leader

    def reachable(self, broker_id: int) -> bool:
        """True if the broker is registered with an endpoint on the inter-broker listener,
        which the transport then uses."""
        endpoint = broker_endpoint(self.image(), broker_id, self.listener)
        if endpoint is None:
            return False
        self.transport.set_endpoint(broker_id, *endpoint)
        return True

    async def send(self, broker_id: int, api_key: int, api_version: int, body: Any) -> Any:
        """The decoded response; raises ClientError (disconnected, timed out)."""
        return await self.transport.send(
            broker_id, api_key, api_version, body, self.request_timeout_ms
        )

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Close the connections (requests in flight fail: their callers see a ClientError and
        answer with it), then wait a little for the tasks to take their answers."""
        await self.transport.close()
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*self._tasks, return_exceptions=True), timeout=1.0
                )
