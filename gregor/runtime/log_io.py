"""The log work that must not hold the event loop: fsyncs after a roll and checkpoint writes,
done on worker threads, with their results handed back to the log on the loop.

    logs.roll_flusher = flush_after_roll      # LogManager calls it after each roll
    checkpoint_in_background(logs)            # on the checkpoint timer
"""

from __future__ import annotations

import asyncio
import logging
import os

from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager

log = logging.getLogger("gregor.runtime")


def flush_after_roll(log_: Log, up_to: int) -> None:
    """fsync a rolled segment on a worker thread, as Kafka does after a roll, so the event loop
    never waits for the disk; the recovery point moves when the fsync is done."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not serving yet (opening logs): flush inline
        log_.flush(up_to)
        return
    fds = [os.dup(seg.fd) for seg in log_.segments_to_flush(up_to)]
    fds += log_.producer_state.pending_sync_fds()  # the roll's producer snapshot
    truncations = log_.truncations

    def fsync_all() -> None:
        for fd in fds:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def done(fut: asyncio.Future[None]) -> None:
        exc = fut.exception()
        if exc is None:
            log_.mark_flushed(up_to, truncations)
        elif isinstance(exc, OSError):
            log_.fail(exc, "flushing a rolled segment")
        else:
            log.error("background flush of %s failed: %s", log_, exc)

    loop.run_in_executor(None, fsync_all).add_done_callback(done)


def checkpoint_in_background(logs: LogManager) -> None:
    """Take the offsets on the loop; write and fsync the three files on a worker thread."""
    snapshot = logs.checkpoint_snapshot()
    asyncio.get_running_loop().run_in_executor(None, logs.write_checkpoints, snapshot)
