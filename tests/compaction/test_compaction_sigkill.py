"""SIGKILL a process that appends to a compacted log and cleans it in a loop, at random
moments, then recover: every acknowledged record's latest value per key is there, nothing is
duplicated, every record is the one appended at its offset; then the next process goes on."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest
from compaction_sigkill_child import CONFIG, records_for

from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import iter_records
from gregor.storage.cleaner import CHECKPOINT_FILE
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager

CHILD = os.path.join(os.path.dirname(__file__), "compaction_sigkill_child.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEED = 4242


def _run_child(
    log_dir: str, first: int, out_path: str, rng: random.Random
) -> list[tuple[int, int]]:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, CHILD, log_dir, str(SEED), str(first)],
            stdout=out,
            stderr=subprocess.PIPE,
            env=env,
        )
    try:
        deadline = time.monotonic() + 60
        while _count_acks(out_path) < 30:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the child made no progress"
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.8))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stderr:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    acks = []
    with open(out_path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "ack" and line.endswith("\n"):
                acks.append((int(parts[1]), int(parts[2])))
    return acks


def _count_acks(path: str) -> int:
    with open(path) as f:
        return sum(1 for line in f if line.startswith("ack"))


def _read_all(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, 1 << 30)
        assert data
        headers = [h for _, h in rb.iter_headers(data)]
        assert headers and headers[0].last_offset >= offset
        out.extend((rec.offset, rec.key, rec.value) for _, rec in iter_records(data))
        offset = headers[-1].next_offset  # empty batches (kept for a producer) included
    return out


@pytest.mark.slow  # twelve rounds of SIGKILL
def test_sigkill_while_appending_and_cleaning(tmp_path):
    rng = random.Random(SEED)
    log_dir = str(tmp_path / "logs")
    model: dict[int, tuple[bytes, bytes | None]] = {}  # offset -> the record appended there
    next_index = 0
    cleaned_to = []
    interrupted = 0  # rounds killed with a cleaning's files on disk
    for round_ in range(12):
        acks = _run_child(log_dir, next_index, str(tmp_path / f"out-{round_}"), rng)
        assert acks, "no acknowledged append this round"
        for i, first in acks:
            for j, rec in enumerate(records_for(SEED, i)):
                model[first + j] = rec
        last_i, last_first = acks[-1]
        next_offset = last_first + len(records_for(SEED, last_i))

        part = os.path.join(log_dir, "t-0")
        interrupted += any(n.endswith((".cleaned", ".swap")) for n in os.listdir(part))
        mgr = LogManager([log_dir], CONFIG)
        mgr.startup()  # no clean-shutdown marker: a full recovery, swaps finished or undone
        log = mgr.get("t", 0)
        assert log is not None
        names = os.listdir(log.directory)
        assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
        # The append after the last ack may have landed before the kill: then it is in the log.
        in_flight = records_for(SEED, last_i + 1)
        if log.log_end_offset > next_offset:
            assert log.log_end_offset == next_offset + len(in_flight)
            for j, rec in enumerate(in_flight):
                model[next_offset + j] = rec
            next_index = last_i + 2
        else:
            assert log.log_end_offset == next_offset
            next_index = last_i + 1

        got = _read_all(log)
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets)), "offsets repeat or go backwards"
        for offset, key, value in got:
            assert model[offset] == (key, value), (
                f"offset {offset} holds something never appended there"
            )
        present = set(offsets)
        latest: dict[bytes, int] = {}
        for offset in sorted(model):
            latest[model[offset][0]] = offset
        for key, offset in latest.items():
            assert offset in present, f"the latest record of {key!r} (offset {offset}) is gone"
        # Cleaning did happen: most of what was appended is gone.
        assert len(got) < len(model)
        checkpoint = os.path.join(log_dir, CHECKPOINT_FILE)
        if os.path.exists(checkpoint):
            with open(checkpoint) as f:
                cleaned_to.append(f.read())
        # Alternate: a clean shutdown, or a plain drop (the next child recovers again).
        if round_ % 2:
            mgr.shutdown()
        else:
            for _tp, lg in mgr.partitions():
                lg.close_handles()
    assert cleaned_to
    print(f"{interrupted} of 12 kills left a cleaning's files behind")


_PARENT = """
import random, sys, time
sys.path.insert(0, {helpers!r})
from compaction_helpers import Model, append_random, new_manager
from gregor.storage.cleaner_worker import run_in_process
from gregor.storage.config import LogConfig
cfg = LogConfig(segment_bytes=4000, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
mgr, log, cleaner = new_manager({path!r}, cfg)
append_random(log, Model(), random.Random(1), batches=300, keys=20, now_ms=0)
log.roll(now_ms=0)
append_random(log, Model(), random.Random(2), batches=1, keys=1, now_ms=0)
task = cleaner.grab_filthiest(0)
print("cleaning", flush=True)
run_in_process(task, lambda group: cleaner.swap(task, group), 1000.0)  # 1 KB/s: minutes
"""


def _children_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(name))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    return out


def test_a_cleaner_process_dies_with_its_parent(tmp_path):
    code = _PARENT.format(helpers=os.path.dirname(__file__), path=str(tmp_path / "logs"))
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == b"cleaning"
        deadline = time.monotonic() + 30
        while not (children := _children_of(parent.pid)):
            assert time.monotonic() < deadline, "no cleaner process started"
            time.sleep(0.05)
        time.sleep(0.5)  # the child is cleaning (throttled to a crawl)
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout:
            parent.stdout.close()
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{c}") and not _is_zombie(c) for c in children):
        assert time.monotonic() < deadline, f"cleaner process {children} outlived its parent"
        time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
