"""kill -9 a process that is appending, then recover: every acknowledged batch is there byte for
byte, offsets are dense, the indexes are those of a clean write, and appends go on."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from gregor.protocol.records import batch as rb
from gregor.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager

from .sigkill_writer import batch_for, config, epoch_for
from .storage_helpers import (
    all_batches,
    assert_indexes_follow_rule,
    assert_same_as_fresh,
    with_offset,
)

WRITER = os.path.join(os.path.dirname(__file__), "sigkill_writer.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _start(
    log_dir: str, out_path: str, seed: int, segment_bytes: int, *pause: str
) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = open(out_path, "w")
    try:
        return subprocess.Popen(
            [sys.executable, WRITER, log_dir, str(seed), str(segment_bytes), *pause],
            stdout=out,
            stderr=subprocess.PIPE,
            env=env,
        )
    finally:
        out.close()


def _wait_for(proc: subprocess.Popen, out_path: str, word: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(out_path) as f:
            if any(line.strip() == word or line.startswith(word + " ") for line in f):
                return
        if proc.poll() is not None:
            raise AssertionError(f"writer exited early: {proc.stderr.read().decode()}")
        time.sleep(0.01)
    proc.kill()
    raise AssertionError(f"writer never printed {word!r}")


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    proc.stderr.close()


def _acks(out_path: str) -> list[tuple[int, int, int]]:
    acks = []
    with open(out_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 4 and parts[0] == "ack":
                acks.append((int(parts[1]), int(parts[2]), int(parts[3])))
    return acks


def _check_recovered(tmp_path, log_dir: str, out_path: str, seed: int, segment_bytes: int) -> int:
    acks = _acks(out_path)
    assert [a[0] for a in acks] == list(range(len(acks)))
    assert not os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_FILE))
    manager = LogManager([log_dir], config(segment_bytes))
    manager.startup()
    assert manager.had_clean_shutdown[log_dir] is False
    log = manager.get("t", 0)
    assert log is not None
    got = all_batches(log)
    # What is there is a prefix of the writer's sequence, byte for byte; it holds every
    # acknowledged batch (and perhaps the one written but not yet acknowledged).
    assert len(acks) <= len(got) <= len(acks) + 1
    offset = 0
    for i, stored in enumerate(got):
        expected = with_offset(batch_for(seed, i), offset, epoch_for(i))
        assert stored == expected, f"batch {i} differs"
        if i < len(acks):
            assert (acks[i][1], acks[i][2]) == (offset, rb.read_header(stored).crc)
        offset = rb.read_header(stored).next_offset
    assert log.log_start_offset == 0 and log.log_end_offset == offset
    assert_indexes_follow_rule(log)
    assert_same_as_fresh(log, str(tmp_path))
    # The leader-epoch cache names the first offset of each epoch that has batches.
    firsts: dict[int, int] = {}
    off = 0
    for i, stored in enumerate(got):
        firsts.setdefault(epoch_for(i), off)
        off = rb.read_header(stored).next_offset
    assert log.leader_epochs.entries == sorted(firsts.items())
    # Appends go on from the log end, and a clean restart after that needs no recovery.
    n = len(got)
    info = log.append(batch_for(seed, n), leader_epoch=epoch_for(n))
    assert info.first_offset == offset
    end = log.log_end_offset
    manager.shutdown()
    again = LogManager([log_dir], config(segment_bytes))
    again.startup()
    assert again.had_clean_shutdown[log_dir] is True
    log = again.get("t", 0)
    assert log.log_end_offset == end
    assert all_batches(log)[:n] == got
    again.shutdown()
    return len(acks)


@pytest.mark.parametrize("round_", range(5))
def test_sigkill_at_a_random_moment(tmp_path, round_):
    rng = random.Random(round_)
    seed = 100 + round_
    segment_bytes = rng.choice([4096, 16384, 65536])
    log_dir = str(tmp_path / "data")
    out_path = str(tmp_path / "out.txt")
    proc = _start(log_dir, out_path, seed, segment_bytes)
    _wait_for(proc, out_path, "ack")  # writing: kill it at some moment from now
    time.sleep(rng.uniform(0.02, 0.4))
    _kill(proc)
    acked = _check_recovered(tmp_path, log_dir, out_path, seed, segment_bytes)
    assert acked > 0


@pytest.mark.parametrize("point", ["after-time-entry", "after-offset-trim", "after-new-segment"])
def test_sigkill_mid_roll(tmp_path, point):
    seed = 7
    log_dir = str(tmp_path / "data")
    out_path = str(tmp_path / "out.txt")
    proc = _start(log_dir, out_path, seed, 4096, point, "3")
    _wait_for(proc, out_path, "paused")
    _kill(proc)
    segments = sorted(n for n in os.listdir(os.path.join(log_dir, "t-0")) if n.endswith(".log"))
    assert len(segments) == (4 if point == "after-new-segment" else 3)
    acked = _check_recovered(tmp_path, log_dir, out_path, seed, 4096)
    assert acked > 0
