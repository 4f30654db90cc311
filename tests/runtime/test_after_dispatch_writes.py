"""Work held until a dispatch's deferred answers are written (runtime/connection.py): the
metadata log's fsync starts only once the Fetch answers the append completed have left."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gregor.runtime import connection
from gregor.runtime.connection import after_dispatch_writes, write_deferred_now


class _Conn:
    """What the deferred writer touches of a connection: its output and `_write`."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log
        self._deferred, self._out, self.closed = True, [b"answer"], False

    def _write(self) -> None:
        self.log.append(f"write {self.name}")
        self._out = []


def test_outside_a_dispatch_the_work_runs_at_once() -> None:
    log: list[str] = []
    after_dispatch_writes(lambda: log.append("fsync"))
    assert log == ["fsync"]


def test_in_a_dispatch_the_work_runs_after_the_deferred_writes() -> None:
    log: list[str] = []
    deferred = connection._DEFERRED
    deferred.waiting = []  # a dispatch under way (as Connection._consume_received sets it)
    try:
        waiting: list[Any] = [_Conn("follower-2", log), _Conn("follower-3", log)]
        deferred.waiting.extend(waiting)
        after_dispatch_writes(lambda: log.append("fsync"))
        assert log == []  # held while the dispatch runs
        deferred.waiting.append(_Conn("client", log))  # deferred after it was asked for
        connection._write_deferred(deferred)  # the dispatch ends
    finally:
        deferred.waiting, deferred.after = None, None
    assert log == ["write follower-2", "write follower-3", "write client", "fsync"]


def test_answers_written_now_leave_before_the_rest_of_the_dispatch() -> None:
    log: list[str] = []
    deferred = connection._DEFERRED
    deferred.waiting = []
    try:
        deferred.waiting.append(_Conn("client", log))  # type: ignore[arg-type]
        write_deferred_now()
        assert log == ["write client"] and deferred.waiting == []  # still in the dispatch
        deferred.waiting.append(_Conn("later", log))  # type: ignore[arg-type]
        connection._write_deferred(deferred)
    finally:
        deferred.waiting, deferred.after = None, None
    assert log == ["write client", "write later"]


def _append_in_a_dispatch(
    make_driver: Callable[[], Any], log: list[str], before: Callable[[], object] = lambda: None
) -> None:
    """`make_driver()`'s append run inside a request's dispatch, node 2's Fetch parked on the
    leader; "rest of the request" logged after it, then the dispatch ends."""
    import asyncio

    from gregor.protocol import api_keys
    from gregor.runtime.raft_driver import _Inbound

    deferred = connection._DEFERRED

    async def main() -> None:
        driver = make_driver()
        parked = _Inbound(api_keys.FETCH, 17, 9)
        parked.later = connection.Later()
        # as a connection does with an answer completed during another's dispatch
        parked.later.add_done_callback(lambda _: deferred.waiting.append(_Conn("node-2", log)))
        driver._inbound[(2, 41)] = parked
        driver._started.set()
        deferred.waiting = []  # the dispatch of the request that appends
        try:
            before()
            assert driver.append([b"record"]) == 7
            log.append("rest of the request")
            connection._write_deferred(deferred)  # the dispatch ends
        finally:
            deferred.waiting, deferred.after = None, None
            driver._stopped = True
            if driver._timer is not None:
                driver._timer.cancel()

    asyncio.run(main())


def test_a_leaders_fetch_answers_leave_before_the_rest_of_the_request_that_appended() -> None:
    """RaftDriver.append writes the Fetch answers its append completed at once, inside the
    dispatch of the request that appended; work held for the dispatch's writes still waits
    for its end."""
    from gregor.raft import messages as m
    from gregor.raft.node import Effects, Send
    from gregor.runtime.raft_driver import RaftDriver

    log: list[str] = []

    class LeaderStub:
        def append(self, records: Any, now_ms: int) -> int:
            log.append("append")
            return 7

        def poll(self, now_ms: int) -> Effects:  # the parked Fetch of node 2 is answered
            answer = m.FetchResponse(0, 1, 3, 5, 0, (), None, None, 41)
            return Effects(outbound=[Send(2, answer)], next_deadline_ms=now_ms + 1000)

    def make_driver() -> Any:
        driver = RaftDriver(1, log=None, store=None)  # type: ignore[arg-type]
        driver.node = LeaderStub()  # type: ignore[assignment]
        return driver

    _append_in_a_dispatch(
        make_driver, log, lambda: after_dispatch_writes(lambda: log.append("fsync"))
    )
    assert log == ["append", "write node-2", "rest of the request", "fsync"]


def test_a_leaders_fsync_starts_once_its_fetch_answers_are_written() -> None:
    """The flush an append asks for starts as soon as the Fetch answers that append completed
    are written, before the rest of the request that appended (not at the dispatch's end)."""
    from gregor.raft import messages as m
    from gregor.raft.node import Effects, Send
    from gregor.runtime.raft_driver import RaftDriver

    log: list[str] = []

    class LeaderStub:
        def append(self, records: Any, now_ms: int) -> int:
            log.append("append")
            return 7

        def poll(self, now_ms: int) -> Effects:  # node 2's parked Fetch answered, a flush asked
            answer = m.FetchResponse(0, 1, 3, 5, 0, (), None, None, 41)
            return Effects(outbound=[Send(2, answer)], next_deadline_ms=now_ms + 1000, flush=8)

    class LogStub:
        def begin_flush(self, offset: int) -> Any:
            raise AssertionError("the AIO path is taken")

        def begin_flush_fds(self, offset: int) -> Any:
            return [], lambda: None

    class AioStub:
        def submit(self, fds: Any, done: Any) -> bool:
            log.append("fsync")
            return True

    def make_driver() -> Any:
        driver = RaftDriver(1, log=LogStub(), store=None)  # type: ignore[arg-type]
        driver.node = LeaderStub()  # type: ignore[assignment]
        driver._aio, driver._aio_tried = AioStub(), True  # type: ignore[assignment]
        return driver

    _append_in_a_dispatch(make_driver, log)
    assert log == ["append", "write node-2", "fsync", "rest of the request"]
