"""The broker freezes what start-up made (runtime/gc_settings.py): live objects are moved into
the permanent generation (no collection walks them again), garbage cycles are collected first
rather than frozen with them."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from gregor.runtime.gc_settings import freeze_after_start


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_live_objects_are_frozen_and_garbage_cycles_collected_first() -> None:
    kept = Node()
    dropped = weakref.ref(Node())
    assert dropped() is not None  # a cycle: still there until collected
    frozen = freeze_after_start()
    assert frozen > 0 and frozen == gc.get_freeze_count()
    assert dropped() is None  # collected, not frozen
    tracked = gc.get_objects()  # the permanent generation is left out of every generation
    assert not any(o is kept for o in tracked)
    later = Node()
    assert any(o is later for o in gc.get_objects(0))
