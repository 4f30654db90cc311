"""Children that end with their parent: `preexec_fn(signum)` gives a child process Linux's
parent-death signal (prctl PR_SET_PDEATHSIG), so a parent that is SIGKILLed, and so cannot stop
its children itself, does not leave them running.

Invariants: prctl is looked up in the parent, before fork, so the child only calls it (no
dynamic loading between fork and exec). A parent already gone when the child arms the signal
(the race between fork and prctl) is seen by the child's changed parent id: it sends itself the
signal at once. The signal is sent when the *thread* that started the child ends, so start
children from a thread that lives as long as they should (the main thread). Elsewhere than
Linux there is no such signal: `preexec_fn` returns None and the children outlive a SIGKILL.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def preexec_fn(signum: int) -> Callable[[], None] | None:
    """A `subprocess.Popen(preexec_fn=...)` that arms `signum` as the child's parent-death
    signal; None where the platform has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def arm() -> None:
        if prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
            return  # the child runs on, as it would without the signal
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return arm
