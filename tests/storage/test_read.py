"""Read slices: their shape (whole batches, from the one holding the offset, within max_bytes and
below max_offset, one segment at a time), their cost (an index search and a short scan, not a
pass over the segment), and offsets by timestamp."""

from __future__ import annotations

import os
import random
import socket

import pytest

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch
from gregor.storage.config import LogConfig
from gregor.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from gregor.storage.segment import FileSlice

from .storage_helpers import make_batch, split_batches


def _log(
    path: str, segment_bytes: int = 16384, interval: int = 512, batches: int = 300, seed: int = 1
):
    config = LogConfig(
        segment_bytes=segment_bytes, index_interval_bytes=interval, segment_index_bytes=65536
    )
    log = Log.open(path, config, now_ms=0)
    rng = random.Random(seed)
    stored = []
    for i in range(batches):
        size = rng.choice([0, 20, 200, 900]) if rng.random() > 0.03 else 1500
        b = make_batch(rng, records=rng.randint(1, 5), value_size=size, timestamp=1000 + i * 10)
        info = log.append(b, now_ms=0)
        stored.append((info.first_offset, info.last_offset, bytes(b)))
    return log, stored


def _holding(stored, offset):
    return next(i for i, (first, last, _b) in enumerate(stored) if first <= offset <= last)


def test_reads_at_random_offsets(tmp_path):
    log, stored = _log(str(tmp_path / "t-0"))
    assert len(log.segments) > 5
    rng = random.Random(2)
    bases = [s.base_offset for s in log.segments]
    for _ in range(300):
        offset = rng.randrange(log.log_end_offset)
        max_bytes = rng.choice([1, 100, 1000, 3000, 10000, 1 << 20])
        got = log.read(offset, max_bytes)
        assert isinstance(got, FileSlice)
        batches = split_batches(got.read())
        i = _holding(stored, offset)
        assert batches == [b for _f, _l, b in stored[i : i + len(batches)]]
        if len(batches) > 1:
            assert len(got) <= max_bytes
        else:
            assert len(got) <= max_bytes or len(batches[0]) > max_bytes
        # The slice stays in one segment and takes as much of it as fits.
        seg = max(j for j, b in enumerate(bases) if b <= stored[i][0])
        seg_end = bases[seg + 1] if seg + 1 < len(bases) else log.log_end_offset
        nxt = i + len(batches)
        assert stored[nxt - 1][1] < seg_end
        if nxt < len(stored) and stored[nxt][0] < seg_end:
            assert len(got) + len(stored[nxt][2]) > max_bytes
        # A slice is a position and length in the segment file: what sendfile needs.
        seg_obj = log.segments[seg]
        with open(seg_obj.log_path, "rb") as f:
            f.seek(got.position)
            assert f.read(got.length) == got.read()


def test_a_batch_larger_than_max_bytes_comes_alone(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=1 << 20), now_ms=0)
    small = build_batch([(b"k", b"v")])
    big = build_batch([(b"k", os.urandom(5000))])
    for b in (small, big, small, small):
        log.append(bytearray(b), now_ms=0)
    got = log.read(1, 100)
    assert len(got) == len(big) and rb.read_header(got.read()).base_offset == 1
    assert log.read(1, 100, min_one_batch=False) is None
    # With room for more, the following small batches come too.
    assert len(log.read(1, len(big) + 2 * len(small))) == len(big) + 2 * len(small)
    assert len(log.read(1, len(big) + 2 * len(small) - 1)) == len(big) + len(small)


def test_batch_too_large_without_min_one_batch_does_not_skip_to_the_next_segment(tmp_path):
    # Regression: the big batch ends its segment; a read that may not return it must return
    # nothing, not the next segment's batches (which would skip the big one).
    log = Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=1 << 20), now_ms=0)
    log.append(build_batch([(b"k", os.urandom(3000))]), now_ms=0)
    log.roll(now_ms=0)
    log.append(build_batch([(b"k", b"small")]), now_ms=0)
    assert log.read(0, 100, min_one_batch=False) is None
    assert rb.read_header(log.read(0, 100).read()).base_offset == 0
    assert rb.read_header(log.read(1, 100, min_one_batch=False).read()).base_offset == 1


def test_max_offset_is_respected(tmp_path):
    log, stored = _log(str(tmp_path / "t-0"), seed=3)
    rng = random.Random(4)
    for _ in range(200):
        offset = rng.randrange(log.log_end_offset)
        hw = rng.randrange(offset, log.log_end_offset + 1)
        got = log.read(offset, 1 << 20, max_offset=hw)
        i = _holding(stored, offset)
        if stored[i][1] >= hw:  # the batch holding the offset reaches the bound: nothing yet
            assert got is None
            continue
        batches = split_batches(got.read())
        last = rb.read_header(batches[-1]).last_offset
        assert last < hw
        assert batches == [b for _f, _l, b in stored[i : i + len(batches)]]
    # At the bound itself, nothing to read; beyond the log end, out of range.
    assert log.read(10, 1 << 20, max_offset=10) is None
    assert log.read(log.log_end_offset, 1 << 20) is None
    for bad in (-1, log.log_end_offset + 1):
        with pytest.raises(KafkaError) as info:
            log.read(bad, 100)
        assert info.value.code == errors.OFFSET_OUT_OF_RANGE


def test_read_cost_is_bounded_by_the_index_not_the_segment(tmp_path, monkeypatch):
    """A read touches the bytes around one index entry (plus the slice's own end), however
    big the segment: the slice goes out by sendfile, not through Python."""
    log, stored = _log(
        str(tmp_path / "t-0"), segment_bytes=4 << 20, interval=4096, batches=3000, seed=5
    )
    assert len(log.segments) == 1 and log.active_segment.size > 1 << 20
    read_bytes = []
    real_pread = os.pread

    def counting_pread(fd, n, pos):
        data = real_pread(fd, n, pos)
        read_bytes.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counting_pread)
    rng = random.Random(6)
    for _ in range(100):
        offset = rng.randrange(log.log_end_offset)
        read_bytes.clear()
        got = log.read(
            offset,
            rng.choice([1000, 65536, 1 << 20]),
            max_offset=rng.choice([None, log.log_end_offset - 1]),
        )
        assert got is not None
        # The holding batch is within one index interval (+ one batch) of an entry, and the
        # end is found the same way: a few 16 KiB scan chunks, never a megabyte.
        assert sum(read_bytes) <= 6 * 16384, sum(read_bytes)


def test_slice_can_be_sendfiled(tmp_path):
    log, stored = _log(str(tmp_path / "t-0"), batches=50, seed=7)
    got = log.read(stored[10][0], 8000)
    a, b = socket.socketpair()
    try:
        sent = 0
        while sent < got.length:
            sent += os.sendfile(a.fileno(), got.fd, got.position + sent, got.length - sent)
        a.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := b.recv(65536):
            received += chunk
    finally:
        a.close()
        b.close()
    assert received == got.read()
    assert split_batches(received)[0] == stored[10][2]


# -- offsets by timestamp ----------------------------------------------------------------------


def test_offset_for_timestamp(tmp_path):
    log, stored = _log(str(tmp_path / "t-0"), batches=120, seed=8)
    records = []
    for first, _last, b in stored:
        h = rb.read_header(b)
        records += [(first + k, h.base_timestamp) for k in range(h.records_count)]
    for target in [0, 999, 1000, 1001, 1055, 1500, 2185, 2190, 2191, 10**9]:
        want = next(((o, t) for o, t in records if t >= target), None)
        assert log.offset_for_timestamp(target) == want
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (log.log_end_offset, -1)
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (0, -1)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (stored[-1][0], 1000 + 119 * 10)


def test_offset_for_timestamp_inside_batches_and_below_the_log_start(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=0)
    log.append(build_batch([(b"a", b"")] * 3, timestamps=[100, 500, 200]), now_ms=0)  # offsets 0-2
    log.append(build_batch([(b"b", b"")] * 2, timestamps=[300, 600]), now_ms=0)  # offsets 3-4
    assert log.offset_for_timestamp(150) == (1, 500)  # the first record at or after, not the batch
    assert log.offset_for_timestamp(550) == (4, 600)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (4, 600)
    log.update_high_watermark(5)
    log.increment_log_start_offset(2)
    # Regression: offset 1 (500) is below the log start; the first record at or after 400 from
    # the log start on is offset 4, in the next batch.
    assert log.offset_for_timestamp(400) == (4, 600)
    assert log.offset_for_timestamp(150) == (2, 200)
    assert log.offset_for_timestamp(700) is None


def test_log_append_time_is_stamped(tmp_path):
    config = LogConfig(message_timestamp_type="LogAppendTime")
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=0)
    info = log.append(build_batch([(b"k", b"v")] * 3, timestamps=[1, 2, 3]), now_ms=777_000)
    assert info.log_append_time == 777_000 and info.max_timestamp == 777_000
    data = log.read_bytes(0, 1 << 20)
    h = rb.check_batch(data, 0, len(data))  # re-signed: the CRC is valid
    assert h.is_log_append_time and h.max_timestamp == 777_000
    assert log.offset_for_timestamp(500_000) == (0, 777_000)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (2, 777_000)


def test_a_read_at_the_last_batch_reads_no_header(tmp_path, monkeypatch):
    """A follower or consumer keeping up reads at the last batch appended: no index search, no
    scan of the batches before it and no read of its header (the append knew where it is and
    how long). After truncation or a rolled-back append the log is searched as usual and reads
    what is there."""
    log, stored = _log(
        str(tmp_path / "t-0"), segment_bytes=4 << 20, interval=4096, batches=400, seed=8
    )
    segment = log.active_segment
    reads = []
    real_pread = os.pread
    monkeypatch.setattr(
        os, "pread", lambda fd, n, pos: (reads.append((n, pos)), real_pread(fd, n, pos))[1]
    )
    first, _last, batch = stored[-1]
    got = log.read(first, 1 << 20)
    assert reads == []
    assert isinstance(got, FileSlice) and got.read() == batch
    # Truncated below the last batch: searched by the index again, the new last batch found.
    log.truncate_to(stored[-5][0])
    assert segment._tail is None
    for offset, _l, kept in stored[-8:-5]:
        got = log.read(offset, 1 << 20)
        assert isinstance(got, FileSlice) and split_batches(got.read())[0] == kept


def test_the_last_batch_known_is_the_one_on_disk(tmp_path):
    """What the segment keeps of its last batch appended is what a scan of its file finds,
    through appends, a truncation and appends after it; a read there returns that batch's
    bytes. A rolled-back append forgets it, and the scan finds the batch before."""
    log, stored = _log(str(tmp_path / "t-0"), segment_bytes=4 << 20, batches=40, seed=5)
    segment = log.active_segment

    def check() -> None:
        tail = segment._tail
        if tail is None:
            return
        assert tail == segment.find_batch(tail.base_offset, 0)
        assert tail.position + tail.size == segment.size
        for offset in (tail.base_offset, tail.last_offset):
            assert segment.translate_offset(offset) == tail
        got = log.read(tail.base_offset, 1 << 20)
        assert (
            got is not None
            and split_batches(got.read())[-1]
            == split_batches(os.pread(segment.fd, tail.size, tail.position))[0]
        )

    check()
    rng = random.Random(6)
    log.truncate_to(stored[-3][0])
    assert segment._tail is None
    for _ in range(3):
        info = log.append(make_batch(rng, records=3, value_size=50, timestamp=9000), now_ms=0)
        check()
        assert segment.translate_offset(info.last_offset).base_offset == info.first_offset
    last = segment._tail
    mark = segment.mark()
    log.append(make_batch(rng, records=2, value_size=10, timestamp=9100), now_ms=0)
    segment.rollback(mark, last.last_offset + 1)  # (what a failed append does)
    assert segment._tail is None
    assert segment.translate_offset(last.base_offset) == last
