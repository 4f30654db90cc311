"""Opening a partition directory: find the segments, and after an unclean shutdown recover them.

After a clean shutdown (the log manager found its clean-shutdown marker) nothing is scanned:
segments are listed, the active one's tail is read from its last index entry, and indexes are
mapped only when first used.

After an unclean shutdown:
  * every segment from the one holding the recovery point to the end is re-read batch by batch
    (length, magic, CRC, offsets in order), its indexes are rebuilt, and the file is cut after
    the last good batch; if a segment had to be cut, every later segment is deleted, since the
    log must stay dense;
  * every older segment keeps its data (it was fsynced) but its indexes are checked: structure
    (sizes, order, bounds), and each entry against the batch it names; a missing or damaged
    index is rebuilt by re-reading that segment;
  * the recovered segments are not fsynced here and the recovery point stays where the last
    flush left it (as Kafka's LogLoader): what the crash left in the page cache only is made
    durable by the next flush, and re-checked if another crash comes first;
  * the .txnindex files of the recovered segments (and of an older one whose .txnindex fails
    its sanity check) cannot be rebuilt here: an entry needs the first offset of a transaction
    that may have begun segments earlier. `txn_index_from` says from which segment on the log
    rebuilds them while it replays the producer state (Log.open, producer_state.py), as
    Kafka's segment recovery does.

Leftovers of interrupted operations are cleaned first: `*.deleted` files (an asynchronous delete
that had not finished) and `*.tmp` files are removed, indexes with no log are removed.

An interrupted swap of the log cleaner (Log.replace_segments) is undone or finished, as Kafka's
LogLoader does: `.cleaned` files are removed, and with them any `.swap` file at or above the
lowest `.cleaned` base offset (its group never got all its files renamed). A `.swap` log file
that remains is complete: every live segment file starting in [its base, its next offset) is
one it replaced and is removed, then every `.swap` file takes its live name.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

from gregor.protocol.records import batch as rb
from gregor.storage import producer_snapshot
from gregor.storage.checkpoints import fsync_dir
from gregor.storage.config import LogConfig
from gregor.storage.index import CorruptIndexError
from gregor.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
)

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")


@dataclass
class Loaded:
    segments: list[LogSegment]
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    # After an unclean shutdown: the base of the first segment whose .txnindex must be rebuilt.
    txn_index_from: int | None = None
    # The producer snapshots found in the directory (listed once here, for the producer state).
    snapshots: list[int] | None = None
    # After an unclean shutdown: the base of the first recovered segment if no recovered batch
    # carries a producer id (a replay of the producer state from there on finds nothing).
    no_producers_from: int | None = None


def _new_segment(
    directory: str, base: int, config: LogConfig, active: bool, now_ms: int, new: bool = False
) -> LogSegment:
    return LogSegment(
        directory,
        base,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        active=active,
        now_ms=now_ms,
        new=new,
    )


def new_segments(directory: str, config: LogConfig, now_ms: int) -> Loaded:
    """What `load_segments` makes of an empty directory, for one made just now (nothing in
    it to list): the first segment, its file created."""
    seg = _new_segment(directory, 0, config, active=True, now_ms=now_ms, new=True)
    seg.create_file()
    return Loaded([seg], 0, 0, 0, None, [])


def _finish_swaps(directory: str, config: LogConfig, now_ms: int, names: list[str]) -> bool:
    """Undo or complete an interrupted cleaner swap (see the module docstring); whether there
    was one (`names`: the directory's)."""
    cleaned = [
        n
        for n in names
        if n.endswith(CLEANED_SUFFIX) and _SEGMENT_FILE.match(n[: -len(CLEANED_SUFFIX)])
    ]
    swaps = [
        n for n in names if n.endswith(SWAP_SUFFIX) and _SEGMENT_FILE.match(n[: -len(SWAP_SUFFIX)])
    ]
    if not cleaned and not swaps:
        return False
    lowest_cleaned = min((int(n[:20]) for n in cleaned), default=None)
    for name in cleaned:
        os.unlink(os.path.join(directory, name))
    valid = []
    for name in swaps:
        if lowest_cleaned is not None and int(name[:20]) >= lowest_cleaned:
            log.info("%s: removing %s, part of a cleaner swap that did not finish", directory, name)
            os.unlink(os.path.join(directory, name))
        else:
            valid.append(name)
    # Each complete .swap log replaced the live segments that start in [its base, its next
    # offset), and always the one at its own base (an empty cleaned segment has no next offset).
    replaced: set[int] = set()
    ranges = []
    for name in valid:
        if name[20:] != LOG_SUFFIX + SWAP_SUFFIX:
            continue
        base = int(name[:20])
        seg = LogSegment(
            directory,
            base,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.segment_index_bytes,
            active=False,
            now_ms=now_ms,
            file_suffix=SWAP_SUFFIX,
        )
        next_offset = base
        for info in seg.iter_batches():
            next_offset = info.last_offset + 1
        seg.close_handles()
        ranges.append((base, next_offset))
        replaced.add(base)
    for name in os.listdir(directory):
        m = _SEGMENT_FILE.match(name)
        if m and (
            int(m.group(1)) in replaced or any(lo <= int(m.group(1)) < hi for lo, hi in ranges)
        ):
            log.info(
                "%s: removing %s, replaced by a cleaned segment before a crash", directory, name
            )
            os.unlink(os.path.join(directory, name))
    for name in valid:
        log.info("%s: completing the swap of %s", directory, name)
        os.rename(os.path.join(directory, name), os.path.join(directory, name[: -len(SWAP_SUFFIX)]))
    fsync_dir(directory)
    return True


def _remove_leftovers(
    directory: str, config: LogConfig, now_ms: int
) -> tuple[set[int], set[int], list[int]]:
    """Delete unfinished deletes and temp files and settle an interrupted cleaner swap; return
    (bases with a .log, bases with an index, offsets of the producer snapshots). The directory
    is listed again only when something was removed or renamed (10,000 logs open with one
    listing each)."""
    logs: set[int] = set()
    indexed: set[int] = set()
    names = os.listdir(directory)
    leftovers = [n for n in names if n.endswith(DELETED_SUFFIX) or n.endswith(".tmp")]
    for name in leftovers:
        os.unlink(os.path.join(directory, name))
    if leftovers:
        names = os.listdir(directory)
    if _finish_swaps(directory, config, now_ms, names):
        names = os.listdir(directory)
    for name in names:
        m = _SEGMENT_FILE.match(name)
        if not m:
            continue
        base = int(m.group(1))
        if m.group(2) == LOG_SUFFIX:
            logs.add(base)
        elif m.group(2) == INDEX_SUFFIX:
            indexed.add(base)
    for name in names:
        m = _SEGMENT_FILE.match(name)
        if m and m.group(2) != LOG_SUFFIX and int(m.group(1)) not in logs:
            log.warning("removing %s: it has no log segment", os.path.join(directory, name))
            os.unlink(os.path.join(directory, name))
    snapshots = sorted(o for o in map(producer_snapshot.offset_of, names) if o is not None)
    return logs, indexed, snapshots


def load_segments(
    directory: str,
    config: LogConfig,
    *,
    log_start_offset: int,
    recovery_point: int,
    clean_shutdown: bool,
    now_ms: int,
) -> Loaded:
    logs, indexed, snapshots = _remove_leftovers(directory, config, now_ms)
    bases = sorted(logs)
    segments = [_new_segment(directory, b, config, active=False, now_ms=now_ms) for b in bases]
    if not segments:
        seg = _new_segment(directory, log_start_offset, config, active=True, now_ms=now_ms)
        seg.ensure_created()
        seg.close_handles()
        return Loaded([seg], log_start_offset, log_start_offset, log_start_offset, None, snapshots)
    txn_index_from = no_producers_from = None

    active = segments[-1]
    active.offset_index.make_writable(config.segment_index_bytes)
    active.time_index.make_writable(config.segment_index_bytes)

    if clean_shutdown:
        for seg in segments:
            if seg.base_offset not in indexed or not os.path.exists(seg.time_index.path):
                log.warning("%s: index missing, rebuilding", seg.log_path)
                _recover(seg, config, active=seg is active)
        active.load_running_state()
        end = active.read_next_offset()
        recovery_point = end
    else:
        segments, end, txn_index_from, no_producers_from = _recover_unclean(
            directory, segments, config, recovery_point, indexed
        )
        # As Kafka's LogLoader: the recovered tail was checked, not fsynced, so the recovery
        # point stays where the last flush left it; a crash before the next flush re-checks it.
        recovery_point = min(recovery_point, end)
        active = segments[-1]
    start = max(log_start_offset, segments[0].base_offset)
    if start > end:
        start = end
    for seg in segments:
        seg.close_handles()
    return Loaded(
        segments, start, end, recovery_point, txn_index_from, snapshots, no_producers_from
    )


def _recover(seg: LogSegment, config: LogConfig, active: bool) -> int:
    """Rebuild a segment's indexes from its data; returns the bytes cut from its tail."""
    # An inactive segment's indexes are opened read-only; a rebuild writes them, so they are
    # reopened writable (preallocated) first and trimmed again by on_become_inactive below.
    seg.offset_index.make_writable(config.segment_index_bytes)
    seg.time_index.make_writable(config.segment_index_bytes)
    result = seg.recover(config.max_message_bytes)
    if result.truncated_bytes:
        log.warning(
            "%s: cut %d bytes after position %d: %s",
            seg.log_path,
            result.truncated_bytes,
            result.valid_bytes,
            result.reason,
        )
    if not active:
        seg.on_become_inactive()
    return result.truncated_bytes


def _recover_unclean(
    directory: str,
    segments: list[LogSegment],
    config: LogConfig,
    recovery_point: int,
    indexed: set[int],
) -> tuple[list[LogSegment], int, int, int | None]:
    """Recover the segments from the one holding the recovery point; (the segments kept, the
    log end offset, the base from which their .txnindex files must be rebuilt, that of the
    first recovered segment if none of them holds a batch with a producer id)."""
    first_unflushed = 0
    for i, seg in enumerate(segments):
        if seg.base_offset <= recovery_point:
            first_unflushed = i
    log.info(
        "%s: unclean shutdown, recovering from offset %d (segment %d of %d)",
        directory,
        recovery_point,
        first_unflushed + 1,
        len(segments),
    )
    txn_index_from = segments[first_unflushed].base_offset
    for i, seg in enumerate(segments[:first_unflushed]):
        if not _txn_index_sound(seg):
            txn_index_from = min(txn_index_from, seg.base_offset)
        if seg.base_offset not in indexed or not _indexes_sound(seg):
            log.warning("%s: index missing or damaged, rebuilding", seg.log_path)
            if _recover(seg, config, active=True):
                # Its data was damaged too, below the recovery point (a disk fault, not a torn
                # write). The log must stay dense, so it ends here, as after a torn write.
                for doomed in segments[i + 1 :]:
                    log.warning("%s: deleting, it follows a damaged segment", doomed.log_path)
                    doomed.delete()
                seg.flush()
                end = seg.read_next_offset() if seg.size else seg.base_offset
                return segments[: i + 1], end, min(txn_index_from, seg.base_offset), None
            seg.on_become_inactive()
    kept = list(segments)
    last = len(segments) - 1
    for i in range(first_unflushed, last + 1):
        seg = segments[i]
        # Rebuild as an active segment; one that survives whole and is not last is then
        # stamped inactive, as its roll did.
        seg.offset_index.make_writable(config.segment_index_bytes)
        seg.time_index.make_writable(config.segment_index_bytes)
        cut = _recover(seg, config, active=True)
        if cut and i < last:
            for doomed in segments[i + 1 :]:
                log.warning("%s: deleting, it follows a damaged segment", doomed.log_path)
                doomed.delete()
            kept = segments[: i + 1]
            break
        if i < last:
            seg.on_become_inactive()
    active = kept[-1]
    end = active.read_next_offset() if active.size else active.base_offset
    recovered = kept[first_unflushed:]
    plain = not any(seg.recovered_producer_batches for seg in recovered)
    return kept, end, txn_index_from, recovered[0].base_offset if plain else None


def _txn_index_sound(seg: LogSegment) -> bool:
    """The sanity check of a .txnindex (Kafka's TransactionIndex.sanityCheck, and the order of
    its entries); no file is sound."""
    try:
        seg.txn_index.sanity_check()
        return True
    except CorruptIndexError as exc:
        log.warning("%s: %s; rebuilding the transaction index", seg.txn_index.path, exc)
        return False
    finally:
        seg.txn_index.close()


def _indexes_sound(seg: LogSegment) -> bool:
    """Check both indexes of an older segment against its data without reading all of it."""
    try:
        seg.offset_index.sanity_check(seg.size)
        interval = seg.index_interval_bytes
        prev_position = 0
        for i in range(seg.offset_index.entries):
            offset, position = seg.offset_index.entry(i)
            # The index rule puts entries more than index.interval.bytes apart.
            if position - prev_position <= interval:
                raise CorruptIndexError(
                    f"entry {i} at position {position} is too close to the last"
                )
            head = os.pread(seg.fd, 27, position)
            if len(head) < 27 or head[16] != rb.MAGIC:
                raise CorruptIndexError(f"entry {i} points at no batch")
            base, _ = rb.peek_offset_and_size(head)
            delta = int.from_bytes(head[23:27], "big", signed=True)
            if base + delta != offset:
                raise CorruptIndexError(
                    f"entry {i} names offset {offset}, the batch ends at {base + delta}"
                )
            prev_position = position
        # The tail after the last entry: find the last offset, and make sure no entry is missing
        # there (an index cut at an entry boundary passes every check above). Unless the index
        # filled up, a batch starting more than index.interval.bytes after the last entry had one.
        full = seg.offset_index.is_full() or seg.time_index.is_full()
        last = seg.base_offset - 1
        for info in seg.iter_batches(prev_position):
            if not full and info.position - prev_position > interval:
                raise CorruptIndexError(f"no entry for the batch at position {info.position}")
            last = info.last_offset
        seg.time_index.sanity_check(last)
        if seg.time_index.entries == 0 and seg.size:
            raise CorruptIndexError("an inactive segment with data has an empty time index")
        for i in range(seg.time_index.entries):
            ts, offset = seg.time_index.entry(i)
            named = seg.translate_offset(offset)
            if named is None or named.last_offset != offset or named.max_timestamp != ts:
                raise CorruptIndexError(f"time entry {i} names offset {offset}, not a batch end")
        final = seg.time_index.last_entry()
        scanned = max(
            (
                b.max_timestamp
                for b in seg.iter_batches(seg.offset_index.lookup(final.offset).position)
            ),
            default=-1,
        )
        if scanned > final.timestamp:
            raise CorruptIndexError("the last time entry is not the segment's largest timestamp")
        return True
    except CorruptIndexError as exc:
        log.warning("%s: %s", seg.log_path, exc)
        seg.offset_index.close()
        seg.time_index.close()
        return False
