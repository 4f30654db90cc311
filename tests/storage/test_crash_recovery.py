"""Crash recovery: damage a log's files as a crash (or a disk) would, reopen it uncleanly, and
check that every batch before the damage is served byte for byte, nothing after it, that the
indexes are those a clean write of the surviving batches makes, and that appends go on."""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass, replace

import pytest

from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch, read_batch_records
from gregor.storage.config import LogConfig
from gregor.storage.log import Log

from .storage_helpers import (
    all_batches,
    assert_indexes_follow_rule,
    fresh_copy,
    index_entries,
    make_batch,
    read_file,
    segment_batches,
    split_batches,
)

CONFIG = LogConfig(segment_bytes=8192, index_interval_bytes=300, segment_index_bytes=65536)


@dataclass
class Written:
    directory: str
    config: LogConfig
    segments: list[tuple[int, list[bytes]]]  # as on disk: (base offset, batches)

    @property
    def bases(self) -> list[int]:
        return [b for b, _ in self.segments]

    def seg_path(self, k: int, suffix: str = ".log") -> str:
        return os.path.join(self.directory, f"{self.segments[k][0]:020d}{suffix}")


def write_log(
    directory: str, config: LogConfig = CONFIG, batches: int = 70, seed: int = 7
) -> Written:
    """A log of several segments left as a crash leaves it: nothing trimmed, the tail unflushed.

    Batch timestamps are distinct (so a time-index entry names exactly one batch) and not
    monotonic; the last batch is small, with 3 records."""
    rng = random.Random(seed)
    log = Log.open(directory, config, now_ms=0)
    order = list(range(batches))
    for i in range(0, batches - 6, 9):  # some local disorder of the timestamps
        order[i], order[i + 4] = order[i + 4], order[i]
    for i in range(batches - 1):
        log.append(
            make_batch(
                rng,
                timestamp=1_000_000 + order[i] * 1000,
                spread=500,
                compression=rng.choice([0, 0, 0, 1, 4]),
            ),
            leader_epoch=i // 20,
            now_ms=0,
        )
    log.append(
        make_batch(rng, records=3, value_size=20, timestamp=9_000_000), leader_epoch=3, now_ms=0
    )
    log.close_handles()  # crash: the active segment's index stays preallocated and untrimmed
    written = Written(directory, config, segment_batches(directory))
    assert len(written.segments) >= 4, "the test wants several segments"
    return written


_PRISTINE: dict[tuple, Written] = {}


@pytest.fixture(scope="module")
def pristine_root(tmp_path_factory):
    return tmp_path_factory.mktemp("pristine")


def pristine(
    root, tmp_path, config: LogConfig = CONFIG, batches: int = 70, seed: int = 7
) -> Written:
    """A private copy (under tmp_path/orig) of a crashed log written once per module."""
    key = (config, batches, seed)
    if key not in _PRISTINE:
        _PRISTINE[key] = write_log(
            str(root / f"log-{len(_PRISTINE)}" / "t-0"), config, batches, seed
        )
    src = _PRISTINE[key]
    dst = str(tmp_path / "orig" / "t-0")
    shutil.copytree(src.directory, dst)
    return Written(dst, config, src.segments)


def next_offset(segments: list[tuple[int, list[bytes]]]) -> int:
    for base, batches in reversed(segments):
        if batches:
            return rb.read_header(batches[-1]).next_offset
        return base
    return 0


class Checker:
    """Compares recovered logs with what should survive; fresh rebuilds are cached."""

    def __init__(self, scratch: str, config: LogConfig) -> None:
        self.scratch = scratch
        self.config = config
        self._fresh: dict[tuple, list] = {}
        self.checked = 0

    def fresh_entries(self, survivors: list[tuple[int, list[bytes]]]) -> list:
        key = tuple((b, len(bs)) for b, bs in survivors)
        if key not in self._fresh:
            d = os.path.join(self.scratch, f"fresh-{len(self._fresh)}", "t-0")
            fresh = fresh_copy(d, self.config, survivors)
            self._fresh[key] = index_entries(fresh)
            assert all_batches(fresh) == [b for _, bs in survivors for b in bs]
            fresh.close()
        return self._fresh[key]

    def check(
        self, log: Log, survivors: list[tuple[int, list[bytes]]], append: bool = True
    ) -> None:
        expected = [b for _, bs in survivors for b in bs]
        end = next_offset(survivors)
        assert log.log_end_offset == end
        assert [s.base_offset for s in log.segments] == [b for b, _ in survivors]
        assert all_batches(log) == expected
        assert segment_batches(log.directory) == survivors  # nothing else left in the files
        assert_indexes_follow_rule(log)
        assert index_entries(log) == self.fresh_entries(survivors)
        assert log.recovery_point <= end  # the recovered tail is checked, not yet fsynced
        if append:
            info = log.append(build_batch([(b"after", b"crash")] * 2, base_timestamp=5), now_ms=0)
            assert (info.first_offset, info.last_offset) == (end, end + 1)
            data = log.read_bytes(end, 1 << 20)
            _h, recs = read_batch_records(data)
            assert [(r.offset, r.key, r.value) for r in recs] == [
                (end, b"after", b"crash"),
                (end + 1, b"after", b"crash"),
            ]
        self.checked += 1


def reopen(directory: str, config: LogConfig, recovery_point: int) -> Log:
    return Log.open(
        directory, config, clean_shutdown=False, recovery_point=recovery_point, now_ms=0
    )


def fresh_scratch(src: str, root: str, n: int) -> str:
    dst = os.path.join(root, f"case-{n}", "t-0")
    shutil.copytree(src, dst)
    return dst


def survivors_after(written: Written, k: int, good_bytes: int) -> list[tuple[int, list[bytes]]]:
    """Segments 0..k-1 whole, and the batches of segment k that end within `good_bytes`."""
    out = [(b, list(bs)) for b, bs in written.segments[:k]]
    kept, pos = [], 0
    for batch in written.segments[k][1]:
        if pos + len(batch) > good_bytes:
            break
        kept.append(batch)
        pos += len(batch)
    out.append((written.segments[k][0], kept))
    return out


# -- (a) torn writes ---------------------------------------------------------------------------


def test_cut_active_segment_at_every_byte_of_its_last_batch(pristine_root, tmp_path):
    written = pristine(pristine_root, tmp_path)
    checker = Checker(str(tmp_path / "fresh"), CONFIG)
    k = len(written.segments) - 1
    last_seg = written.segments[k][1]
    size = sum(len(b) for b in last_seg)
    last_len = len(last_seg[-1])
    assert 60 < last_len < 200
    for n, cut in enumerate(range(size - last_len, size + 1)):
        d = fresh_scratch(written.directory, str(tmp_path), n)
        os.truncate(os.path.join(d, os.path.basename(written.seg_path(k))), cut)
        # A recovery point at the active segment: only it is re-read, the rest index-checked;
        # every 16th case with 0: everything re-read.
        rp = 0 if n % 16 == 0 else written.bases[k]
        log = reopen(d, CONFIG, rp)
        checker.check(log, survivors_after(written, k, cut), append=n % 4 == 0)
        log.close_handles()
        shutil.rmtree(os.path.dirname(d))
    assert checker.checked == last_len + 1


def test_cut_at_random_bytes_anywhere(pristine_root, tmp_path):
    written = pristine(pristine_root, tmp_path, seed=11)
    checker = Checker(str(tmp_path / "fresh"), CONFIG)
    rng = random.Random(3)
    for n in range(25):
        k = rng.randrange(len(written.segments))
        size = sum(len(b) for b in written.segments[k][1])
        cut = rng.randrange(size)
        d = fresh_scratch(written.directory, str(tmp_path), n)
        os.truncate(os.path.join(d, os.path.basename(written.seg_path(k))), cut)
        # The cut segment must be at or after the recovery point (a torn write is unflushed).
        rp = rng.choice([0, written.bases[k]])
        log = reopen(d, CONFIG, rp)
        checker.check(log, survivors_after(written, k, cut))
        log.close_handles()
        shutil.rmtree(os.path.dirname(d))


def test_cut_inactive_segment_below_the_recovery_point_still_ends_the_log(pristine_root, tmp_path):
    """A cut below the recovery point is no crash (that data was fsynced) but a disk fault; the
    index check notices it and the log ends there rather than keeping a gap."""
    written = pristine(pristine_root, tmp_path, seed=5)
    checker = Checker(str(tmp_path / "fresh"), CONFIG)
    for n, k in enumerate([0, 1]):
        batches = written.segments[k][1]
        cut = sum(len(b) for b in batches[: len(batches) // 2]) + 10  # inside a middle batch
        d = fresh_scratch(written.directory, str(tmp_path), n)
        os.truncate(os.path.join(d, os.path.basename(written.seg_path(k))), cut)
        log = reopen(d, CONFIG, next_offset(written.segments))
        checker.check(log, survivors_after(written, k, cut))
        log.close_handles()


def test_garbage_after_the_last_batch_is_cut(pristine_root, tmp_path):
    written = pristine(pristine_root, tmp_path, seed=12)
    checker = Checker(str(tmp_path / "fresh"), CONFIG)
    k = len(written.segments) - 1
    size = sum(len(b) for b in written.segments[k][1])
    for n, junk in enumerate(
        [b"\x00" * 200, os.urandom(5000), b"\x00" * 7, written.segments[0][1][0]]
    ):
        d = fresh_scratch(written.directory, str(tmp_path), n)
        with open(os.path.join(d, os.path.basename(written.seg_path(k))), "ab") as f:
            f.write(junk)
        log = reopen(d, CONFIG, written.bases[k])
        # A copy of an old batch after the end: its offsets go backwards, so it is cut too.
        checker.check(log, survivors_after(written, k, size))
        log.close_handles()


# -- (b) flipped bytes -------------------------------------------------------------------------


def test_flipped_bytes_end_the_log_before_the_damaged_batch(pristine_root, tmp_path):
    written = pristine(pristine_root, tmp_path, seed=13)
    checker = Checker(str(tmp_path / "fresh"), CONFIG)
    rng = random.Random(4)
    for n in range(30):
        k = rng.randrange(len(written.segments))
        batches = written.segments[k][1]
        j = rng.randrange(len(batches))
        start = sum(len(b) for b in batches[:j])
        # Anywhere but baseOffset and partitionLeaderEpoch, which Kafka's format leaves outside
        # the CRC (a flip there cannot be told from a real value).
        within = rng.choice([rng.randrange(8, 12), rng.randrange(16, len(batches[j]))])
        d = fresh_scratch(written.directory, str(tmp_path), n)
        path = os.path.join(d, os.path.basename(written.seg_path(k)))
        with open(path, "r+b") as f:
            f.seek(start + within)
            byte = f.read(1)[0]
            f.seek(start + within)
            f.write(bytes([byte ^ rng.randint(1, 255)]))
        log = reopen(d, CONFIG, rng.choice([0, written.bases[k]]))
        checker.check(log, survivors_after(written, k, start))
        log.close_handles()
        shutil.rmtree(os.path.dirname(d))


# -- (c) index damage --------------------------------------------------------------------------


def _damage_index(path: str, how: str, rng: random.Random, entry_size: int) -> None:
    data = bytearray(read_file(path))
    if how == "delete":
        os.unlink(path)
        return
    if how == "truncate-entry":  # whole entries lost
        data = data[: max(0, len(data) - entry_size * rng.randint(1, 3))]
    elif how == "truncate-mid":  # cut inside an entry
        data = data[: max(1, len(data) - rng.randint(1, entry_size - 1))]
    elif how == "flip":
        n = len(data) // entry_size
        i = rng.randrange(n) * entry_size + rng.randrange(entry_size)
        data[i] ^= rng.randint(1, 255)
    elif how == "garbage":
        data += os.urandom(rng.choice([entry_size, 3 * entry_size, 5]))
    elif how == "zeros":
        data += bytes(entry_size * 2)
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize(
    "how", ["delete", "truncate-entry", "truncate-mid", "flip", "garbage", "zeros"]
)
def test_damaged_index_is_rebuilt(pristine_root, tmp_path, suffix, how):
    written = pristine(pristine_root, tmp_path, seed=21)
    checker = Checker(str(tmp_path / "fresh"), CONFIG)
    rng = random.Random(hash((suffix, how)) & 0xFFFF)
    whole = [(b, list(bs)) for b, bs in written.segments]
    entry = 8 if suffix == ".index" else 12
    n = 0
    for k in (0, len(written.segments) - 2):  # inactive segments: the first and the last
        if how == "flip" and os.path.getsize(written.seg_path(k, suffix)) == 0:
            continue
        # recovery point at the log end: the damaged segment is only index-checked;
        # at 0: everything re-read. Both must end with the indexes a clean write makes.
        for rp in (next_offset(written.segments), 0):
            d = fresh_scratch(written.directory, str(tmp_path), n)
            n += 1
            _damage_index(
                os.path.join(d, os.path.basename(written.seg_path(k, suffix))), how, rng, entry
            )
            log = reopen(d, CONFIG, rp)
            checker.check(log, whole, append=False)
            log.close()
            # ... and written back trimmed, in Kafka's layout.
            for base, off_entries, time_entries in index_entries(log):
                assert os.path.getsize(os.path.join(d, f"{base:020d}.index")) == 8 * len(
                    off_entries
                )
                assert os.path.getsize(os.path.join(d, f"{base:020d}.timeindex")) == 12 * len(
                    time_entries
                )
            shutil.rmtree(os.path.dirname(d))
    assert n >= 2


def test_missing_index_after_clean_shutdown_is_rebuilt(pristine_root, tmp_path):
    written = pristine(pristine_root, tmp_path, seed=22)
    checker = Checker(str(tmp_path / "fresh"), CONFIG)
    d = written.directory
    Log.open(d, CONFIG, clean_shutdown=False, now_ms=0).close()  # a clean close first
    os.unlink(written.seg_path(1, ".index"))
    os.unlink(written.seg_path(2, ".timeindex"))
    os.unlink(written.seg_path(len(written.segments) - 1, ".index"))
    log = Log.open(d, CONFIG, clean_shutdown=True, now_ms=0)
    checker.check(log, [(b, list(bs)) for b, bs in written.segments])


def test_recovery_with_kafka_default_index_size(pristine_root, tmp_path):
    """Kafka's 10 MiB segment.index.bytes: active indexes preallocated as Kafka leaves them
    after a crash are recovered without the preallocated region being written."""
    config = replace(CONFIG, segment_index_bytes=10 * 1024 * 1024)
    written = pristine(pristine_root, tmp_path, config, batches=40, seed=23)
    k = len(written.segments) - 1
    for suffix in (".index", ".timeindex"):  # sparse, as Kafka preallocates an active index
        os.truncate(written.seg_path(k, suffix), 10 * 1024 * 1024)
    size = sum(len(b) for b in written.segments[k][1])
    os.truncate(written.seg_path(k), size - 5)
    log = reopen(written.directory, config, 0)
    Checker(str(tmp_path / "fresh"), config).check(log, survivors_after(written, k, size - 5))
    for suffix in (".index", ".timeindex"):
        st = os.stat(written.seg_path(k, suffix))
        assert st.st_blocks * 512 < 1024 * 1024, "recovery wrote over the preallocated index"
    log.close()
    assert os.path.getsize(written.seg_path(k, ".index")) % 8 == 0
    assert os.path.getsize(written.seg_path(k, ".index")) < 4096


def test_leftover_files_of_interrupted_operations_are_removed(pristine_root, tmp_path):
    written = pristine(pristine_root, tmp_path, seed=24)
    d = written.directory
    # An unfinished asynchronous delete, a temp file, an index whose log is gone.
    os.rename(written.seg_path(0), written.seg_path(0) + ".deleted")
    open(os.path.join(d, "leader-epoch-checkpoint.tmp"), "w").close()
    shutil.copy(written.seg_path(1, ".index"), os.path.join(d, f"{10**9:020d}.index"))
    log = reopen(d, CONFIG, 0)
    names = os.listdir(d)
    assert not any(n.endswith((".deleted", ".tmp")) for n in names)
    assert f"{10**9:020d}.index" not in names
    assert not os.path.exists(written.seg_path(0, ".index"))
    assert [s.base_offset for s in log.segments] == written.bases[1:]
    assert log.log_start_offset == written.bases[1]
    assert all_batches(log) == [b for _, bs in written.segments[1:] for b in bs]
    assert_indexes_follow_rule(log)


def test_recovered_batches_are_valid_and_dense(pristine_root, tmp_path):
    """After a cut in the middle of the log, what is served passes check_batch and its offsets
    are dense from the log start to the log end."""
    written = pristine(pristine_root, tmp_path, seed=25)
    k = 2
    cut = sum(len(b) for b in written.segments[k][1]) // 2
    os.truncate(written.seg_path(k), cut)
    log = reopen(written.directory, CONFIG, 0)
    data = b"".join(all_batches(log))
    expect = log.log_start_offset
    for batch in split_batches(data):
        h = rb.check_batch(batch, 0, len(batch))
        assert h.base_offset == expect
        expect = h.next_offset
    assert expect == log.log_end_offset
    assert [s.base_offset for s in log.segments] == written.bases[: k + 1]


def test_index_entry_breaking_the_interval_rule_is_rebuilt_away(pristine_root, tmp_path):
    """An entry that names a real batch end but sits where the index rule puts none (here a
    stray (base, 0) entry in an otherwise empty index) is still damage."""
    config = replace(CONFIG, index_interval_bytes=1 << 20)  # no offset entries at all
    d = str(tmp_path / "orig" / "t-0")
    log = Log.open(d, config, now_ms=0)
    rng = random.Random(2)
    for i in range(30):
        log.append(make_batch(rng, records=1, timestamp=1000 + i), now_ms=0)
        if i % 10 == 9:
            log.roll(now_ms=0)
    log.close_handles()
    written = Written(d, config, segment_batches(d))
    assert all(os.path.getsize(written.seg_path(k, ".index")) == 0 for k in range(3))
    with open(written.seg_path(1, ".index"), "ab") as f:
        f.write(bytes(8))  # relative offset 0, position 0: the first batch, which has one record
    log = reopen(d, config, next_offset(written.segments))
    Checker(str(tmp_path / "fresh"), config).check(
        log, [(b, list(bs)) for b, bs in written.segments]
    )
    assert log.segments[1].offset_index.entries == 0
