"""The source task's copy path, without clusters: batches split into runs of one partition, and
a run's delivery callbacks, which fail the task when B's offsets show a record missing."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gregor.mirror.replicator import SourceTask, _chunks

pytestmark = pytest.mark.unit


class Msg:
    def __init__(self, topic: str, partition: int, offset: int, error: Any = None):
        self._t, self._p, self._o, self._e = topic, partition, offset, error

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def error(self) -> Any:
        return self._e


class NotFatal:
    def fatal(self) -> bool:
        return False


def test_a_batch_splits_into_runs_of_one_partition() -> None:
    batch = [Msg("a", 0, 5), Msg("a", 0, 6), Msg("a", 1, 0), Msg("b", 1, 0), Msg("b", 1, 1)]
    batch += [Msg("", -1, -1, NotFatal()), Msg("b", 1, 2), Msg("a", 0, 7)]
    assert _chunks(batch) == [
        ("a", 0, 0, 2),
        ("a", 1, 2, 3),
        ("b", 1, 3, 5),
        ("b", 1, 6, 7),
        ("a", 0, 7, 8),
    ]
    assert _chunks([]) == []


def task() -> Any:
    t = object.__new__(SourceTask)
    t.flow = SimpleNamespace(name="A->B")
    t.failure = None
    t.runs = []
    t._written_run = lambda *run: t.runs.append(run)
    return t


def delivered(offset: int) -> Any:
    return SimpleNamespace(offset=lambda: offset, topic=lambda: "A.orders")


def test_a_run_whose_copies_are_contiguous_on_b_is_written() -> None:
    t = task()
    batch = [Msg("orders", 0, o) for o in (10, 11, 12, 14)]  # a gap upstream: offsets listed
    first, last = SourceTask._chunk_callbacks(t, batch, ("orders", 0), 0, 4)
    first(None, delivered(40))
    last(None, delivered(43))
    assert t.failure is None
    assert t.runs == [(("orders", 0), 10, [10, 11, 12, 14], 40, 4)]
    one = task()
    only, same = SourceTask._chunk_callbacks(one, [Msg("orders", 1, 3)], ("orders", 1), 0, 1)
    assert only is same
    only(None, delivered(7))
    assert one.runs == [(("orders", 1), 3, None, 7, 1)]


def test_a_record_missing_between_the_first_and_the_last_fails_the_task() -> None:
    t = task()
    batch = [Msg("orders", 0, o) for o in range(10, 14)]
    first, last = SourceTask._chunk_callbacks(t, batch, ("orders", 0), 0, 4)
    first(None, delivered(40))
    last(None, delivered(42))  # 4 records, 3 offsets: one was lost
    assert t.failure == "A->B: 4 records of orders-0 landed at offsets 40 to 42 of A.orders"
    assert t.runs == []
