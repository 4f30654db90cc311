"""Run by test_compaction_sigkill.py in a subprocess: append to a compacted log and clean it,
over and over, printing each acknowledged append, until SIGKILLed.

    python compaction_sigkill_child.py LOG_DIR SEED FIRST_INDEX

Batch i is a pure function of (SEED, i) (`batch_for`); `ack <i> <first offset>` is printed after
each append. Every few appends the cleaner runs (on this thread: `clean_once`), so a kill lands
in the middle of a cleaning, a swap or an append.
"""

from __future__ import annotations

import random
import sys

from gregor.protocol.records.records import build_batch
from gregor.storage.cleaner import LogCleaner
from gregor.storage.config import LogConfig
from gregor.storage.log_manager import LogManager

T0 = 1_700_000_000_000
KEYS = 25

CONFIG = LogConfig(
    segment_bytes=1500,
    index_interval_bytes=200,
    cleanup_policy="compact",
    min_cleanable_dirty_ratio=0.0,
    delete_retention_ms=1 << 40,  # tombstones stay: every key's latest record must be there
    file_delete_delay_ms=0,
)


def records_for(seed: int, i: int) -> list[tuple[bytes, bytes | None]]:
    rng = random.Random(seed * 1_000_003 + i)
    out = []
    for j in range(rng.randint(1, 4)):
        key = b"k%d" % rng.randrange(KEYS)
        value = (
            None if rng.random() < 0.1 else b"%d:%d:" % (i, j) + rng.randbytes(rng.randint(0, 60))
        )
        out.append((key, value))
    return out


def batch_for(seed: int, i: int) -> bytearray:
    rng = random.Random(seed * 7 + i)
    return build_batch(
        records_for(seed, i), base_timestamp=T0 + i, compression_type=rng.choice([0, 0, 1, 3])
    )


def main() -> None:
    directory, seed, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mgr = LogManager([directory], CONFIG)
    mgr.startup()
    log = mgr.get_or_create("t", 0)
    cleaner = LogCleaner(mgr)
    print("started", flush=True)
    i = first
    while True:
        info = log.append(batch_for(seed, i), now_ms=T0 + i)
        log.update_high_watermark(log.log_end_offset)  # one replica: acknowledged = committed
        print(f"ack {i} {info.first_offset}", flush=True)
        i += 1
        if i % 5 == 0:
            cleaner.clean_once(T0 + i)
            mgr.purge_deleted(force=True)


if __name__ == "__main__":
    main()
