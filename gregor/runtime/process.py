"""What every gregor server process does around its own start and stop: tell whoever started
it where it listens (a ready file), and serve until SIGTERM or SIGINT, then stop cleanly.

    write_ready_file(path, host, port)
    await serve_until_signalled(server.start, server.stop)
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable


def write_ready_file(path: str, host: str, port: int) -> None:
    """`host:port` in `path`, written whole or not at all (a reader never sees half of it)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{host}:{port}\n")
    os.replace(tmp, path)


async def serve_until_signalled(start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await start()
    await stopping.wait()
    await stop()
