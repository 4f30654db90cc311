"""Run by test_txn_sigkill.py in a subprocess: append a deterministic mix of transactional
batches of several producers, COMMIT and ABORT markers and plain batches to a LogManager's log,
printing each acknowledged append, until SIGKILLed.

    python txn_sigkill_writer.py LOG_DIR SEED SEGMENT_BYTES

Step i of `script(SEED)` is the same in the test, which rebuilds the batches to compare bytes.
Each acknowledged append prints `ack <i> <first offset>`.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator

from gregor.protocol.records.records import build_batch, build_control_batch
from gregor.storage.config import LogConfig
from gregor.storage.log_manager import LogManager
from gregor.storage.producer_state import AppendOrigin

PRODUCERS = [501, 502, 503, 504]


def config(segment_bytes: int) -> LogConfig:
    return LogConfig(
        segment_bytes=segment_bytes, index_interval_bytes=256, segment_index_bytes=65536
    )


def script(seed: int) -> Iterator[tuple[bytearray, AppendOrigin]]:
    """(batch, origin) of every step: transactions interleave, some span segments, about a
    third abort, some markers end nothing."""
    rng = random.Random(seed)
    seqs = dict.fromkeys(PRODUCERS, 0)
    opened: set[int] = set()
    i = 0
    while True:
        ts = 1_000_000 + i
        roll = rng.random()
        pid = rng.choice(PRODUCERS)
        if roll < 0.5:
            n = rng.randint(1, 4)
            recs = [
                (b"k%d" % rng.randrange(50), rng.randbytes(rng.randint(10, 200))) for _ in range(n)
            ]
            yield (
                build_batch(
                    recs,
                    base_timestamp=ts,
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=seqs[pid],
                    transactional=True,
                ),
                AppendOrigin.CLIENT,
            )
            seqs[pid] += n
            opened.add(pid)
        elif roll < 0.53 or (roll < 0.75 and opened):
            if roll >= 0.53:  # else any producer: a marker that may end nothing
                pid = rng.choice(sorted(opened))
            opened.discard(pid)
            yield build_control_batch(pid, 0, 0, rng.random() < 0.65, ts), AppendOrigin.COORDINATOR
        else:
            recs = [(b"p", rng.randbytes(rng.randint(10, 300))) for _ in range(rng.randint(1, 3))]
            yield build_batch(recs, base_timestamp=ts), AppendOrigin.CLIENT
        i += 1


def main() -> None:
    log_dir, seed, segment_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    manager = LogManager([log_dir], config(segment_bytes))
    manager.startup()
    log = manager.get_or_create("t", 0)
    print("ready", flush=True)
    for i, (batch, origin) in enumerate(script(seed)):
        info = log.append(batch, origin=origin)
        log.update_high_watermark(log.log_end_offset)
        print(f"ack {i} {info.first_offset}", flush=True)
        if i % 40 == 39:
            manager.checkpoint()  # recovery points move: older .txnindex files are kept as they are


if __name__ == "__main__":
    main()
