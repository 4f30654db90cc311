"""Work held until a dispatch's deferred answers are written (runtime/connection.py): the
metadata log's fsync starts only once the Fetch answers the append completed have left."""

from __future__ import annotations

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
