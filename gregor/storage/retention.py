"""Which old segments a log's retention settings delete (cleanup.policy=delete).

Kafka's rules, applied from the oldest segment forward and stopping at the first segment kept:
  * `retention.ms` >= 0: a segment whose largest timestamp is older than now - retention.ms;
  * `retention.bytes` >= 0: while the log is larger than retention.bytes, the oldest segments,
    as long as dropping the whole segment still leaves at least retention.bytes;
  * a segment is deletable only when all of it is below the high watermark, so no consumer
    loses what it could not yet read; an empty active segment is never deleted, a non-empty
    expired one is rolled first (so the log always keeps an active segment).
Deleting moves the log start offset first, then renames the files `.deleted`; the log manager
removes them after `file.delete.delay.ms` (see Log.delete_oldest_segments).
"""

from __future__ import annotations

from collections.abc import Callable

from gregor.storage.log import Log


def deletable_by_time(log: Log, now_ms: int) -> int:
    retention = log.config.retention_ms
    if retention < 0:
        return 0
    cutoff = now_ms - retention
    return _count(log, lambda i: log.segments[i].largest_timestamp < cutoff)


def deletable_by_size(log: Log) -> int:
    limit = log.config.retention_bytes
    if limit < 0:
        return 0
    excess = log.size_in_bytes - limit
    remaining = [excess]

    def fits(i: int) -> bool:
        size = log.segments[i].size
        if remaining[0] - size < 0:
            return False
        remaining[0] -= size
        return True

    return _count(log, fits)


def _count(log: Log, predicate: Callable[[int], bool]) -> int:
    count = 0
    segments = log.segments
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if last and seg.size == 0:
            break
        upper = log.log_end_offset if last else segments[i + 1].base_offset
        if upper > log.high_watermark or not predicate(i):
            break
        count += 1
    return count


def enforce(log: Log, now_ms: int) -> int:
    """Apply retention to one log; the number of segments deleted."""
    if "delete" not in log.config.cleanup_policy:
        return 0
    deleted = log.delete_oldest_segments(deletable_by_time(log, now_ms))
    deleted += log.delete_oldest_segments(deletable_by_size(log))
    return deleted
