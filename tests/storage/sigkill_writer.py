"""Run by test_sigkill.py in a subprocess: append batches to a LogManager in a tight loop and
print each acknowledged one, until SIGKILLed.

    python sigkill_writer.py LOG_DIR SEED SEGMENT_BYTES [PAUSE_POINT ROLL_NUMBER]

Batch i is a pure function of (SEED, i) (`batch_for`), so the test can rebuild every batch and
compare bytes. Each acknowledged append prints `ack <i> <first offset> <crc>`. With a pause
point the writer stops (sleeps) inside its ROLL_NUMBER-th roll at that point and prints
`paused`, so the test can kill it mid-roll:

    after-time-entry     the old segment got its final time-index entry, indexes not trimmed
    after-offset-trim    its offset index is trimmed, its time index not yet
    after-new-segment    the new segment file exists (empty); the old one not yet fsynced
"""

from __future__ import annotations

import random
import sys
import time

from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch
from gregor.storage.config import LogConfig
from gregor.storage.index import TimeIndex
from gregor.storage.log import Log
from gregor.storage.log_manager import LogManager
from gregor.storage.segment import LogSegment

INDEX_INTERVAL = 256
INDEX_BYTES = 65536


def config(segment_bytes: int) -> LogConfig:
    return LogConfig(
        segment_bytes=segment_bytes,
        index_interval_bytes=INDEX_INTERVAL,
        segment_index_bytes=INDEX_BYTES,
        file_delete_delay_ms=0,
    )


def batch_for(seed: int, i: int) -> bytearray:
    rng = random.Random(seed * 1_000_003 + i)
    n = rng.randint(1, 5)
    recs = [(b"key-%d-%d" % (i, j), rng.randbytes(rng.randint(0, 300))) for j in range(n)]
    stamps = [1_000_000 + i * 10 + rng.randint(0, 30) for _ in range(n)]
    return build_batch(recs, timestamps=stamps, compression_type=rng.choice([0, 0, 0, 1, 2]))


def epoch_for(i: int) -> int:
    return i // 100


def _pause() -> None:
    print("paused", flush=True)
    while True:
        time.sleep(60)


def install_pause(point: str, roll_number: int) -> None:
    rolls = [0]
    original_inactive = LogSegment.on_become_inactive
    original_trim = TimeIndex.trim_to_valid_size

    def on_become_inactive(self: LogSegment) -> None:
        rolls[0] += 1
        if rolls[0] != roll_number:
            return original_inactive(self)
        if point == "after-time-entry":
            ts = self.max_timestamp_so_far()
            self.time_index.maybe_append(ts.timestamp, ts.offset, skip_full_check=True)
            _pause()
        return original_inactive(self)

    def trim(self: TimeIndex) -> None:
        if point == "after-offset-trim" and rolls[0] == roll_number:
            _pause()
        return original_trim(self)

    LogSegment.on_become_inactive = on_become_inactive  # type: ignore[method-assign]
    TimeIndex.trim_to_valid_size = trim  # type: ignore[method-assign]
    if point == "after-new-segment":
        original_flush = Log.flush

        def flusher(log: Log, up_to: int) -> None:
            if rolls[0] == roll_number:
                _pause()
            original_flush(log, up_to)

        original_init = Log.__init__

        def init(self: Log, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            original_init(self, *args, **kwargs)
            self.roll_flusher = flusher

        Log.__init__ = init  # type: ignore[method-assign]


def main() -> None:
    log_dir, seed, segment_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if len(sys.argv) > 4:
        install_pause(sys.argv[4], int(sys.argv[5]))
    manager = LogManager([log_dir], config(segment_bytes))
    manager.startup()
    log = manager.get_or_create("t", 0)
    print("ready", flush=True)
    i = 0
    while True:
        batch = batch_for(seed, i)
        info = log.append(batch, leader_epoch=epoch_for(i))
        print(f"ack {i} {info.first_offset} {rb.read_header(batch).crc}", flush=True)
        i += 1
        if i % 50 == 0:
            manager.checkpoint()  # recovery points move: older segments are only index-checked


if __name__ == "__main__":
    main()
