"""A CleaningTask run in a child process, so that cleaning does not share the broker's GIL.

The cleaning itself is pure Python over bytes; in a thread of the broker it takes its turns on
the interpreter lock with the event loop, and both make do with one core between them (on the
benchmark's 1 GiB partition: produce at 32-48% of its idle rate while cleaning; 68-79% with
the cleaning here). The worker's half of a task needs nothing of the broker's memory: paths,
sizes, inodes and offsets in, its own `.cleaned` files out. So it runs here, in
`python -m gregor.storage.cleaner_worker`, and only the swaps come back:

    broker: a cleaner thread                      child process
    run_in_process(task, swap)  -- the task --->  task.run(swap=ask_the_broker)
                                <-- "swap" -----  (the cleaned segment, its group's sources)
    swap(group): on the event loop, as always
                                --- True/False ->
                                <-- "done" / "aborted" / "failed"

Messages are pickles over a socketpair (multiprocessing's Connection framing). The task's `log`
and the sources' segment objects stay in the broker (`__getstate__` drops them); the cleaned
segment comes back closed, as paths and sizes. `abort()` in the broker kills the child within
0.1 s; its half-written `.cleaned` files are removed by LogCleaner.done.

The child must not outlive the broker (an orphan writing `.cleaned` files beside a restarted
broker could corrupt its next cleaning): it asks Linux for SIGKILL when its parent thread dies
(PR_SET_PDEATHSIG), and checks that the parent is still the one that started it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

from gregor.storage.cleaner import (
    CleanedGroup,
    CleanerStats,
    CleaningAborted,
    CleaningTask,
    SwapFn,
    Throttler,
)

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
# Where a child cannot outlive its parent (PR_SET_PDEATHSIG): elsewhere the broker cleans on
# its threads instead.
SUPPORTED = sys.platform.startswith("linux")


class CleanerProcessError(Exception):
    """The child failed (its message says how)."""


def run_in_process(task: CleaningTask, swap: SwapFn, rate: float) -> CleanerStats:
    """Run `task` in a child process, calling `swap` here for each group (from the calling
    thread, which blocks meanwhile). Raises CleaningAborted, or CleanerProcessError."""
    ours, theirs = socket.socketpair()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gregor.storage.cleaner_worker",
            str(theirs.fileno()),
            str(os.getpid()),
            repr(rate),
        ],
        pass_fds=(theirs.fileno(),),
        stdin=subprocess.DEVNULL,
    )
    theirs.close()
    conn = Connection(ours.detach())
    try:
        conn.send(task)
        while True:
            while not conn.poll(0.1):
                if task.aborted:
                    raise CleaningAborted(f"cleaning of {task.name} aborted")
                if proc.poll() is not None:
                    raise CleanerProcessError(
                        f"the cleaner process of {task.name} exited with {proc.returncode}"
                    )
            try:
                kind, *rest = conn.recv()
            except EOFError:
                raise CleanerProcessError(f"the cleaner process of {task.name} went away") from None
            if kind == "swap":
                cleaned, indexes = rest
                conn.send(swap(CleanedGroup(cleaned, [task.sources[i] for i in indexes])))
            elif kind == "done":
                stats: CleanerStats = rest[0]
                return stats
            elif kind == "aborted":
                raise CleaningAborted(rest[0])
            else:
                raise CleanerProcessError(rest[0])
    finally:
        conn.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _die_with_parent(parent_pid: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the parent's checks in run_in_process remain
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def main() -> None:
    fd, parent_pid, rate = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    _die_with_parent(parent_pid)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    conn = Connection(fd)
    task: CleaningTask = conn.recv()
    index = {id(s): i for i, s in enumerate(task.sources)}

    def swap(group: CleanedGroup) -> bool:
        conn.send(("swap", group.cleaned, [index[id(s)] for s in group.sources]))
        return bool(conn.recv())

    try:
        stats = task.run(swap, Throttler(rate, task.clock))
    except CleaningAborted as exc:
        conn.send(("aborted", str(exc)))
    except BaseException as exc:  # reported to the broker, which logs it and marks the log
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
    else:
        conn.send(("done", stats))
    conn.close()


if __name__ == "__main__":
    main()
