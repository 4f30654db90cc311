"""kill -9 a process in the middle of transactions, then recover: the log is a prefix of what
was written, byte for byte, holding every acknowledged batch; the .txnindex of every segment and
the open transactions are what those batches say (the recovered segments' indexes are rebuilt
by replaying their markers); the last stable offset is the oldest open transaction's first
offset; and transactions go on after the restart."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from gregor.protocol.records import batch as rb
from gregor.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager

from .storage_helpers import with_offset
from .txn_helpers import assert_txn_state, end_txn, index_files, oracle, segment_file_batches
from .txn_sigkill_writer import config, script

WRITER = os.path.join(os.path.dirname(__file__), "txn_sigkill_writer.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_and_kill(
    log_dir: str, out_path: str, seed: int, segment_bytes: int, after_acks: int, delay: float
) -> None:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, WRITER, log_dir, str(seed), str(segment_bytes)],
            stdout=out,
            stderr=subprocess.PIPE,
            env=env,
        )
    deadline = time.monotonic() + 30
    while len(_acks(out_path)) < after_acks:
        if proc.poll() is not None:
            raise AssertionError(f"writer exited early: {proc.stderr.read().decode()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the writer is too slow")
        time.sleep(0.005)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def _acks(out_path: str) -> list[tuple[int, int]]:
    with open(out_path) as f:
        return [
            (int(p[1]), int(p[2]))
            for p in (line.split() for line in f)
            if len(p) == 3 and p[0] == "ack"
        ]


@pytest.mark.parametrize("round_", range(4))
def test_sigkill_mid_transaction(tmp_path, round_: int) -> None:
    rng = random.Random(round_)
    seed = 900 + round_
    segment_bytes = rng.choice([2048, 4096, 8192])
    log_dir = str(tmp_path / "data")
    out_path = str(tmp_path / "out.txt")
    _run_and_kill(
        log_dir,
        out_path,
        seed,
        segment_bytes,
        after_acks=rng.randint(60, 400),
        delay=rng.uniform(0, 0.05),
    )
    acks = _acks(out_path)
    assert [i for i, _ in acks] == list(range(len(acks)))
    assert not os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE))

    manager = LogManager([log_dir], config(segment_bytes))
    manager.startup()
    log = manager.get("t", 0)
    assert log is not None
    log.update_high_watermark(log.log_end_offset)
    stored = [data for _base, batches in segment_file_batches(log) for _h, data in batches]
    assert len(acks) <= len(stored) <= len(acks) + 1
    offset = 0
    steps = list(itertools.islice(script(seed), len(stored) + 1))
    for i, data in enumerate(stored):
        assert data == with_offset(steps[i][0], offset), f"batch {i} differs"
        if i < len(acks):
            assert acks[i][1] == offset
        offset = rb.read_header(data).next_offset
    assert log.log_end_offset == offset
    assert len(log.segments) > 2

    expected_index, expected_open = oracle(log)
    assert expected_index, "the script should have aborted something"
    assert_txn_state(log)
    first = min(expected_open.values(), default=None)
    assert log.first_unstable_offset == first
    assert log.last_stable_offset == (log.log_end_offset if first is None else first)

    # Transactions go on: the open ones end, and a clean restart keeps it all.
    for pid in sorted(expected_open):
        end_txn(log, pid, commit=pid % 2 == 0)
    log.update_high_watermark(log.log_end_offset)
    assert (log.first_unstable_offset, log.last_stable_offset) == (None, log.log_end_offset)
    files = index_files(log)
    manager.shutdown()
    again = LogManager([log_dir], config(segment_bytes))
    again.startup()
    log = again.get("t", 0)
    assert index_files(log) == files and log.producer_state.ongoing == {}
    assert_txn_state(log)
    again.shutdown()
