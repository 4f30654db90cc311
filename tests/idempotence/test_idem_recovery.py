"""Producer state across restarts (clean, and unclean with a torn tail), truncation, retention
and expiry: after each, the state equals the one the log's batches imply, computed by the
oracle in idem_helpers from the headers on disk; and a seeded random walk over all of them."""

from __future__ import annotations

import os
import random

import pytest
from idem_helpers import (
    expected_state,
    idem_batch,
    log_batches,
    open_log,
    plain_batch,
    snapshot_files,
)

from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.producer_state import ProducerStateManager

SMALL = LogConfig(segment_bytes=700, index_interval_bytes=100, segment_index_bytes=4096)
OUT_OF_ORDER = errors.BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"].code


class Producers:
    """Idempotent producers writing to one log, remembering what they sent and where it went."""

    def __init__(self, log: Log, pids=(11, 12, 13)) -> None:
        self.log = log
        self.seq = dict.fromkeys(pids, 0)
        self.epoch = dict.fromkeys(pids, 0)
        self.sent: dict[int, list[tuple[bytearray, int, int]]] = {p: [] for p in pids}

    def send(self, pid: int, n: int, ts: int = 1_000) -> tuple[int, int]:
        records = idem_batch(pid, self.epoch[pid], self.seq[pid], n, ts=ts)
        info = self.log.append(bytearray(records))
        self.sent[pid].append((records, info.first_offset, info.last_offset))
        self.seq[pid] += n
        return info.first_offset, info.last_offset

    def resync(self) -> None:
        """After the log lost its tail: carry on where the state says each producer is (what
        a producer does when told OUT_OF_ORDER_SEQUENCE_NUMBER or after an epoch bump)."""
        for p in self.seq:
            entry = self.log.producer_state.producers.get(p)
            same_epoch = entry is not None and entry.producer_epoch == self.epoch[p]
            self.seq[p] = entry.last_seq + 1 if same_epoch and entry.batches else 0
            self.sent[p] = [s for s in self.sent[p] if s[2] < self.log.log_end_offset]

    def rounds(self, n: int, rng: random.Random | None = None) -> None:
        rng = rng or random.Random(n)
        for r in range(n):
            for pid in self.seq:
                self.send(pid, rng.randint(1, 4), ts=1_000 + r)
            if r % 3 == 0:
                self.log.append(plain_batch(rng.randint(1, 3)))


def check(log: Log) -> None:
    assert log.producer_state.producers == expected_state(log_batches(log))
    assert all(o <= log.log_end_offset for o in snapshot_files(log.directory))


def test_clean_restart_reads_the_snapshot_and_scans_nothing(tmp_path, monkeypatch) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    Producers(log).rounds(30)
    before = {p: e.copy() for p, e in log.producer_state.producers.items()}
    log.close()

    def no_scan(*args, **kwargs):
        raise AssertionError("a clean start scanned the log")

    monkeypatch.setattr(ProducerStateManager, "rebuild_from_log", no_scan)
    log = open_log(d, SMALL)
    assert log.producer_state.producers == before
    check(log)
    log.close()


@pytest.mark.parametrize("cut", ["mid-batch", "header", "whole-segment"])
def test_unclean_restart_with_a_torn_tail(tmp_path, cut: str) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    producers = Producers(log)
    producers.rounds(25)
    last_pid = 12
    first, _last = producers.send(last_pid, 3)
    recovery_point = log.recovery_point
    seg = log.active_segment
    position = seg.translate_offset(first).position
    log.close_handles()  # a crash: no close, no snapshot at the end
    if cut == "mid-batch":
        os.truncate(seg.log_path, position + 70)
    elif cut == "header":
        os.truncate(seg.log_path, position + 20)
    else:  # the whole active segment's data is gone (and so is what the batch wrote)
        os.truncate(seg.log_path, 0)
    log = open_log(d, SMALL, clean_shutdown=False, recovery_point=recovery_point)
    assert log.log_end_offset <= first
    check(log)
    # Every snapshot above the recovered log end is gone.
    assert max(snapshot_files(d), default=0) <= log.log_end_offset
    # The producer retries its torn batch: the state wants exactly that sequence, and takes it.
    records, _first, _ = producers.sent[last_pid][-1]
    info = log.append(bytearray(records))
    assert info.first_offset == log.log_end_offset - 3
    check(log)
    log.close()


def test_unclean_restart_without_any_snapshot_rebuilds_from_the_start(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    producers = Producers(log)
    producers.rounds(20)
    before = {p: e.copy() for p, e in log.producer_state.producers.items()}
    log.close_handles()
    for offset in snapshot_files(d):
        os.unlink(os.path.join(d, f"{offset:020d}.snapshot"))
    log = open_log(d, SMALL, clean_shutdown=False, recovery_point=0)
    assert log.producer_state.producers == before
    # Retries of each producer's last 5 batches are still recognised after the rebuild.
    for sent in producers.sent.values():
        for records, first, last in sent[-5:]:
            info = log.append(bytearray(records))
            assert (info.first_offset, info.last_offset) == (first, last)
    log.close()


def test_snapshot_above_the_recovered_end_is_deleted(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    Producers(log).rounds(30)
    bases = [s.base_offset for s in log.segments]
    assert snapshot_files(d)[-1] == bases[-1]
    # The tail of the previous segment is torn below the active segment's base: the active
    # segment goes, and with it the snapshot taken when it was rolled.
    prev = log.segments[-2]
    log.close_handles()
    os.truncate(prev.log_path, prev.size - 5)
    log = open_log(d, SMALL, clean_shutdown=False, recovery_point=prev.base_offset)
    assert log.log_end_offset < bases[-1]
    assert bases[-1] not in snapshot_files(d)
    check(log)
    log.close()


def test_truncation_drops_state_above_the_point(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    producers = Producers(log)
    producers.rounds(30)
    rng = random.Random(7)
    for _ in range(6):
        target = rng.randint(log.log_start_offset + 1, log.log_end_offset - 1)
        log.truncate_to(target)
        check(log)
        # Producing carries on from the truncated state: a retry of a batch above the point is
        # new again, and goes in at the log end.
        pid = rng.choice(list(producers.seq))
        entry = log.producer_state.producers.get(pid)
        producers.seq[pid] = entry.last_seq + 1 if entry else 0
        producers.send(pid, 2)
        check(log)
    log.truncate_fully_and_start_at(log.log_end_offset + 10)
    assert log.producer_state.producers == {} and snapshot_files(d) == []
    log.close()


def test_retention_deletes_old_snapshots_and_keeps_the_state(tmp_path) -> None:
    d = str(tmp_path / "t-0")
    log = open_log(d, SMALL)
    Producers(log).rounds(30)
    log.roll()
    before = {p: e.copy() for p, e in log.producer_state.producers.items()}
    log.update_high_watermark(log.log_end_offset)
    log.delete_oldest_segments(len(log.segments) - 2)
    assert all(o >= log.segments[0].base_offset for o in snapshot_files(d))
    assert log.producer_state.producers == before
    log.close()
    log = open_log(d, SMALL)
    assert log.producer_state.producers == before
    log.close()


def test_expiry(tmp_path) -> None:
    log = open_log(str(tmp_path / "t-0"))
    log.append(idem_batch(1, 0, 0, ts=10_000), now_ms=10_000)
    log.append(idem_batch(2, 0, 0, ts=50_000), now_ms=10_000)
    log.append(idem_batch(3, 0, 0, ts=10_000, transactional=True), now_ms=10_000)  # in a txn: kept
    state = log.producer_state
    assert state.remove_expired(now_ms=59_999, expiration_ms=50_000) == 0
    assert state.remove_expired(now_ms=60_000, expiration_ms=50_000) == 1
    assert sorted(state.producers) == [2, 3]
    assert state.remove_expired(now_ms=10**9, expiration_ms=50_000) == 1
    assert sorted(state.producers) == [3]
    # Forgotten means unknown: producer 1 may start anywhere again.
    log.append(idem_batch(1, 0, 500, ts=10**9))
    log.close()


def test_random_walk(tmp_path) -> None:
    """Appends (new, retried, out of order, epoch bumps), rolls, truncations, clean and unclean
    restarts with torn tails, in a seeded random order; the state matches the log after each."""
    d = str(tmp_path / "t-0")
    for seed in range(int(os.environ.get("IDEM_WALK_SEEDS", "4"))):
        rng = random.Random(seed)
        log = open_log(d, SMALL)
        log.truncate_fully_and_start_at(0)
        producers = Producers(log, pids=(1, 2, 3, 4))
        for _step in range(250):
            op = rng.random()
            pid = rng.choice(list(producers.seq))
            if op < 0.55:
                producers.send(pid, rng.randint(1, 5), ts=rng.randint(0, 10**6))
            elif op < 0.65 and producers.sent[pid]:
                back = rng.randint(1, min(7, len(producers.sent[pid])))
                records, first, last = producers.sent[pid][-back]
                entry = log.producer_state.producers.get(pid)
                try:
                    info = log.append(bytearray(records))
                    assert back <= 5 and (info.first_offset, info.last_offset) == (first, last)
                except KafkaError as exc:
                    # Not remembered (older than 5, or lost to truncation): never written twice.
                    assert exc.code == OUT_OF_ORDER or entry is None, exc
            elif op < 0.70:
                producers.epoch[pid] += 1
                producers.seq[pid] = 0
                producers.sent[pid] = []
            elif op < 0.75:
                log.roll()
            elif op < 0.82 and log.log_end_offset > 1:
                log.truncate_to(rng.randint(0, log.log_end_offset - 1))
                producers.resync()
            elif op < 0.88:
                log.close()
                log = open_log(d, SMALL)
                producers.log = log
            elif op < 0.94:
                rp = log.recovery_point
                seg = log.active_segment
                log.close_handles()
                if seg.size and rng.random() < 0.5:
                    os.truncate(seg.log_path, max(0, seg.size - rng.randint(1, 60)))
                log = open_log(d, SMALL, clean_shutdown=False, recovery_point=rp)
                producers.log = log
                producers.resync()
            check(log)
        log.close()


def test_expiry_counts_from_when_the_broker_last_saw_the_producer(tmp_path) -> None:
    """Kafka counts from the batch timestamp alone; a producer replaying week-old records would
    then be forgotten at every check. We count from the later of that and its last append."""
    d = str(tmp_path / "t-0")
    day = 86_400_000
    log = open_log(d)
    log.append(idem_batch(1, 0, 0, ts=1_000), now_ms=7 * day)  # records a week old
    assert log.producer_state.remove_expired(now_ms=7 * day + 1_000, expiration_ms=day) == 0
    assert log.producer_state.remove_expired(now_ms=8 * day, expiration_ms=day) == 1
    log.append(idem_batch(2, 0, 0, ts=1_000), now_ms=7 * day)
    log.close()
    # After a restart the producers found count as seen when the log was opened.
    log = Log.open(d, LogConfig(), now_ms=9 * day)
    assert log.producer_state.remove_expired(now_ms=9 * day + 5, expiration_ms=day) == 0
    assert log.producer_state.remove_expired(now_ms=10 * day, expiration_ms=day) == 1
    log.close()
