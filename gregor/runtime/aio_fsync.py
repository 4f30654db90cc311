"""fsync with no thread of ours: Linux AIO's IOCB_CMD_FSYNC, its completions read on the loop.

    aio = AioFsync.open(loop)          # None where the kernel or the machine offers none
    if aio is None or not aio.submit(fds, on_done):
        ...                            # fsync some other way (a FlushThread)
    aio.stop()                         # waits for the fsyncs under way

`submit` hands the kernel an fsync of each descriptor in `fds` (one `io_submit`; the kernel
runs them on its own workers) and returns. The kernel signals an eventfd as each completes;
the loop reads it, takes the completions, closes the descriptors (they are the caller's
duplicates, given over) and calls `on_done(None)`, or `on_done(OSError)` with the first
error, in the order the requests were submitted.

Why: the metadata log is fsynced on the path of every metadata commit, on every voter. With a
flush thread each fsync costs a queue hand-off, the thread taking the GIL to start it and again
to report it, and a wake-up of the loop through its self-pipe: on a busy machine each of those
waits for a core, and the GIL ones for the loop to let go. Here the fsync starts in the
`io_submit` call and its end is one readable eventfd among the loop's sockets.

The calls are raw system calls through ctypes (no libaio needed), on x86-64 and arm64 Linux.
`open` gives None elsewhere, or when `io_setup` fails (no AIO in the kernel, a seccomp filter,
`fs.aio-max-nr` reached); `submit` gives False, having done nothing, when the kernel refuses
the fsync at submission (a file system without AIO fsync says EINVAL), and every later
`submit` then gives False at once.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import platform
from collections import deque
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

Done = Callable[[BaseException | None], None]

# io_setup, io_destroy, io_getevents, io_submit
_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB_CMD_FSYNC = 2
_IOCB_FLAG_RESFD = 1
_MAX_EVENTS = 128  # the context's capacity: fsyncs in flight at once
_ZERO, _CAPACITY = ctypes.c_long(0), ctypes.c_long(_MAX_EVENTS)


class _Iocb(ctypes.Structure):
    """struct iocb (linux/aio_abi.h), little-endian layout."""

    _fields_ = [
        ("aio_data", ctypes.c_uint64),
        ("aio_key", ctypes.c_uint32),
        ("aio_rw_flags", ctypes.c_int32),
        ("aio_lio_opcode", ctypes.c_uint16),
        ("aio_reqprio", ctypes.c_int16),
        ("aio_fildes", ctypes.c_uint32),
        ("aio_buf", ctypes.c_uint64),
        ("aio_nbytes", ctypes.c_uint64),
        ("aio_offset", ctypes.c_int64),
        ("aio_reserved2", ctypes.c_uint64),
        ("aio_flags", ctypes.c_uint32),
        ("aio_resfd", ctypes.c_uint32),
    ]


class _IoEvent(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_uint64),
        ("obj", ctypes.c_uint64),
        ("res", ctypes.c_int64),
        ("res2", ctypes.c_int64),
    ]


class _Request:
    __slots__ = ("fds", "on_done", "left", "error")

    def __init__(self, fds: Sequence[int], on_done: Done) -> None:
        self.fds = list(fds)
        self.on_done = on_done
        self.left = len(self.fds)
        self.error: OSError | None = None


class AioFsync:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, ctx: int, eventfd: int, calls: tuple[int, ...]
    ) -> None:
        self._loop = loop
        self._eventfd = eventfd
        _setup, destroy, getevents, submit = (ctypes.c_long(c) for c in calls)
        self._destroy, self._getevents, self._submit = destroy, getevents, submit
        self._ctx = ctypes.c_ulong(ctx)
        self._syscall = _libc().syscall
        self._requests: dict[int, _Request] = {}  # by aio_data
        self._order: deque[_Request] = deque()  # submitted, not yet reported
        self._next = 1
        self._refused = False
        self._stopped = False
        self._events = (_IoEvent * _MAX_EVENTS)()
        # The iocbs every `io_submit` reads, made once: the kernel copies each iocb when it
        # takes it (io_submit_one's copy_from_user; what it keeps of ours is the address, which
        # comes back in the event as `obj`), so the block is free again when the call returns.
        # Made per call they were a third of the cost of an fsync's submission (ctypes
        # objects: the iocb, a pointer to it, an array of pointers), on every voter's commit.
        self._iocbs = (_Iocb * _MAX_EVENTS)()
        for iocb in self._iocbs:
            iocb.aio_lio_opcode = _IOCB_CMD_FSYNC
            iocb.aio_flags = _IOCB_FLAG_RESFD
            iocb.aio_resfd = eventfd
        self._pointers = (ctypes.POINTER(_Iocb) * _MAX_EVENTS)(
            *(ctypes.pointer(iocb) for iocb in self._iocbs)
        )
        self._counts = [ctypes.c_long(n) for n in range(_MAX_EVENTS + 1)]
        loop.add_reader(eventfd, self._on_completions)

    @classmethod
    def open(cls, loop: asyncio.AbstractEventLoop) -> AioFsync | None:
        calls = _SYSCALLS.get(platform.machine())
        if calls is None or not hasattr(os, "eventfd"):
            return None
        try:
            syscall = _libc().syscall
        except (OSError, AttributeError):
            return None
        ctx = ctypes.c_ulong(0)
        if syscall(ctypes.c_long(calls[0]), ctypes.c_long(_MAX_EVENTS), ctypes.byref(ctx)) != 0:
            log.info("no AIO fsync (io_setup: %s): flushes use a thread", _errno_text())
            return None
        eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        return cls(loop, ctx.value, eventfd, calls)

    def submit(self, fds: Sequence[int], on_done: Done) -> bool:
        """Start an fsync of each of `fds` (given over: closed once done); `on_done` on the
        loop once all are. False, with nothing started, if the kernel refuses them."""
        if self._refused or self._stopped or len(self._requests) + len(fds) > _MAX_EVENTS:
            return False
        request = _Request(fds, on_done)
        first = self._next
        iocbs = self._iocbs
        for i, fd in enumerate(request.fds):
            iocb = iocbs[i]
            iocb.aio_data = first + i
            iocb.aio_fildes = fd
        taken = self._syscall(self._submit, self._ctx, self._counts[len(fds)], self._pointers)
        if taken != len(fds):
            if taken <= 0:  # nothing started: the caller fsyncs another way
                self._refused = taken < 0 and ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS)
                if self._refused:
                    log.info("no AIO fsync (io_submit: %s): flushes use a thread", _errno_text())
                return False
            # some started: the rest are fsynced here, and the request ends with those begun
            for fd in request.fds[taken:]:
                try:
                    os.fsync(fd)
                except OSError as exc:
                    request.error = request.error or exc
            request.left = taken
        self._next += len(fds)
        for i in range(request.left):
            self._requests[first + i] = request
        self._order.append(request)
        return True

    def stop(self) -> None:
        """Wait for the fsyncs under way (their `on_done`s are dropped), then let go."""
        if self._stopped:
            return
        self._stopped = True
        self._loop.remove_reader(self._eventfd)
        # waits for what is in flight, letting the GIL go meanwhile (a CDLL call)
        releasing = ctypes.CDLL(None, use_errno=True).syscall
        releasing.restype = ctypes.c_long
        releasing(self._destroy, self._ctx)
        for request in self._order:
            _close(request.fds)
        self._requests.clear()
        self._order.clear()
        os.close(self._eventfd)

    def _on_completions(self) -> None:
        try:
            os.eventfd_read(self._eventfd)
        except BlockingIOError:
            return
        got = self._syscall(self._getevents, self._ctx, _ZERO, _CAPACITY, self._events, None)
        for event in self._events[: max(got, 0)]:
            request = self._requests.pop(event.data, None)
            if request is None:
                continue
            if event.res < 0 and request.error is None:
                code = -event.res
                request.error = OSError(code, f"fsync: {os.strerror(code)}")
            request.left -= 1
        while self._order and self._order[0].left == 0:
            request = self._order.popleft()
            _close(request.fds)
            request.on_done(request.error)


def aio_fsync_available() -> bool:
    """Whether `AioFsync.open` can work here (a context is made and let go)."""
    calls = _SYSCALLS.get(platform.machine())
    if calls is None or not hasattr(os, "eventfd"):
        return False
    syscall, ctx = _libc().syscall, ctypes.c_ulong(0)
    if syscall(ctypes.c_long(calls[0]), ctypes.c_long(1), ctypes.byref(ctx)) != 0:
        return False
    syscall(ctypes.c_long(calls[1]), ctx)
    return True


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    """libc's `syscall`, called holding the GIL (a `PyDLL`): io_submit and io_getevents
    return at once, and letting the GIL go around them would hand it to any thread waiting
    for it (the loop's thread then waits to get it back), the very hand-off this avoids."""
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.PyDLL(None, use_errno=True)
        _LIBC.syscall.restype = ctypes.c_long
    return _LIBC


def _errno_text() -> str:
    code = ctypes.get_errno()
    return os.strerror(code) if code else "unknown error"
