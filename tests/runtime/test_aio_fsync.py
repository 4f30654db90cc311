"""fsyncs handed to the kernel as Linux AIO (runtime/aio_fsync.py): reported on the loop once the
kernel says so, in the order submitted, their descriptors closed; a descriptor the kernel
cannot fsync that way is refused at submission, and the caller fsyncs another way."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from gregor.runtime.aio_fsync import AioFsync, aio_fsync_available

pytestmark = pytest.mark.skipif(not aio_fsync_available(), reason="no Linux AIO here")


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_fsyncs_are_reported_on_the_loop_in_order_and_their_descriptors_closed(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        aio = AioFsync.open(loop)
        assert aio is not None
        files = [os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT) for i in range(3)]
        reported: list[tuple[int, BaseException | None, bool]] = []
        all_done = loop.create_future()
        given: list[list[int]] = []
        for i in range(5):
            os.write(files[i % 3], b"x" * 4096)
            fds = [os.dup(files[i % 3])] + ([os.dup(files[2])] if i == 3 else [])
            given.append(fds)

            def done(exc: BaseException | None, i: int = i) -> None:
                on_loop = threading.current_thread() is threading.main_thread()
                reported.append((i, exc, on_loop))
                if len(reported) == 5:
                    all_done.set_result(None)

            assert aio.submit(fds, done)
        assert reported == []  # nothing is reported from within `submit`
        await asyncio.wait_for(all_done, 10)
        assert reported == [(i, None, True) for i in range(5)]
        assert all(_closed(fd) for fds in given for fd in fds)
        aio.stop()
        for fd in files:
            os.close(fd)

    asyncio.run(go())


def test_a_descriptor_with_no_aio_fsync_is_refused_at_submission_and_left_open() -> None:
    async def go() -> None:
        aio = AioFsync.open(asyncio.get_running_loop())
        assert aio is not None
        read_end, write_end = os.pipe()
        called: list[BaseException | None] = []
        assert not aio.submit([write_end], called.append)
        assert not _closed(write_end)  # still the caller's: it fsyncs another way
        assert not aio.submit([write_end], called.append)  # refused from now on
        await asyncio.sleep(0.05)
        assert called == []
        aio.stop()
        os.close(read_end)
        os.close(write_end)

    asyncio.run(go())


def test_stop_waits_for_the_fsyncs_under_way(tmp_path: Path) -> None:
    async def go() -> None:
        aio = AioFsync.open(asyncio.get_running_loop())
        assert aio is not None
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"y" * (1 << 20))
        dup = os.dup(fd)
        called: list[BaseException | None] = []
        assert aio.submit([dup], called.append)
        aio.stop()  # returns once the kernel is done with it
        assert _closed(dup)
        assert called == []  # dropped: nobody waits once stopped
        again = os.dup(fd)
        assert not aio.submit([again], called.append)  # stopped: the caller fsyncs it
        os.close(again)
        os.close(fd)

    asyncio.run(go())


def test_the_iocbs_are_free_again_once_submitted(tmp_path: Path) -> None:
    """`submit` writes each fsync's iocb into one block it reuses: the kernel copies an iocb
    when it takes it, so what the block holds afterwards changes nothing of an fsync under
    way (here: scribbled over at once, and the fsyncs still report their own completions)."""

    async def go() -> None:
        loop = asyncio.get_running_loop()
        aio = AioFsync.open(loop)
        assert aio is not None
        fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
        reported: list[tuple[int, BaseException | None]] = []
        all_done = loop.create_future()
        given = []
        for i in range(4):
            os.write(fd, b"x" * 4096)
            fds = [os.dup(fd) for _ in range(1 + i % 2)]
            given += fds

            def done(exc: BaseException | None, i: int = i) -> None:
                reported.append((i, exc))
                if len(reported) == 4:
                    all_done.set_result(None)

            assert aio.submit(fds, done)
            for iocb in aio._iocbs:  # what a later submit would do to the block
                iocb.aio_fildes, iocb.aio_data = 2**31 - 1, 0
        await asyncio.wait_for(all_done, 10)
        assert reported == [(i, None) for i in range(4)]
        assert all(_closed(f) for f in given)
        aio.stop()
        os.close(fd)

    asyncio.run(go())
