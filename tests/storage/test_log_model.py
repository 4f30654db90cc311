"""A stateful, property-based test of `Log` against a plain in-memory model.

The model is the list of batches (offsets, exact bytes, record timestamps) readable from the log
start offset on, plus the log start / end offsets, the high watermark and the leader-epoch
entries. hypothesis drives random sequences of appends, reads, truncations, rolls, log start
moves, retention deletes and clean or unclean reopens; after every step the log must agree
with the model, and every index must be what the index rule gives the segment's bytes.
"""

from __future__ import annotations

import bisect
import os
import random
import shutil
import tempfile
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch
from gregor.storage import checkpoints
from gregor.storage.config import LogConfig
from gregor.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Log

from .storage_helpers import (
    MEMORY_TMP,
    PAYLOAD,
    assert_indexes_follow_rule,
    read_file,
    split_batches,
    with_offset,
)

# A failing run shrinks for up to 5 minutes (hypothesis' own cap); let it report its example.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # a long model run

# segment.index.bytes is kept small (64 KiB; Kafka's default is 10 MiB): each roll preallocates
# and maps a new index, which costs time proportional to its size on some filesystems.
CONFIGS = [
    # small segments and a dense index: many rolls, many entries
    LogConfig(
        segment_bytes=4096,
        index_interval_bytes=100,
        max_message_bytes=3000,
        segment_index_bytes=65536,
    ),
    # time-based rolling by batch timestamps, index every ~512 bytes
    LogConfig(
        segment_bytes=16384, index_interval_bytes=512, segment_ms=20_000, segment_index_bytes=65536
    ),
    # a tiny index: rolls because the index fills (4 offset entries, 3 time entries)
    LogConfig(segment_bytes=32768, index_interval_bytes=64, segment_index_bytes=36),
    # no index entries at all in most segments
    LogConfig(segment_bytes=8192, index_interval_bytes=65536, segment_index_bytes=65536),
]


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch):
    """fsync only matters if the machine loses power, which this test does not simulate (an
    unclean reopen keeps the page cache); on a real disk it would dominate the runtime."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@dataclass
class MBatch:
    base: int
    last: int
    data: bytes
    stamps: list[int]

    @property
    def size(self) -> int:
        return len(self.data)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # In memory where possible: nothing here depends on the disk (crashes are simulated by
        # reopening without a clean close; the page cache keeps the bytes), and msync is free.
        self.root = tempfile.mkdtemp(prefix="gregor-model-", dir=MEMORY_TMP)
        self.dir = os.path.join(self.root, "topic-0")
        self.log: Log | None = None
        self.changed = True

    def teardown(self) -> None:
        if self.log is not None and not self.log.closed:
            self.log.close_handles()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- setup --------------------------------------------------------------------------------

    @initialize(
        config=st.sampled_from(CONFIGS), seed=st.integers(0, 1 << 32), prefill=st.integers(0, 30)
    )
    def setup(self, config: LogConfig, seed: int, prefill: int) -> None:
        self.config = config
        self.rng = random.Random(seed)
        self.now = 1_000_000
        self.ts = 1_000_000
        self.log = Log.open(self.dir, config, now_ms=self.now)
        self.batches: list[MBatch] = []
        self.lso = 0
        self.leo = 0
        self.hw = 0
        self.epochs: list[tuple[int, int]] = []
        self.epoch = -1
        # Start from a log with some history, so that short runs still have segments to work on.
        for i in range(prefill):
            self.append(count=self.rng.randint(1, 3), epoch_step=1 if i % 15 == 0 else 0)

    # -- model helpers ------------------------------------------------------------------------

    def _drop_below_start(self) -> None:
        self.batches = [b for b in self.batches if b.last >= self.lso]
        older = [(e, o) for e, o in self.epochs if o <= self.lso]
        keep = [(e, o) for e, o in self.epochs if o > self.lso]
        self.epochs = ([(older[-1][0], self.lso)] if older else []) + keep

    def _drop_epochs_from(self, end: int) -> None:
        self.epochs = [(e, o) for e, o in self.epochs if o < end]

    def _assign_epoch(self, epoch: int, start: int) -> None:
        """LeaderEpochCache.assign: a new, larger epoch begins at `start`."""
        if epoch < 0 or (self.epochs and epoch <= self.epochs[-1][0]):
            return
        self._drop_epochs_from(start)
        self.epochs.append((epoch, start))

    def _reloaded_epochs(self, recovered: list[str] | None = None) -> None:
        # Loading drops epochs starting at or after the log end, as Kafka's does: an epoch whose
        # start offset is the log end (left by a log start move to the end) has no record yet.
        self._drop_epochs_from(self.leo)
        # After a crash, the epochs of the batches in the recovered segments are assigned again
        # (Kafka's segment recovery does so: a crash may come between a write and the epoch
        # checkpoint), then the cache is cut at the log start.
        for path in recovered or []:
            for _pos, h in rb.iter_headers(read_file(path)):
                self._assign_epoch(h.partition_leader_epoch, h.base_offset)
        if recovered:
            self._drop_below_start()

    def _offsets(self, below: int, above: int) -> st.SearchStrategy[int]:
        """Offsets in [lso + below, leo + above], often at the edges: the log start and end,
        batch boundaries and the offsets next to them."""
        lo, hi = max(0, self.lso + below), self.leo + above
        edges = {
            self.lso - 1,
            self.lso,
            self.lso + 1,
            self.lso + 2,
            self.leo - 1,
            self.leo,
            self.leo + 1,
        }
        for b in self.batches[:2] + self.batches[-6:]:
            edges.update((b.base, b.base + 1, b.last, b.last + 1))
        if self.log is not None:
            # Around segment boundaries, and the last batches of every segment: truncations
            # into an inactive segment, reads that end a segment.
            bases = [s.base_offset for s in self.log.segments]
            for k, b in enumerate(self.batches):
                if k + 1 < len(self.batches) and bisect.bisect_right(
                    bases, self.batches[k + 1].base
                ) != bisect.bisect_right(bases, b.base):
                    edges.update((b.base, b.base + 1, b.last, b.last + 1))
                    if k:
                        edges.update((self.batches[k - 1].base, self.batches[k - 1].last + 1))
        edges = sorted(e for e in edges if lo <= e <= hi)
        return (
            st.one_of(st.integers(lo, hi), st.sampled_from(edges)) if edges else st.integers(lo, hi)
        )

    def _new_batch(self) -> tuple[bytearray, list[int]]:
        rng = self.rng
        n = rng.randint(1, 6)
        big = rng.random() < 0.1
        recs, stamps = [], []
        for _ in range(n):
            size = rng.randint(300, 1200) if big else rng.randint(0, 120)
            start = rng.randrange(0, len(PAYLOAD) - size)
            recs.append(
                (
                    None if rng.random() < 0.2 else b"k%d" % rng.randrange(100),
                    PAYLOAD[start : start + size],
                )
            )
            # Mostly rising time, sometimes a step back; records of a batch may be out of order.
            self.ts += (
                rng.choice([0, 1, 7, 100, 2500, 9000])
                if rng.random() < 0.7
                else -rng.randint(1, 5000)
            )
            stamps.append(max(0, self.ts))
        codec = rng.choice([0, 0, 0, 0, 1, 2, 3, 4])
        return build_batch(recs, timestamps=stamps, compression_type=codec), stamps

    # -- rules --------------------------------------------------------------------------------

    @rule(count=st.integers(1, 4), epoch_step=st.sampled_from([0, 0, 0, 1, -1]))
    def append(self, count: int, epoch_step: int) -> None:
        self.changed = True
        assert self.log is not None
        built = [self._new_batch() for _ in range(count)]
        buf = bytearray(b"".join(b for b, _ in built))
        epoch = self.epoch if epoch_step == 0 else (self.epoch + 1 if epoch_step > 0 else -1)
        self.now += self.rng.randint(0, 2000)
        too_big = any(len(b) > self.config.max_message_bytes for b, _ in built)
        if len(buf) > self.config.segment_bytes or too_big:
            code = (
                errors.RECORD_LIST_TOO_LARGE
                if len(buf) > self.config.segment_bytes
                else errors.MESSAGE_TOO_LARGE
            )
            with pytest.raises(KafkaError) as info:
                self.log.append(buf, leader_epoch=epoch, now_ms=self.now)
            assert info.value.code == code
            return  # refused whole; the invariants check that nothing changed
        info = self.log.append(buf, leader_epoch=epoch, now_ms=self.now)
        first = self.leo
        max_ts, max_ts_offset = -1, -1
        for b, stamps in built:
            n = len(stamps)
            stored = with_offset(b, self.leo, epoch)
            self.batches.append(MBatch(self.leo, self.leo + n - 1, stored, stamps))
            if max(stamps) > max_ts:
                max_ts, max_ts_offset = max(stamps), self.leo + n - 1
            self.leo += n
        assert (info.first_offset, info.last_offset) == (first, self.leo - 1)
        assert (info.max_timestamp, info.offset_of_max_timestamp) == (max_ts, max_ts_offset)
        assert (info.batches, info.records) == (count, sum(len(s) for _, s in built))
        assert info.valid_bytes == len(buf) and info.log_append_time == -1
        self._assign_epoch(epoch, first)
        if epoch >= 0:
            self.epoch = max(self.epoch, epoch)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        assert self.log is not None
        offset = data.draw(self._offsets(-2, 2), label="offset")
        max_bytes = data.draw(
            st.sampled_from([1, 100, 500, 2000, 5000, 1 << 20]), label="max_bytes"
        )
        max_offset = data.draw(
            st.one_of(st.none(), st.integers(self.lso, self.leo + 1)), label="max_offset"
        )
        min_one = data.draw(st.booleans(), label="min_one_batch")
        if offset < self.lso or offset > self.leo:
            with pytest.raises(KafkaError) as info:
                self.log.read(offset, max_bytes, max_offset, min_one)
            assert info.value.code == errors.OFFSET_OUT_OF_RANGE
            return
        got = self.log.read(offset, max_bytes, max_offset, min_one)
        upper = self.leo if max_offset is None else min(max_offset, self.leo)
        # The batches that may be returned: from the one holding `offset`, wholly below `upper`,
        # within the segment that holds the first (a read does not cross segments).
        start = next((i for i, b in enumerate(self.batches) if b.last >= offset), None)
        if offset >= upper or start is None or self.batches[start].last >= upper:
            assert got is None
            return
        bases = [s.base_offset for s in self.log.segments]
        seg_of = lambda b: bisect.bisect_right(bases, b.base) - 1  # noqa: E731
        candidates = []
        for b in self.batches[start:]:
            if b.last >= upper or seg_of(b) != seg_of(self.batches[start]):
                break
            candidates.append(b)
        first = candidates[0]
        if first.size > max_bytes and not min_one:
            assert got is None
            return
        assert got is not None
        raw = got.read()
        assert len(raw) == len(got)
        returned = split_batches(raw)
        n = len(returned)
        assert returned == [b.data for b in candidates[:n]], "not the model's batches, in order"
        assert n >= 1
        if n > 1 or not min_one:
            assert len(raw) <= max_bytes
        # As much as fits: the next candidate would have gone over max_bytes.
        if n < len(candidates):
            assert len(raw) + candidates[n].size > max_bytes
        offsets = [
            o
            for r in returned
            for o in range(rb.read_header(r).base_offset, rb.read_header(r).next_offset)
        ]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "offsets not dense"
        assert offsets[0] <= offset <= offsets[-1] and offsets[-1] < upper

    @rule(data=st.data())
    def offset_for_timestamp(self, data: st.DataObject) -> None:
        assert self.log is not None
        stamps = [t for b in self.batches for t in b.stamps]
        if self.batches and data.draw(st.booleans(), label="in the first batch"):
            # The first batch may straddle the log start: its records below it must not count.
            target = data.draw(st.sampled_from(self.batches[0].stamps)) + data.draw(
                st.integers(-1, 1)
            )
        elif stamps and data.draw(st.booleans(), label="near a record"):
            target = data.draw(st.sampled_from(stamps)) + data.draw(st.integers(-1, 1))
        else:
            target = data.draw(st.integers(0, self.ts + 10_000), label="timestamp")
        expected = None
        for b in self.batches:
            for i, t in enumerate(b.stamps):
                if b.base + i >= self.lso and t >= target:
                    expected = (b.base + i, t)
                    break
            if expected:
                break
        assert self.log.offset_for_timestamp(target) == expected
        assert self.log.offset_for_timestamp(LATEST_TIMESTAMP) == (self.leo, -1)
        assert self.log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (self.lso, -1)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        self.changed = True
        assert self.log is not None
        offset = data.draw(self._offsets(-2, 1), label="truncate_to")
        self.log.truncate_to(offset)
        if offset >= self.leo:
            # Nothing removed, but an epoch starting at the log end goes (Kafka's truncateTo
            # always truncates the epoch cache from the end at the log end offset).
            self._drop_epochs_from(self.leo)
            return
        if offset <= self.lso:
            self.batches = []
            self.lso = self.leo = offset
        else:
            cut = next(i for i, b in enumerate(self.batches) if b.last >= offset)
            self.leo = self.batches[cut].base  # whole batches only
            del self.batches[cut:]
            self.lso = min(self.lso, self.leo)
        self.hw = min(self.hw, self.leo)
        self._drop_epochs_from(self.leo)

    @rule(data=st.data())
    def truncate_fully(self, data: st.DataObject) -> None:
        """A follower starting over at its leader's log start, which may lie beyond its end."""
        self.changed = True
        assert self.log is not None
        offset = data.draw(st.integers(self.lso, self.leo + 100), label="start_at")
        self.log.truncate_fully_and_start_at(offset)
        self.batches = []
        self.lso = self.leo = self.hw = offset
        self.epochs = []

    @rule()
    def roll(self) -> None:
        self.changed = True
        assert self.log is not None
        before = [s.base_offset for s in self.log.segments]
        was_empty = self.log.active_segment.size == 0
        self.log.roll(now_ms=self.now)
        after = [s.base_offset for s in self.log.segments]
        assert after[-1] == self.leo and self.log.active_segment.size == 0
        if was_empty:
            assert after == before  # an empty active segment is not rolled again
        else:
            assert after == before + [self.leo]

    @rule(data=st.data())
    def move_log_start(self, data: st.DataObject) -> None:
        self.changed = True
        assert self.log is not None
        hw = data.draw(st.integers(self.lso, self.leo), label="high_watermark")
        assert self.log.update_high_watermark(hw) == hw
        self.hw = hw
        target = data.draw(
            self._offsets(-1, 0).filter(lambda o: o <= self.hw + 1), label="log_start"
        )
        if target > self.hw:
            with pytest.raises(KafkaError) as info:
                self.log.increment_log_start_offset(target)
            assert info.value.code == errors.OFFSET_OUT_OF_RANGE
            return
        assert self.log.increment_log_start_offset(target) == max(self.lso, target)
        if target > self.lso:
            self.lso = target
            self._drop_below_start()
            # Segments wholly below the new start are gone (the active one always stays).
            bases = [s.base_offset for s in self.log.segments]
            assert bases[0] <= self.lso and (len(bases) == 1 or bases[1] > self.lso), (
                "segments below the start kept"
            )

    @rule(data=st.data())
    def delete_oldest_segments(self, data: st.DataObject) -> None:
        self.changed = True
        assert self.log is not None
        bases = [s.base_offset for s in self.log.segments]
        count = data.draw(st.integers(1, len(bases)), label="count")
        deleted = self.log.delete_oldest_segments(count)
        if count >= len(bases):
            active_empty = bases[-1] == self.leo
            expect = count - 1 if active_empty else count
            new_start = self.leo if expect else self.lso
        else:
            expect = count
            new_start = bases[count]
        assert deleted == expect
        if expect:
            self.lso = max(self.lso, new_start)
            self.hw = max(self.hw, self.lso)
            self._drop_below_start()

    @rule()
    def reopen_clean(self) -> None:
        self.changed = True
        assert self.log is not None
        recovery_point = self.log.recovery_point
        self.log.close()
        self.log = Log.open(
            self.dir,
            self.config,
            log_start_offset=self.lso,
            recovery_point=recovery_point,
            now_ms=self.now,
        )
        self.hw = self.leo
        assert self.log.recovery_point == self.leo
        self._reloaded_epochs()

    @rule(data=st.data())
    def reopen_unclean(self, data: st.DataObject) -> None:
        self.changed = True
        assert self.log is not None
        recovery_point = data.draw(st.integers(0, self.log.recovery_point), label="recovery_point")
        # The segments recovery re-reads: from the one holding the recovery point on.
        bases = [s.base_offset for s in self.log.segments]
        first = max([i for i, b in enumerate(bases) if b <= recovery_point], default=0)
        recovered = [s.log_path for s in self.log.segments[first:]]
        self.log.close_handles()  # a crash: no flush, no trim; the page cache keeps the bytes
        self.log = Log.open(
            self.dir,
            self.config,
            log_start_offset=self.lso,
            recovery_point=recovery_point,
            clean_shutdown=False,
            now_ms=self.now,
        )
        self.hw = self.lso
        # As Kafka: the recovered tail was checked, not fsynced; the next flush makes it durable
        assert self.log.recovery_point == min(recovery_point, self.leo)
        self._reloaded_epochs(recovered)

    @precondition(
        lambda self: self.log is not None and self.log.recovery_point < self.log.log_end_offset
    )
    @rule()
    def flush(self) -> None:
        self.changed = True
        assert self.log is not None
        self.log.flush()
        assert self.log.recovery_point == self.leo

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def offsets_agree(self) -> None:
        if self.log is None:
            return
        log = self.log
        assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (
            self.lso,
            self.leo,
            self.hw,
        )
        assert log.log_start_offset <= log.high_watermark <= log.log_end_offset
        assert log.recovery_point <= log.log_end_offset
        if self.batches:
            assert self.batches[-1].last + 1 == self.leo
        bases = [s.base_offset for s in log.segments]
        assert bases == sorted(set(bases)) and bases[0] <= self.lso
        assert sorted(n for n in os.listdir(self.dir) if n.endswith(".log")) == [
            f"{b:020d}.log" for b in bases
        ]

    @invariant()
    def leader_epochs_agree(self) -> None:
        if self.log is None:
            return
        assert self.log.leader_epochs.entries == self.epochs
        assert (
            checkpoints.read_epochs(os.path.join(self.dir, "leader-epoch-checkpoint"))
            == self.epochs
        )

    @invariant()
    def contents_and_indexes(self) -> None:
        if self.log is None or not self.changed:
            return  # reads change nothing: check after the steps that can
        self.changed = False
        # Everything from the log start, batch by batch, byte for byte.
        offset, got = self.lso, []
        while offset < self.leo:
            raw = self.log.read_bytes(offset, 1 << 30)
            got.extend(split_batches(raw))
            offset = rb.read_header(got[-1]).next_offset
        assert got == [b.data for b in self.batches]
        assert_indexes_follow_rule(self.log)


LogMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLogModel = LogMachine.TestCase
