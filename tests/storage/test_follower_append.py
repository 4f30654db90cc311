"""A follower's append (Log.append_as_follower) takes the whole batches of a fetched chunk: a
partial batch at its end (a fetch may end in one) is left for the next fetch, and a chunk with
no whole batch appends nothing."""

from __future__ import annotations

import struct
from pathlib import Path

from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import build_batch
from gregor.storage.log import Log


def _batches(start: int, counts: list[int]) -> list[bytes]:
    out, offset = [], start
    for n in counts:
        out.append(bytes(build_batch([(None, b"v" * 40)] * n, base_offset=offset)))
        offset += n
    return out


def test_whole_batches_are_appended_and_a_partial_one_at_the_end_is_left(tmp_path: Path) -> None:
    log = Log.open(str(tmp_path / "t-0"))
    first, second, third = _batches(0, [2, 3, 1])
    info = log.append_as_follower(bytearray(first + second + third[: len(third) - 5]))
    assert info is not None and info.valid_bytes == len(first) + len(second)
    assert log.log_end_offset == 5
    # the rest of it comes with the next fetch
    assert log.append_as_follower(bytearray(third)) is not None and log.log_end_offset == 6
    log.close()


def test_a_chunk_without_a_whole_batch_appends_nothing(tmp_path: Path) -> None:
    log = Log.open(str(tmp_path / "t-0"))
    (batch,) = _batches(0, [3])
    assert log.append_as_follower(bytearray(batch[: rb.HEADER_SIZE + 4])) is None
    assert log.append_as_follower(bytearray(batch[: rb.HEADER_SIZE - 1])) is None
    short = bytearray(batch)
    struct.pack_into(">i", short, 8, rb.HEADER_SIZE - rb.LOG_OVERHEAD - 1)  # shorter than a header
    assert log.append_as_follower(short) is None
    assert log.log_end_offset == 0
    log.close()
