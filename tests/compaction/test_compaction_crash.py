"""A crash at any point of a cleaning: the log reopened after it (an unclean open) is correct.

Crashes are injected in-process as an exception no code catches (a BaseException), at every
file rename of the swap (`.cleaned` -> `.swap`, old segments -> `.deleted`, `.swap` -> live),
half-way through writing a `.cleaned` segment, and between two groups; the process's objects
are then dropped as a crash drops them, and the log is opened again from its directory."""

from __future__ import annotations

import os
import random
from dataclasses import replace

import pytest
from compaction_helpers import (
    Model,
    append_random,
    check_deduplicated,
    check_log,
    leftovers,
    new_manager,
    read_records,
)

from gregor.storage import cleaner as cleaner_module
from gregor.storage.cleaner import LogCleaner
from gregor.storage.config import LogConfig
from gregor.storage.log import Log

T0 = 1_700_000_000_000


class Crash(BaseException):
    """The process dies here: nothing catches it, no cleanup runs."""


CONFIG = LogConfig(
    segment_bytes=2000,
    index_interval_bytes=200,
    cleanup_policy="compact",
    min_cleanable_dirty_ratio=0.0,
    delete_retention_ms=1 << 40,
    file_delete_delay_ms=0,
)


def dirty_log(path: str, seed: int = 1):
    mgr, log, cleaner = new_manager(path, CONFIG)
    model = Model()
    rng = random.Random(seed)
    append_random(log, model, rng, batches=40, keys=12, now_ms=T0)
    # A first cleaning, so the next one has a clean section and groups of cleaned segments.
    assert cleaner.clean_once(T0) is not None
    append_random(log, model, rng, batches=40, keys=12, now_ms=T0)
    log.roll(now_ms=T0)
    append_random(log, model, rng, batches=2, keys=12, now_ms=T0)
    return mgr, log, cleaner, model


def crash_and_reopen(log: Log, recovery_point: int) -> Log:
    """Drop everything as a SIGKILL would, then open the directory again, uncleanly."""
    log.close_handles()
    reopened = Log.open(
        log.directory, log.config, recovery_point=recovery_point, clean_shutdown=False
    )
    reopened.update_high_watermark(reopened.log_end_offset)
    return reopened


def check_recovered(reopened: Log, model: Model, tmp_path) -> None:
    assert not leftovers(reopened.directory)
    assert not [n for n in os.listdir(reopened.directory) if n.endswith(".deleted")]
    check_log(reopened, model)
    # It is a log like any other: it can be cleaned again, completely.
    reopened.close()
    mgr, log, cleaner = new_manager(str(tmp_path), CONFIG)
    log.update_high_watermark(log.log_end_offset)  # as the broker's HW checkpoint would
    stats = cleaner.clean_once(T0, ("t", 0), force=True)
    assert stats is not None and stats.end_offset == log.active_segment.base_offset
    check_deduplicated(log, model, stats.end_offset)
    check_log(log, model)
    mgr.shutdown()


def count_renames(tmp_path, monkeypatch) -> int:
    mgr, log, cleaner, _ = dirty_log(str(tmp_path / "count"))
    calls = [0]
    real = os.rename

    def counting(a, b):
        calls[0] += 1
        real(a, b)

    monkeypatch.setattr(os, "rename", counting)
    stats = cleaner.clean_once(T0)
    monkeypatch.setattr(os, "rename", real)
    assert stats is not None and stats.groups >= 2
    mgr.shutdown()
    return calls[0]


def test_a_crash_at_every_rename_of_the_swap(tmp_path, monkeypatch):
    renames = count_renames(tmp_path, monkeypatch)
    # Two groups or more: 3 renames to .swap, 3 per old segment to .deleted, 3 to live names.
    assert renames >= 2 * 9
    real = os.rename
    for k in range(renames):
        path = tmp_path / f"crash-{k}"
        mgr, log, cleaner, model = dirty_log(str(path))
        calls = [0]

        def crashing(a, b, k=k, calls=calls):
            if calls[0] == k:
                raise Crash(f"rename {k}: {a} -> {b}")
            calls[0] += 1
            real(a, b)

        monkeypatch.setattr(os, "rename", crashing)
        with pytest.raises(Crash):
            cleaner.clean_once(T0)
        monkeypatch.setattr(os, "rename", real)
        for recovery_point in (0, log.recovery_point):
            reopened = crash_and_reopen(log, recovery_point)
            check_log(reopened, model)
            assert not leftovers(reopened.directory)
            reopened.close_handles()
            log = reopened
        check_recovered(log, model, path)


@pytest.mark.parametrize("writes_before_crash", [0, 1, 3])
def test_a_crash_while_writing_a_cleaned_segment(tmp_path, monkeypatch, writes_before_crash):
    mgr, log, cleaner, model = dirty_log(str(tmp_path))
    writes = [0]
    real = cleaner_module.CleaningTask._write

    def crashing(self, dest, data, infos):
        if writes[0] == writes_before_crash:
            # Half of this write reaches the file, then the process dies.
            os.write(dest.fd, bytes(data[: len(data) // 2]))
            raise Crash("mid-write")
        writes[0] += 1
        real(self, dest, data, infos)

    monkeypatch.setattr(cleaner_module.CleaningTask, "_write", crashing)
    # Small I/O buffers: many writes per cleaned segment.
    cleaner.config = replace(cleaner.config, io_buffer_size=128)
    with pytest.raises(Crash):
        cleaner.clean_once(T0)
    monkeypatch.undo()
    assert [n for n in os.listdir(log.directory) if n.endswith(".cleaned")]
    reopened = crash_and_reopen(log, log.recovery_point)
    check_recovered(reopened, model, tmp_path)


def test_a_crash_between_two_groups(tmp_path, monkeypatch):
    """The first group is swapped in, the second is written (.cleaned) but not swapped."""
    mgr, log, cleaner, model = dirty_log(str(tmp_path))
    real = LogCleaner.swap
    swaps = [0]

    def crashing(self, task, group):
        if swaps[0] == 1:
            raise Crash("after one swap")
        swaps[0] += 1
        return real(self, task, group)

    monkeypatch.setattr(LogCleaner, "swap", crashing)
    with pytest.raises(Crash):
        cleaner.clean_once(T0)
    monkeypatch.undo()
    assert [n for n in os.listdir(log.directory) if n.endswith(".cleaned")]
    before = read_records(log)
    reopened = crash_and_reopen(log, log.recovery_point)
    assert read_records(reopened) == before  # the first group stays swapped in
    check_recovered(reopened, model, tmp_path)


def test_a_leftover_swap_from_an_unfinished_split_of_renames_is_dropped(tmp_path, monkeypatch):
    """The log file got its .swap name but an index is still .cleaned: recovery drops the
    attempt (Kafka's rule: no .swap at or above the lowest .cleaned base survives)."""
    mgr, log, cleaner, model = dirty_log(str(tmp_path))
    real = os.rename
    calls = [0]

    def crashing(a, b):
        if calls[0] == 1:  # the log is .swap, the offset index about to be
            raise Crash("between the renames of one segment's files")
        calls[0] += 1
        real(a, b)

    monkeypatch.setattr(os, "rename", crashing)
    with pytest.raises(Crash):
        cleaner.clean_once(T0)
    monkeypatch.setattr(os, "rename", real)
    names = os.listdir(log.directory)
    assert any(n.endswith(".log.swap") for n in names) and any(
        n.endswith(".index.cleaned") for n in names
    )
    before = read_records(log)
    reopened = crash_and_reopen(log, log.recovery_point)
    assert read_records(reopened) == before  # nothing swapped: the old segments stay
    check_recovered(reopened, model, tmp_path)
