"""The metadata log's flush thread (runtime/flush_thread.py): each fsync runs off the event loop,
in the order submitted, and is reported back on the loop, with the error it raised if any."""

from __future__ import annotations

import asyncio
import threading

from gregor.runtime.flush_thread import FlushThread


def test_flushes_run_off_the_loop_in_order_and_report_on_the_loop() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        flusher = FlushThread(loop, "raft-7-flush")
        ran: list[tuple[int, str]] = []
        reported: list[tuple[int, BaseException | None, bool]] = []
        all_done = loop.create_future()

        def sync_of(i: int):
            def sync() -> None:
                ran.append((i, threading.current_thread().name))
                if i == 2:
                    raise OSError("disk gone")

            return sync

        def done_of(i: int):
            def done(exc: BaseException | None) -> None:
                on_loop = threading.current_thread() is threading.main_thread()
                reported.append((i, exc, on_loop))
                if len(reported) == 4:
                    all_done.set_result(None)

            return done

        for i in range(4):
            flusher.submit(sync_of(i), done_of(i))
        await asyncio.wait_for(all_done, 10)
        flusher.stop()
        assert ran == [(i, "raft-7-flush") for i in range(4)]
        assert [(i, on_loop) for i, _exc, on_loop in reported] == [(i, True) for i in range(4)]
        errors = [exc for _i, exc, _on_loop in reported]
        assert errors[:2] == [None, None] and errors[3] is None
        assert isinstance(errors[2], OSError) and str(errors[2]) == "disk gone"

    asyncio.run(go())


def test_stop_waits_for_a_flush_under_way_and_later_flushes_run_inline() -> None:
    async def go() -> None:
        loop = asyncio.get_running_loop()
        flusher = FlushThread(loop, "raft-8-flush")
        started, release = threading.Event(), threading.Event()
        finished: list[str] = []

        def slow() -> None:
            started.set()
            release.wait(10)
            finished.append("slow")

        flusher.submit(slow, lambda exc: None)
        assert started.wait(10)
        threading.Timer(0.05, release.set).start()
        flusher.stop()  # returns only once the flush under way is done
        assert finished == ["slow"]
        told: list[BaseException | None] = []
        flusher.submit(lambda: finished.append("after stop"), told.append)
        assert finished == ["slow", "after stop"] and told == []

    asyncio.run(go())
