"""What every gregor server process does around its own start and stop: take all the file
descriptors it may, tell whoever started it where it listens (a ready file), and serve until
SIGTERM or SIGINT, then stop cleanly.

    raise_open_files_limit()
    write_ready_file(path, host, port)
    await serve_until_signalled(server.start, server.stop)
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Sequence

from gregor.metadata.image import Endpoint

log = logging.getLogger("gregor.process")


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as the JVM does for Kafka at start
    (-XX:+MaxFDLimit, on by default): a broker holds a descriptor per connection and per
    segment file, and a soft limit of 1024 is soon reached. Returns (soft, hard) afterwards."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return (-1, -1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return soft, hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:  # macOS: a hard limit of "unlimited" cannot be had
        log.info("open files limit stays at %d (raising it to %d failed: %s)", soft, hard, exc)
        return soft, hard
    log.info("open files limit raised from %d to %d", soft, hard)
    return hard, hard


def write_ready_file(path: str, host: str, port: int, listeners: Sequence[Endpoint] = ()) -> None:
    """`host:port` in `path`, then a `NAME://host:port` line for each of `listeners` (a node
    with several client listeners), written whole or not at all (a reader never sees half of
    it). The first line is all a node with one listener writes."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{host}:{port}\n")
        for e in listeners:
            f.write(f"{e.name}://{e.host}:{e.port}\n")
    os.replace(tmp, path)


async def serve_until_signalled(
    start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]
) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await start()
    await stopping.wait()
    await stop()


def halt_on_metadata_log_failure(directory: str) -> Callable[[str, OSError], None]:
    """What a server does when its metadata log cannot be written (Kafka halts too): one line
    naming the dir, then exit at once with status 1. Nothing acknowledged is lost by it: what
    was written is in the page cache, as after a SIGKILL, and the next start recovers."""

    def halt(doing: str, exc: OSError) -> None:
        log.critical(
            "the metadata log in %s failed (%s: %s); this node cannot go on without it and "
            "stops now; free the disk or fix the error, then start it again",
            directory,
            doing,
            exc.strerror or exc,
        )
        logging.shutdown()
        os._exit(1)

    return halt
