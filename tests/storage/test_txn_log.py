"""Transactions in a partition log: markers written by a coordinator, the open transactions and
the last stable offset over interleaved producers, the .txnindex of aborts across segments and
rolls, the aborted transactions a read_committed fetch gets, and all of it kept consistent
across truncation, recovery, snapshots, retention and DeleteRecords."""

from __future__ import annotations

import os
import struct

import pytest
from crc32c import crc32c

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch, build_control_batch
from gregor.storage.config import LogConfig
from gregor.storage.log import AbortedTxn, Log
from gregor.storage.producer_state import AppendOrigin

from .txn_helpers import (
    KAFKA_ENTRY,
    assert_txn_state,
    end_txn,
    index_files,
    kafka_index_bytes,
    open_log,
    oracle,
    plain,
    segment_file_batches,
    txn_batch,
)

INVALID_EPOCH = errors.BY_NAME["INVALID_PRODUCER_EPOCH"].code
COORDINATOR_FENCED = errors.BY_NAME["TRANSACTION_COORDINATOR_FENCED"].code
FENCED = errors.BY_NAME["PRODUCER_FENCED"].code
A, B, C = 101, 202, 303
SMALL = LogConfig(segment_bytes=256, index_interval_bytes=64)


@pytest.fixture
def log(tmp_path) -> Log:
    lg = open_log(str(tmp_path / "t-0"))
    yield lg
    lg.close()


def step(log: Log, records, **kw) -> int:
    """Append and move the high watermark to the log end (one replica); the first offset."""
    info = log.append(records, **kw)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def marker(log: Log, pid: int, commit: bool, **kw) -> int:
    offset = end_txn(log, pid, commit, **kw)
    log.update_high_watermark(log.log_end_offset)
    return offset


# -- the control batch ------------------------------------------------------------------------


def _zigzag(n: int) -> bytes:
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


@pytest.mark.parametrize(("committed", "kind"), [(True, 1), (False, 0)])
def test_build_control_batch_is_kafkas_end_transaction_marker(committed: bool, kind: int) -> None:
    # Kafka's MemoryRecords.withEndTransactionMarker: one record, offset and timestamp delta 0,
    # key = (version 0, type), value = (version 0, coordinatorEpoch), no headers; a
    # transactional control batch without sequence.
    key = struct.pack(">hh", 0, kind)
    value = struct.pack(">hi", 0, 77)
    body = b"\x00" + _zigzag(0) + _zigzag(0) + _zigzag(4) + key + _zigzag(6) + value + _zigzag(0)
    record = _zigzag(len(body)) + body
    tail = struct.pack(">hiqqqhii", 0x30, 0, 1_234, 1_234, 9_000_000_001, 5, -1, 1) + record
    expected = (
        struct.pack(">qiib", 0, 4 + 1 + 4 + len(tail), -1, 2)
        + struct.pack(">I", crc32c(tail))
        + tail
    )
    got = build_control_batch(9_000_000_001, 5, 77, committed, 1_234)
    assert bytes(got) == expected
    header = rb.check_batch(got, 0, len(got))
    assert header.is_control and header.is_transactional and header.base_sequence == -1


# -- the last stable offset -------------------------------------------------------------------


def test_lso_over_interleaved_transactions_of_several_producers(log: Log) -> None:
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, 0)
    step(log, plain(2))  # 0-1
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, 2)
    a0 = step(log, txn_batch(A, 0, 2))  # A: 2-3
    assert (a0, log.first_unstable_offset, log.last_stable_offset) == (2, 2, 2)
    b0 = step(log, txn_batch(B, 0, 1))  # B: 4
    step(log, plain(1))  # 5
    step(log, txn_batch(A, 2, 1))  # A: 6
    c0 = step(log, txn_batch(C, 0, 3))  # C: 7-9
    assert (log.first_unstable_offset, log.last_stable_offset) == (2, 2)
    assert list(log.producer_state.ongoing.items()) == [(a0, A), (b0, B), (c0, C)]
    m_b = marker(log, B, commit=True)  # B ends first: A still holds the LSO
    assert (m_b, log.first_unstable_offset, log.last_stable_offset) == (10, 2, 2)
    m_a = marker(log, A, commit=False)
    assert (m_a, log.first_unstable_offset, log.last_stable_offset) == (11, c0, c0)
    a1 = step(log, txn_batch(A, 3, 1))  # A's next transaction: 12
    assert (log.first_unstable_offset, log.last_stable_offset) == (c0, c0)
    marker(log, C, commit=True)  # 13
    assert (log.first_unstable_offset, log.last_stable_offset) == (a1, a1)
    marker(log, A, commit=True)  # 14
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, 15)
    assert log.producer_state.ongoing == {}
    # Only A's abort is indexed, with the LSO it left: C's first offset (B had committed).
    assert index_files(log) == {0: kafka_index_bytes([(A, a0, m_a, c0)])}
    assert_txn_state(log)


def test_lso_waits_for_the_high_watermark_to_pass_the_marker(log: Log) -> None:
    log.append(plain(3))
    first = log.append(txn_batch(A, 0, 2)).first_offset  # 3-4
    assert (log.first_unstable_offset, log.last_stable_offset) == (3, 0)  # hw still 0
    log.update_high_watermark(4)
    assert log.last_stable_offset == 3
    m = end_txn(log, A, commit=True)  # 5: decided, not yet replicated
    assert log.first_unstable_offset == first and log.last_stable_offset == first
    log.update_high_watermark(5)  # the marker itself is not below it yet
    assert log.last_stable_offset == first
    log.update_high_watermark(m + 1)
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, m + 1)
    # An open transaction behind one decided but unreplicated: the lower first offset wins.
    b = log.append(txn_batch(B, 0, 1)).first_offset  # 6
    log.append(txn_batch(C, 0, 1))  # 7
    end_txn(log, B, commit=False)  # 8
    log.update_high_watermark(8)
    assert (log.first_unstable_offset, log.last_stable_offset) == (b, b)
    log.update_high_watermark(9)
    assert (log.first_unstable_offset, log.last_stable_offset) == (7, 7)


def test_the_lso_never_goes_below_the_log_start(log: Log) -> None:
    step(log, plain(2))
    step(log, txn_batch(A, 0, 3))  # 2-4
    step(log, plain(2))  # 5-6
    log.increment_log_start_offset(4)  # DeleteRecords into the open transaction
    assert (log.first_unstable_offset, log.last_stable_offset) == (4, 4)
    marker(log, A, commit=False)
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, 8)
    assert log.collect_aborted_transactions(4, 8) == [AbortedTxn(A, 2)]


# -- markers from the coordinator ---------------------------------------------------------------


def test_a_commit_writes_no_entry_and_a_marker_without_a_transaction_ends_nothing(log: Log) -> None:
    step(log, txn_batch(A, 0, 1))
    marker(log, A, commit=True)
    m = marker(log, B, commit=False)  # B never wrote here: allowed, as Kafka writes it
    assert m == 2 and log.log_end_offset == 3
    assert index_files(log) == {} and not any(
        n.endswith(".txnindex") for n in os.listdir(log.directory)
    )
    assert log.producer_state.producers[B].current_txn_first_offset == -1
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, 3)
    assert log.collect_aborted_transactions(0, 3) == []


def test_marker_epochs(log: Log) -> None:
    step(log, txn_batch(A, 0, 1, epoch=3))  # 0
    end, size = log.log_end_offset, log.size_in_bytes
    with pytest.raises(KafkaError) as exc:
        end_txn(log, A, False, epoch=2)  # an older producer epoch
    assert exc.value.code == INVALID_EPOCH
    assert (log.log_end_offset, log.size_in_bytes) == (end, size)
    marker(log, A, commit=False, epoch=3, coordinator_epoch=4)  # 1
    step(log, txn_batch(A, 1, 1, epoch=3))  # 2
    # A marker from an older coordinator is fenced; one from the same or a newer goes in.
    with pytest.raises(KafkaError) as exc:
        end_txn(log, A, True, epoch=3, coordinator_epoch=3)
    assert exc.value.code == COORDINATOR_FENCED
    assert log.producer_state.producers[A].current_txn_first_offset == 2
    # A newer producer epoch (the coordinator bumped it to abort a timed-out transaction)
    # becomes the producer's: its old epoch is fenced from then on.
    marker(log, A, commit=False, epoch=4, coordinator_epoch=4)  # 3
    entry = log.producer_state.producers[A]
    assert (entry.producer_epoch, entry.coordinator_epoch, entry.current_txn_first_offset) == (
        4,
        4,
        -1,
    )
    with pytest.raises(KafkaError) as exc:
        log.append(txn_batch(A, 2, 1, epoch=3))
    assert exc.value.code == FENCED
    with pytest.raises(KafkaError) as exc:
        end_txn(log, A, True, epoch=3, coordinator_epoch=4)
    assert exc.value.code == INVALID_EPOCH
    assert index_files(log) == {0: kafka_index_bytes([(A, 0, 1, 2), (A, 2, 3, 4)])}
    assert_txn_state(log)


def _control(key: bytes | None, value: bytes | None, n: int = 1) -> bytearray:
    return build_batch(
        [(key, value)] * n, producer_id=A, producer_epoch=0, transactional=True, control=True
    )


def _resigned(batch: bytearray, at: int, data: bytes) -> bytearray:
    out = bytearray(batch)
    out[at : at + len(data)] = data
    rb.resign(out, 0, len(out))
    return out


@pytest.mark.parametrize(
    ("name", "bad", "code"),
    [
        (
            "a 3-byte key",
            _control(b"\x00\x00\x00", struct.pack(">hi", 0, 0)),
            errors.INVALID_RECORD,
        ),
        ("no key", _control(None, struct.pack(">hi", 0, 0)), errors.INVALID_RECORD),
        (
            "a KRaft control type",
            _control(struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 0)),
            errors.INVALID_RECORD,
        ),
        (
            "an unknown type",
            _control(struct.pack(">hh", 0, 9), struct.pack(">hi", 0, 0)),
            errors.INVALID_RECORD,
        ),
        (
            "a negative key version",
            _control(struct.pack(">hh", -1, 0), struct.pack(">hi", 0, 0)),
            errors.INVALID_RECORD,
        ),
        ("a 5-byte value", _control(struct.pack(">hh", 0, 0), b"\x00" * 5), errors.INVALID_RECORD),
        (
            "a negative value version",
            _control(struct.pack(">hh", 0, 1), struct.pack(">hi", -2, 0)),
            errors.INVALID_RECORD,
        ),
        # Records that do not decode, with a CRC that matches them: a key length past the end.
        (
            "garbage records",
            _resigned(build_control_batch(A, 0, 0, False, 0), rb.HEADER_SIZE + 4, b"\x7e"),
            errors.CORRUPT_MESSAGE,
        ),
        (
            "a bad CRC",
            _resigned(build_control_batch(A, 0, 0, False, 0), 0, b"")[:-1] + b"\x99",
            errors.CORRUPT_MESSAGE,
        ),
    ],
)
def test_a_corrupt_control_batch_is_refused_whole(
    log: Log, name: str, bad: bytearray, code: int
) -> None:
    step(log, txn_batch(A, 0, 2))
    end, size = log.log_end_offset, log.size_in_bytes
    state = {p: e.copy() for p, e in log.producer_state.producers.items()}
    # A good batch first in the same request: nothing of it may be written either.
    request = bytearray(plain(1)) + bytearray(bad)
    with pytest.raises(KafkaError) as exc:
        log.append(request, origin=AppendOrigin.COORDINATOR)
    assert exc.value.code == code, (name, exc.value)
    assert (log.log_end_offset, log.size_in_bytes) == (end, size)
    assert log.producer_state.producers == state
    assert log.first_unstable_offset == 0 and index_files(log) == {}


# -- the index across segments ----------------------------------------------------------------


def _brute_force(log: Log, start: int, upper: int) -> list[AbortedTxn]:
    expected, _ = oracle(log)
    entries = [e for base in sorted(expected) for e in expected[base]]
    return [AbortedTxn(p, f) for p, f, last, _lso in entries if last >= start and f < upper]


def _spanning_log(directory: str) -> Log:
    """Transactions of three producers over many small segments: some begin segments before
    their marker, some abort, some commit, plain batches between."""
    lg = open_log(directory, SMALL)
    seqs = {A: 0, B: 0, C: 0}

    def data(pid: int, n: int = 2) -> None:
        step(lg, txn_batch(pid, seqs[pid], n))
        seqs[pid] += n

    data(A)
    step(lg, plain(3))
    data(B)
    data(A)
    step(lg, plain(2))
    data(C, 3)
    marker(lg, A, commit=False)
    step(lg, plain(4))
    data(B)
    marker(lg, C, commit=True)
    data(A)
    step(lg, plain(5))
    marker(lg, B, commit=False)
    data(C)
    data(B)
    step(lg, plain(2))
    marker(lg, A, commit=False)
    marker(lg, C, commit=False)
    step(lg, plain(6))
    data(A, 1)
    marker(lg, B, commit=True)
    marker(lg, A, commit=False)
    step(lg, plain(3))
    return lg


def test_collect_aborted_transactions_across_segments_and_rolls(tmp_path) -> None:
    log = _spanning_log(str(tmp_path / "t-0"))
    assert len(log.segments) >= 8
    expected, _ = oracle(log)
    assert len(expected) >= 3, "aborts should land in several segments"
    assert_txn_state(log)
    end = log.log_end_offset
    for start in range(end + 1):
        for upper in range(start, end + 2):
            assert log.collect_aborted_transactions(start, upper) == _brute_force(
                log, start, upper
            ), (start, upper)
    log.close()


def test_collect_reads_no_file_of_a_segment_without_aborts(tmp_path, monkeypatch) -> None:
    log = open_log(str(tmp_path / "t-0"), SMALL)
    for i in range(30):
        step(log, txn_batch(A, i, 1))
        marker(log, A, commit=True)
    assert len(log.segments) > 5 and index_files(log) == {}
    opened = []
    real_open = os.open
    monkeypatch.setattr(
        os, "open", lambda path, *a, **k: opened.append(path) or real_open(path, *a, **k)
    )
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    assert not [p for p in opened if str(p).endswith(".txnindex")]
    log.close()


# -- truncation ---------------------------------------------------------------------------------


def test_truncation_in_the_middle_of_a_transaction(tmp_path) -> None:
    log = _spanning_log(str(tmp_path / "t-0"))
    history = [data for _base, batches in segment_file_batches(log) for _h, data in batches]
    expected_full = index_files(log)
    # Every truncation point: the txn index and the open set are what the rest of the log says
    # (an ABORT cut off reopens its transaction), and appending what was cut restores it all.
    for offset in range(log.log_end_offset - 1, 0, -3):
        log.truncate_to(offset)
        assert log.log_end_offset <= offset
        assert_txn_state(log)
        first = min(log.producer_state.ongoing, default=None)
        assert log.first_unstable_offset == first
        assert log.last_stable_offset == (
            log.high_watermark if first is None else min(first, log.high_watermark)
        )
        # Put the rest back as a follower copies its leader's batches, and the same rolls
        # come back with them.
        for batch in _batches_from(history, log.log_end_offset):
            log.append(bytearray(batch), assign_offsets=False)
        log.update_high_watermark(log.log_end_offset)
        assert [d for _b, batches in segment_file_batches(log) for _h, d in batches] == history
        assert index_files(log) == expected_full
    log.close()


def _batches_from(history: list[bytes], offset: int) -> list[bytes]:
    return [b for b in history if rb.read_header(b).base_offset >= offset]


def test_truncate_fully_forgets_every_transaction(log: Log) -> None:
    step(log, txn_batch(A, 0, 2))
    step(log, txn_batch(B, 0, 2))
    marker(log, A, commit=False)
    assert index_files(log)
    log.truncate_fully_and_start_at(50)
    assert index_files(log) == {} and log.producer_state.ongoing == {}
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, 50)
    step(log, txn_batch(C, 0, 1))
    assert log.first_unstable_offset == 50


# -- reopening ------------------------------------------------------------------------------------


def test_a_clean_restart_rebuilds_the_open_set_from_the_snapshot(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = _spanning_log(d)
    step(log, txn_batch(B, 0, 2, epoch=1))
    step(log, txn_batch(C, 0, 1, epoch=1))
    ongoing, files = dict(log.producer_state.ongoing), index_files(log)
    first = log.first_unstable_offset
    log.close()
    log = open_log(d, SMALL)
    assert dict(log.producer_state.ongoing) == ongoing and log.first_unstable_offset == first
    assert log.last_stable_offset == first and index_files(log) == files
    assert_txn_state(log)
    marker(log, B, commit=False, epoch=1)
    assert_txn_state(log)
    log.close()


@pytest.mark.parametrize("how", ["deleted", "garbage", "stale", "recovery-point-in-the-middle"])
def test_recovery_rebuilds_the_txn_indexes(tmp_path, how: str) -> None:
    d = str(tmp_path / "t-0")
    log = _spanning_log(d)
    step(log, txn_batch(B, 0, 2, epoch=1))  # left open by the crash
    files = index_files(log)
    bases = [s.base_offset for s in log.segments]
    recovery_point = 0
    if how == "recovery-point-in-the-middle":
        recovery_point = bases[len(bases) // 2]
    log.close_handles()  # a crash: no close, no snapshot at the end
    for base in bases:
        path = os.path.join(d, f"{base:020d}.txnindex")
        if base < recovery_point:
            continue  # below the recovery point: fsynced, and trusted
        if how == "garbage" and os.path.exists(path):
            with open(path, "r+b") as f:
                f.write(b"\x12" * 40)
        elif how == "stale":
            # Entries of a transaction whose marker did not survive: they must go.
            with open(path, "ab") as f:
                f.write(kafka_index_bytes([(C, 1, 10_000, 10_001)]))
        elif os.path.exists(path):
            os.unlink(path)
    log = open_log(d, SMALL, recovery_point=recovery_point, clean_shutdown=False)
    log.update_high_watermark(log.log_end_offset)
    assert index_files(log) == files
    assert_txn_state(log)
    log.close()


def test_recovery_after_a_torn_marker_reopens_its_transaction(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    step(log, txn_batch(A, 0, 2))
    step(log, txn_batch(B, 0, 2))
    m = marker(log, A, commit=False)
    seg = log.active_segment
    position = seg.translate_offset(m).position
    assert index_files(log)[seg.base_offset]
    log.close_handles()
    os.truncate(seg.log_path, position + 30)  # the marker half written
    log = open_log(d, SMALL, recovery_point=0, clean_shutdown=False)
    log.update_high_watermark(log.log_end_offset)
    assert log.log_end_offset == m and index_files(log) == {}
    assert dict(log.producer_state.ongoing) == {0: A, 2: B}
    assert log.last_stable_offset == 0
    marker(log, A, commit=False)
    assert_txn_state(log)
    log.close()


def test_an_old_segments_bad_txn_index_is_rebuilt_from_its_base(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = _spanning_log(d)
    files = index_files(log)
    victim = sorted(files)[0]
    log.flush()
    log.close_handles()
    path = os.path.join(d, f"{victim:020d}.txnindex")
    with open(path, "r+b") as f:
        f.write(struct.pack(">h", 7))  # an unknown version: fails the sanity check
    log = open_log(d, SMALL, recovery_point=log.log_end_offset, clean_shutdown=False)
    assert index_files(log) == files
    log.close()


# -- the log start moves ------------------------------------------------------------------------


def test_retention_deletes_txn_indexes_with_their_segments(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = _spanning_log(d)
    files = index_files(log)
    gone = []
    log.file_deleter = gone.extend
    n = log.delete_oldest_segments(4)
    assert n == 4
    for seg in gone:
        assert seg.txn_index.path.endswith(".txnindex.deleted")
        if seg.base_offset in files:
            assert os.path.exists(seg.txn_index.path)
        seg.delete()
    assert not any(n.endswith(".deleted") for n in os.listdir(d))
    kept = {b: data for b, data in files.items() if b >= log.log_start_offset}
    assert index_files(log) == kept
    # What a fetch from the new start gets: every abort still overlapping it (its first offset
    # may be in a segment gone: the client drops from there, which is below the fetch).
    entries = [
        KAFKA_ENTRY.unpack_from(data, p)[1:]
        for _b, data in sorted(kept.items())
        for p in range(0, len(data), 34)
    ]
    start, end = log.log_start_offset, log.log_end_offset
    for upper in range(start, end + 1):
        expected = [AbortedTxn(p, f) for p, f, last, _ in entries if last >= start and f < upper]
        assert log.collect_aborted_transactions(start, upper) == expected
    assert any(f < start for _p, f, last, _ in entries)
    log.close()
