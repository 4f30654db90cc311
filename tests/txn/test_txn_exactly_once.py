"""Exactly once through crashes: a consume-transform-produce loop (confluent-kafka, offsets sent
to the transaction) is SIGKILLed at random moments and restarted, again and again; in the end the
output, read as read_committed, holds every input record exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import confluent_kafka as ck
import pytest
from client_txn_helpers import Reader, create_topic

pytestmark = pytest.mark.slow  # a loop SIGKILLed and restarted until it is done

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDS = 1000


def _start(bootstrap: str, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            os.path.join(HERE, "ctp_child.py"),
            bootstrap,
            name + "-in",
            name + "-out",
            name,
            name + "-txn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_killed_and_restarted_loop_writes_each_record_once(bootstrap: str, name: str) -> None:
    create_topic(bootstrap, name + "-in", 3)
    create_topic(bootstrap, name + "-out", 3)
    p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(RECORDS):
        p.produce(name + "-in", key=str(i).encode(), value=str(i).encode(), partition=i % 3)
    p.flush(15)

    rng = random.Random(name)
    out = Reader(bootstrap, name + "-out", 3, read_committed=True)
    kills = 0
    try:
        child = _start(bootstrap, name)
        try:
            while kills < 6 and len(out.values) < RECORDS:
                out.poll_for(rng.uniform(0.8, 2.0))
                if child.poll() is not None:  # it gave up on an error: start it again
                    child = _start(bootstrap, name)
                    continue
                child.send_signal(signal.SIGKILL)
                child.wait()
                kills += 1
                child = _start(bootstrap, name)
            deadline = time.monotonic() + 90
            while len(out.values) < RECORDS and time.monotonic() < deadline:
                out.poll_for(0.5)
                if child.poll() is not None:
                    child = _start(bootstrap, name)
            out.poll_for(1.5)  # anything written twice would show up by now
        finally:
            child.kill()
            child.wait()
    finally:
        out.close()
    assert kills >= 3, "the loop finished before it could be killed a few times"
    values = sorted(int(v) for v in out.values)
    missing = sorted(set(range(RECORDS)) - set(values))
    dupes = len(values) - len(set(values))
    assert not missing and not dupes, (
        f"{len(missing)} missing (e.g. {missing[:5]}), {dupes} duplicated"
    )
