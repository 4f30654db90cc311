"""The sequence and epoch checks of a leader's append, on a real Log in a temp dir: duplicates of
each of the last 5 batches, gaps, epoch bumps, fencing, the INT32_MAX wrap, unknown producers,
several batches in one request (all or nothing), and followers (no checks)."""

from __future__ import annotations

import pytest
from idem_helpers import INT32_MAX, expected_state, idem_batch, log_batches, open_log, plain_batch

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.producer_state import AppendOrigin

OUT_OF_ORDER = errors.BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"].code
INVALID_EPOCH = errors.BY_NAME["INVALID_PRODUCER_EPOCH"].code
FENCED = errors.BY_NAME["PRODUCER_FENCED"].code
INVALID_TXN_STATE = errors.BY_NAME["INVALID_TXN_STATE"].code
PID = 4000


@pytest.fixture
def log(tmp_path) -> Log:
    lg = open_log(str(tmp_path / "t-0"))
    yield lg
    lg.close()


def refused(log: Log, records: bytearray, code: int) -> None:
    end, size = log.log_end_offset, log.size_in_bytes
    state = {pid: e.copy() for pid, e in log.producer_state.producers.items()}
    with pytest.raises(KafkaError) as exc:
        log.append(records)
    assert exc.value.code == code, exc.value
    assert (log.log_end_offset, log.size_in_bytes) == (end, size), "a refused append wrote"
    assert log.producer_state.producers == state, "a refused append changed the state"


def test_sequence_continues_and_state_follows_the_log(log: Log) -> None:
    seq = 0
    for n in (1, 3, 2, 5, 1, 4, 2):
        log.append(idem_batch(PID, 0, seq, n))
        seq += n
    entry = log.producer_state.producers[PID]
    assert entry.last_seq == seq - 1 and entry.producer_epoch == 0
    assert [b.first_seq for b in entry.batches] == [4, 6, 11, 12, 16]  # the last 5
    assert log.producer_state.producers == expected_state(log_batches(log))


@pytest.mark.parametrize("which", range(5))
def test_duplicate_of_each_of_the_last_5_batches_gets_its_original_offsets(
    log: Log, which: int
) -> None:
    log.append(plain_batch(3))  # offsets 0-2: producer offsets are not sequences
    sent, seq = [], 0
    for n in (2, 1, 4, 3, 2, 1):  # 6 batches: the first is no longer remembered
        records = idem_batch(PID, 0, seq, n)
        info = log.append(bytearray(records))
        sent.append((records, info.first_offset, info.last_offset))
        seq += n
    end, size = log.log_end_offset, log.size_in_bytes
    records, first, last = sent[1 + which]
    info = log.append(bytearray(records))
    assert (info.first_offset, info.last_offset) == (first, last)
    assert (info.records, info.valid_bytes) == (0, 0)
    assert (log.log_end_offset, log.size_in_bytes) == (end, size), "a duplicate was written"
    # The oldest batch fell out of the window: a retry of it is out of order, not a duplicate.
    refused(log, bytearray(sent[0][0]), OUT_OF_ORDER)


def test_duplicate_answers_the_original_log_append_time(tmp_path) -> None:
    log = open_log(str(tmp_path / "t-0"), LogConfig(message_timestamp_type="LogAppendTime"))
    first = log.append(idem_batch(PID, 0, 0, 2), now_ms=5_000)
    again = log.append(idem_batch(PID, 0, 0, 2), now_ms=9_000)
    assert first.log_append_time == again.log_append_time == 5_000
    assert again.first_offset == first.first_offset == 0 and log.log_end_offset == 2
    log.close()


def test_gap_is_out_of_order(log: Log) -> None:
    log.append(idem_batch(PID, 0, 0, 3))
    refused(log, idem_batch(PID, 0, 4), OUT_OF_ORDER)  # 3 skipped
    refused(log, idem_batch(PID, 0, 2, 2), OUT_OF_ORDER)  # overlaps, not a duplicate
    log.append(idem_batch(PID, 0, 3))


def test_epoch_bump_starts_at_zero_and_fences_the_old_epoch(log: Log) -> None:
    log.append(idem_batch(PID, 0, 0, 5))
    refused(log, idem_batch(PID, 1, 5), OUT_OF_ORDER)  # a new epoch must start at 0
    log.append(idem_batch(PID, 1, 0, 2))
    entry = log.producer_state.producers[PID]
    assert entry.producer_epoch == 1 and [(b.first_seq, b.last_seq) for b in entry.batches] == [
        (0, 1)
    ]
    refused(log, idem_batch(PID, 0, 5), INVALID_EPOCH)  # the old epoch carries on: fenced
    refused(log, idem_batch(PID, 0, 0, 5), INVALID_EPOCH)  # even its duplicates
    log.append(idem_batch(PID, 1, 2))


def test_old_epoch_of_a_transactional_batch_is_producer_fenced(log: Log) -> None:
    log.append(idem_batch(PID, 3, 0, transactional=True))
    refused(log, idem_batch(PID, 2, 1, transactional=True), FENCED)
    refused(log, idem_batch(PID, 3, 1), INVALID_TXN_STATE)  # a plain batch in an open transaction
    assert log.producer_state.producers[PID].current_txn_first_offset == 0


def test_sequence_wraps_at_int32_max(log: Log) -> None:
    log.append(idem_batch(PID, 0, INT32_MAX - 3, 2))  # INT32_MAX-3 .. INT32_MAX-2
    log.append(idem_batch(PID, 0, INT32_MAX - 1, 4))  # INT32_MAX-1, INT32_MAX, 0, 1
    entry = log.producer_state.producers[PID]
    assert (entry.batches[-1].first_seq, entry.batches[-1].last_seq) == (INT32_MAX - 1, 1)
    # The wrapped batch is a duplicate when retried, and the sequence continues at 2.
    info = log.append(idem_batch(PID, 0, INT32_MAX - 1, 4))
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (2, 5, 6)
    refused(log, idem_batch(PID, 0, 3), OUT_OF_ORDER)
    log.append(idem_batch(PID, 0, 2, 1))
    # A batch ending exactly at INT32_MAX is followed by 0.
    other = PID + 1
    log.append(idem_batch(other, 0, INT32_MAX - 1, 2))
    refused(log, idem_batch(other, 0, 1), OUT_OF_ORDER)  # 1, not 0
    log.append(idem_batch(other, 0, 0))
    assert log.producer_state.producers == expected_state(log_batches(log))


def test_unknown_producer_is_accepted_at_any_sequence(log: Log) -> None:
    log.append(idem_batch(PID, 7, 123_456, 2), now_ms=1_000)
    assert log.producer_state.producers[PID].last_seq == 123_457
    refused(log, idem_batch(PID, 7, 0), OUT_OF_ORDER)  # known from here on
    # Expired (idle for producer.id.expiration.ms): unknown again, any sequence goes.
    assert (
        log.producer_state.remove_expired(now_ms=1_000 + 86_400_000, expiration_ms=86_400_000) == 1
    )
    log.append(idem_batch(PID, 7, 999))
    assert log.producer_state.producers[PID].last_seq == 999


def test_no_sequence_with_a_producer_id_is_invalid(log: Log) -> None:
    refused(log, idem_batch(PID, 0, -1), errors.INVALID_RECORD)


def test_control_batch_from_a_client_is_invalid(log: Log) -> None:
    from gregor.protocol.records.records import build_batch

    marker = build_batch(
        [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")],
        producer_id=PID,
        producer_epoch=0,
        base_sequence=-1,
        transactional=True,
        control=True,
    )
    refused(log, marker, errors.INVALID_RECORD)
    # From a coordinator it ends the producer's transaction.
    log.append(idem_batch(PID, 0, 0, transactional=True))
    log.append(marker, origin=AppendOrigin.COORDINATOR)
    entry = log.producer_state.producers[PID]
    assert (entry.current_txn_first_offset, entry.coordinator_epoch) == (-1, 5)
    log.append(idem_batch(PID, 0, 1))  # the sequence carries on after the marker


def test_several_batches_in_one_request_are_all_or_nothing(log: Log) -> None:
    log.append(idem_batch(PID, 0, 0, 2))
    # The second batch has a gap: neither is written.
    refused(log, idem_batch(PID, 0, 2, 3) + idem_batch(PID, 0, 6, 1), OUT_OF_ORDER)
    # The second batch continues the first (not yet in the state): both are written.
    info = log.append(idem_batch(PID, 0, 2, 3) + idem_batch(PID, 0, 5, 1))
    assert (info.first_offset, info.last_offset, info.batches) == (2, 5, 2)
    # Several producers in one request, one of them fenced: nothing is written.
    log.append(idem_batch(PID, 1, 0))
    refused(log, idem_batch(PID + 1, 0, 0) + idem_batch(PID, 0, 6), INVALID_EPOCH)
    assert PID + 1 not in log.producer_state.producers
    assert log.producer_state.producers == expected_state(log_batches(log))


def test_retried_request_of_several_batches(log: Log) -> None:
    request = idem_batch(PID, 0, 0, 2) + idem_batch(PID, 0, 2, 3) + idem_batch(PID + 1, 0, 0)
    first = log.append(bytearray(request))
    again = log.append(bytearray(request))
    assert (
        (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset) == (0, 5)
    )
    assert log.log_end_offset == 6
    # A retry mixing written batches with new ones is refused, not half written.
    refused(log, idem_batch(PID, 0, 2, 3) + idem_batch(PID, 0, 5, 1), OUT_OF_ORDER)


def test_follower_takes_batches_without_checks(tmp_path) -> None:
    leader = open_log(str(tmp_path / "l-0"))
    follower = open_log(str(tmp_path / "f-0"))
    leader.append(idem_batch(PID, 2, 10, 3))
    leader.append(idem_batch(PID, 2, 13, 1))
    follower.append(bytearray(leader.read_bytes(0, 1 << 20)), assign_offsets=False)
    assert follower.producer_state.producers == leader.producer_state.producers
    # A follower copies what its leader wrote even where a leader would refuse it.
    odd = idem_batch(PID, 1, 50)  # older epoch, gap
    odd[0:8] = (4).to_bytes(8, "big")
    follower.append(odd, assign_offsets=False)
    assert follower.producer_state.producers[PID].producer_epoch == 1
    leader.close()
    follower.close()


def test_plain_batches_leave_no_state(log: Log) -> None:
    for _ in range(10):
        log.append(plain_batch(3))
    assert log.producer_state.producers == {}
