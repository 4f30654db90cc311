"""A broker told to listen on port 0 registers the port it was given, not 0: the socket is bound
before the registration is written to the metadata log, and served from once started."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from gregor.broker.broker import BrokerServer
from gregor.broker.config import BrokerConfig


def test_port_zero_is_bound_before_the_broker_registers(tmp_path: Path) -> None:
    config = BrokerConfig.load(
        None, {"log.dirs": str(tmp_path / "logs"), "listeners": "PLAINTEXT://127.0.0.1:0"}
    )
    broker = BrokerServer(config)
    registered = broker.store.image.brokers[broker.node_id].listeners[0]
    assert registered.port != 0
    assert (registered.host, registered.port) == ("127.0.0.1", broker.cluster.port)

    async def serve() -> None:
        await broker.start()
        try:
            assert broker.server is not None and broker.server.port == registered.port
            with socket.create_connection(("127.0.0.1", registered.port), timeout=5):
                pass
        finally:
            await broker.stop()

    asyncio.run(serve())
