"""One thread that fsyncs for an event loop, and reports each fsync back on the loop.

    flusher = FlushThread(loop, "raft-1-flush")
    flusher.submit(sync, on_done)     # sync() runs on the thread; on_done(exc) on the loop after
    flusher.run(work, done)           # done(work()'s result, or the exception) on the loop
    flusher.stop()                    # a flush under way finishes first

The metadata log's flushes are on the path of every metadata change (the leader counts its own
copy, a follower acknowledges, only once durable), so the hand-off is kept to the least Python
the thread runs while holding the GIL: a blocking `SimpleQueue.get`, the fsync (which releases
it), and one `call_soon_threadsafe`. An executor's futures, locks and chained asyncio futures
cost the loop several more GIL hand-offs per flush, each a wake-up on a busy machine. A
broker's new partitions' files are made on one too (`run`), for the same reason: a partition
created per request costs one hand-off there and one back.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

Sync = Callable[[], None]
Done = Callable[[BaseException | None], None]


class FlushThread:
    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self._loop = loop
        self._queue: queue.SimpleQueue[tuple[Sync, Done] | None] = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, sync: Sync, on_done: Done) -> None:
        """Run `sync()` on the thread, then `on_done(None or the exception it raised)` on the
        loop. Flushes run one after another, in the order submitted. Once stopped, `sync()`
        runs at once on the caller's thread (it releases what it holds) and nobody is told."""
        if self._stopped:
            sync()
            return
        self._queue.put((sync, on_done))

    def run(self, work: Callable[[], Any], done: Callable[[Any], None]) -> None:
        """`submit` for work with a result: `done(work()'s result, or the exception it
        raised)` on the loop. Once stopped, `work()` runs at once and `done` is not called."""
        result: list[Any] = []
        self.submit(
            lambda: result.append(work()),
            lambda exc: done(exc if exc is not None else result[0]),
        )

    def stop(self) -> None:
        """Let what was submitted finish (its `on_done` is dropped once the loop is closed),
        then end the thread."""
        self._stopped = True
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        get, loop = self._queue.get, self._loop
        while True:
            item = get()
            if item is None:
                return
            sync, on_done = item
            error: BaseException | None = None
            try:
                sync()
            except BaseException as exc:  # reported on the loop, which decides
                error = exc
            try:
                loop.call_soon_threadsafe(on_done, error)
            except RuntimeError:  # the loop is closed: nobody waits for the answer
                pass
