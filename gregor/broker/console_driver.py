"""The web console inside a node (`console.listener`, off by default; `console.read.only`,
true by default): the same app as `gregor console`, served on the node's event loop (its
client calls on the console's own threads) and pointed at the node's own client listener, as
any client of it. For development: a console for production runs as its own process.
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.broker.config import BrokerConfig

log = logging.getLogger("gregor.broker")


class ConsoleDriver:
    def __init__(self, host: str, port: int, read_only: bool) -> None:
        self.host, self.port, self.read_only = host, port, read_only
        self.server: Any = None  # a ConsoleServer once started

    async def start(self, bootstrap: str, protocol: str) -> None:
        """Listen (an OSError when the port cannot be bound stops the node's start) and serve
        a console of the node at `bootstrap`, a listener of `protocol`. Imported here: a node
        without a console does not load the web stack."""
        from gregor.console.server import ConsoleServer, bind
        from gregor.console.settings import ConsoleSettings

        if protocol != "PLAINTEXT":
            log.warning("the console's clients have no credentials for a %s listener", protocol)
        settings = ConsoleSettings(bootstrap, read_only=self.read_only)
        self.server = ConsoleServer(settings, bind(self.host, self.port), own_signals=False)
        await self.server.start()
        mode = "read-only" if self.read_only else "writes allowed"
        log.info("console on %s (%s)", self.server.url, mode)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None


def console_driver(config: BrokerConfig) -> ConsoleDriver | None:
    """The node's console, or None when `console.listener` is empty."""
    where = config.console_listener()
    if where is None:
        return None
    return ConsoleDriver(*where, config.get_bool("console.read.only"))
