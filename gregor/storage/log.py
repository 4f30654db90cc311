"""The log of one partition: a directory of segments, the offsets that bound it, and the
operations replication, fetch and retention need.

    <log dir>/<topic>-<partition>/
        00000000000000000000.log  .index  .timeindex  .txnindex   (aborted transactions, if any)
        00000000000000004711.log  .index  .timeindex    <- the active segment (last)
        00000000000000004711.snapshot                   producer state there (producer_state.py)
        leader-epoch-checkpoint

Offsets:  log_start_offset <= last_stable_offset <= high_watermark <= log_end_offset. The recovery
point is the offset up to which everything is fsynced; after an unclean shutdown loading
re-validates from there (and rebuilds those segments' .txnindex files by replaying their markers).

Transactions: the producer state keeps the open ones (producer_state.py); the last stable offset
is the first offset of the oldest one not yet decided and replicated, or the high watermark if
that is lower; read_committed reads stop there. When an append's ABORT marker ends a transaction
it goes into the active segment's .txnindex (txn_index.py), and `collect_aborted_transactions`
gives a read_committed fetch those overlapping its range. Plain batches cost nothing of this.

Append takes the record batches of a produce request as a writable buffer, validates every batch
(refusing the whole request if one is bad), assigns offsets by patching each header in place,
and writes the buffer to the active segment in one `write`. Records are never decoded.

Single-threaded by contract, except `flush_segments`, which may run on a worker thread. The log
cleaner reads inactive segments from a worker through its own file descriptors and comes back to
the log's thread for `replace_segments` (see cleaner.py); `truncations` counts truncations so it
can tell that a segment it read is still the one in the log.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from gregor.clock import SYSTEM_CLOCK, Clock
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.validate import check_client_batch
from gregor.storage.checkpoints import fsync_dir, fsync_if_exists
from gregor.storage.config import LogConfig
from gregor.storage.index import TimestampOffset
from gregor.storage.leader_epoch import LeaderEpochCache
from gregor.storage.producer_state import (
    AppendOrigin,
    Duplicate,
    NextBatch,
    ProducerBatch,
    ProducerStateManager,
    StateUpdate,
)
from gregor.storage.segment import CLEANED_SUFFIX, SWAP_SUFFIX, BatchInfo, FileSlice, LogSegment
from gregor.storage.txn_index import AbortedTxn, TxnIndexEntry

if TYPE_CHECKING:
    from gregor.storage.loader import Loaded

log = logging.getLogger(__name__)
T = TypeVar("T")
_new_tuple = tuple.__new__  # a NamedTuple from its fields without its Python-level __new__

# Special timestamps of ListOffsets.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic stamps LogAppendTime
    batches: int
    records: int
    valid_bytes: int
    log_start_offset: int


# What a walk over an append's batches found, before anything is written: (first offset, the
# log end offset after the append, max timestamp, its offset, records, each batch's BatchInfo,
# the batches with a producer id, the (leader epoch, first offset) pairs for the epoch cache,
# whether timestamps were set to the append time). A plain tuple, unpacked at once: an object
# would cost an append of one small batch about 3% more.
_Walked = tuple[
    int, int, int, int, int, list[BatchInfo], list[ProducerBatch], list[tuple[int, int]], bool
]


def parse_dir_name(name: str) -> tuple[str, int] | None:
    """`my-topic-3` -> ("my-topic", 3); None for anything else (deleted/future dirs)."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


FileDeleter = Callable[[list[LogSegment]], None]


def delete_now(segments: list[LogSegment]) -> None:
    for seg in segments:
        seg.delete()


class Log:
    def __init__(
        self,
        directory: str,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        log_end_offset: int,
        file_deleter: FileDeleter = delete_now,
        clock: Clock = SYSTEM_CLOCK,
        deferred_sync: Callable[[str], None] | None = None,
        write_later: Callable[[Callable[[], None]], object] | None = None,
        new: bool = False,
    ) -> None:
        """`new`: a log made just now (`create`), with no leader-epoch checkpoint to read."""
        self.directory = directory
        self.clock = clock
        name = parse_dir_name(os.path.basename(directory.rstrip("/")))
        self.topic, self.partition = name if name else (os.path.basename(directory), 0)
        self._where = f"{self.topic}-{self.partition}"  # how a refusal names this partition
        self.config = config
        self.segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.log_end_offset = log_end_offset
        self.high_watermark = log_start_offset
        self.leader_epochs = LeaderEpochCache(directory, new=new)
        self.leader_epochs.sync_later = deferred_sync  # see leader_epoch.py
        # Set before the first truncation: after a crash, the epochs the log no longer holds
        # are cut from the file later (the broker: once the loop runs, usually by the write of
        # the new epoch the partition gets as it is led), not by a rename per log at start-up.
        self.leader_epochs.write_later = write_later
        if not new:  # a new log's cache is empty: nothing to cut
            self.leader_epochs.truncate_from_end(log_end_offset)
        # Idempotent producers' epochs and sequences; loaded by `open` (producer_state.py).
        self.producer_state = ProducerStateManager(directory, f"{self.topic}-{self.partition}")
        self.file_deleter = file_deleter
        self.last_flush_ms = clock.now_ms()
        self.closed = False
        self.truncations = 0
        # How a roll flushes the old segment; the broker swaps in one that runs off the loop.
        self.roll_flusher: Callable[[Log, int], None] = Log.flush
        # Called with the active segment's base after every truncation (the log manager tells
        # the cleaner, whose checkpoint must not stay above it).
        self.on_truncation: Callable[[int], None] | None = None
        # After an I/O error (a full disk, EIO) the log is offline: it takes no more appends
        # and serves no reads; the log manager hears of it (`on_failure`) and takes the rest of
        # its dir offline too. Only a restart brings it back (recovery then checks the tail).
        self.offline = False
        self.on_failure: Callable[[Log, OSError, str], None] | None = None
        # Called when the log start moves or the log goes offline: changes no partition event
        # tells (the log manager counts them, for readers that skip unchanged partitions).
        self.on_change: Callable[[], None] | None = None
        # A new log's files not fsynced when they were made (its leader-epoch checkpoint, its
        # directory, the log dir's entry for it), in that order: the first flush fsyncs them
        # before moving the recovery point (as Kafka's LocalLog.flush syncs the directory of a
        # segment it flushes for the first time). Until then recovery re-reads the log from 0,
        # taking its epochs from the batches, so a crash loses nothing that was durable.
        self.creation_syncs: list[str] = []

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str,
        config: LogConfig | None = None,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        clean_shutdown: bool = True,
        now_ms: int | None = None,
        file_deleter: FileDeleter = delete_now,
        clock: Clock = SYSTEM_CLOCK,
        deferred_sync: Callable[[str], None] | None = None,
        write_later: Callable[[Callable[[], None]], object] | None = None,
    ) -> Log:
        """Open (or create) the log in `directory`, recovering it if the shutdown was unclean.
        `now_ms` (default: the clock's time) is the time of the load: the creation time of the
        segments it opens, and when their producers were last seen."""
        from gregor.storage import loader

        config = config or LogConfig()
        if now_ms is None:
            now_ms = clock.now_ms()
        os.makedirs(directory, exist_ok=True)
        loaded = loader.load_segments(
            directory,
            config,
            log_start_offset=log_start_offset,
            recovery_point=recovery_point,
            clean_shutdown=clean_shutdown,
            now_ms=now_ms,
        )
        log_ = cls(
            directory,
            config,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            log_end_offset=loaded.log_end_offset,
            file_deleter=file_deleter,
            clock=clock,
            deferred_sync=deferred_sync,
            write_later=write_later,
        )
        log_._finish_open(loaded, clean_shutdown, now_ms)
        return log_

    @classmethod
    def create(
        cls,
        directory: str,
        config: LogConfig | None = None,
        *,
        now_ms: int | None = None,
        file_deleter: FileDeleter = delete_now,
        clock: Clock = SYSTEM_CLOCK,
        deferred_sync: Callable[[str], None] | None = None,
        write_later: Callable[[Callable[[], None]], object] | None = None,
    ) -> Log:
        """A new partition's log: what `open` makes of an empty directory, in a directory made
        here, without reading what cannot be there yet (no listing, no stat of the segment, no
        read of a checkpoint): a mkdir and one open of the segment file (6 syscalls per new
        partition with the checkpoint, from 14). A directory there already, or a log dir that
        is not (made as `open` makes it), is opened by `open`."""
        from gregor.storage import loader

        config = config or LogConfig()
        try:
            os.mkdir(directory)
        except (FileExistsError, FileNotFoundError):
            return cls.open(
                directory,
                config,
                now_ms=now_ms,
                file_deleter=file_deleter,
                clock=clock,
                deferred_sync=deferred_sync,
                write_later=write_later,
            )
        if now_ms is None:
            now_ms = clock.now_ms()
        loaded = loader.new_segments(directory, config, now_ms)
        log_ = cls(
            directory,
            config,
            loaded.segments,
            log_start_offset=0,
            recovery_point=0,
            log_end_offset=0,
            file_deleter=file_deleter,
            clock=clock,
            deferred_sync=deferred_sync,
            write_later=write_later,
            new=True,
        )
        # No `_finish_open`: on an empty log (no epochs, no producers, no snapshots, no
        # transactions, the high watermark at 0) it changes nothing.
        return log_

    def _finish_open(self, loaded: Loaded, clean_shutdown: bool, now_ms: int) -> None:
        """The leader epochs, high watermark and producer state of a log just loaded."""
        if not clean_shutdown:
            # As Kafka's segment recovery does: the epochs of the recovered batches go back into
            # the cache, which a crash between a write and its checkpoint left behind.
            for seg in self.segments:
                for epoch, start in seg.recovered_epochs:
                    self.leader_epochs.assign(epoch, start)
                seg.recovered_epochs = []
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        self.high_watermark = self.log_end_offset if clean_shutdown else self.log_start_offset
        self.producer_state.load(
            self.segments,
            self.log_start_offset,
            self.log_end_offset,
            clean_shutdown,
            now_ms,
            txn_index_from=loaded.txn_index_from,
            snapshots=loaded.snapshots,
            no_producers_from=loaded.no_producers_from,
        )
        if loaded.txn_index_from is not None:
            # The rebuilt .txnindex files are written out; a crash before the next flush of
            # their segments rebuilds them again (the recovery point is below them).
            for seg in self.segments:
                if seg.base_offset >= loaded.txn_index_from:
                    seg.txn_index.flush()
                    seg.txn_index.close()
        self.producer_state.on_high_watermark(self.high_watermark)

    # -- state --------------------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    def update_high_watermark(self, offset: int) -> int:
        if offset > self.log_end_offset:
            offset = self.log_end_offset
        self.high_watermark = offset if offset > self.log_start_offset else self.log_start_offset
        if self.producer_state.unreplicated:
            self.producer_state.on_high_watermark(self.high_watermark)
        return self.high_watermark

    # -- transactions -------------------------------------------------------------------------

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction not yet decided, or decided by a marker
        not yet below the high watermark (never below the log start offset); None when there
        is none. Kafka's firstUnstableOffset."""
        first = self.producer_state.first_unstable
        if first is None or first >= self.log_start_offset:
            return first
        return self.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided and replicated: the first
        unstable offset, or the high watermark if that is lower. read_committed reads stop
        here. Kafka's lastStableOffset."""
        first = self.producer_state.first_unstable
        hw = self.high_watermark
        if first is None or first >= hw:
            return hw
        return first if first >= self.log_start_offset else self.log_start_offset

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset), i.e. those
        with a marker at or above start_offset and a first offset below upper_bound_offset, for
        a read_committed fetch (Kafka's collectAbortedTransactions): the .txnindex of the
        segment holding start_offset and of the later ones, until an entry says no later one
        can overlap. A segment without a .txnindex costs no read."""
        return [
            AbortedTxn(e.producer_id, e.first_offset)
            for e in self._aborted_entries(start_offset, upper_bound_offset)
        ]

    def _aborted_entries(self, start_offset: int, upper_bound_offset: int) -> list[TxnIndexEntry]:
        found: list[TxnIndexEntry] = []
        segments = self.segments
        for i in range(self._segment_index_for(start_offset), len(segments)):
            index = segments[i].txn_index
            if index.is_empty():
                continue
            entries, complete = index.collect(start_offset, upper_bound_offset)
            found += entries
            if complete:
                break
        return found

    def aborted_transactions_below(self, upper_bound_offset: int) -> list[TxnIndexEntry]:
        """Every .txnindex entry of a transaction that began below `upper_bound_offset`, in
        first offset order (what the cleaner needs to drop aborted records)."""
        entries = self._aborted_entries(self._bases[0], upper_bound_offset)
        entries.sort(key=lambda e: e.first_offset)
        return entries

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    # -- append -------------------------------------------------------------------------------

    def append(
        self,
        records: memoryview | bytearray,
        *,
        leader_epoch: int = rb.NO_PARTITION_LEADER_EPOCH,
        now_ms: int | None = None,
        assign_offsets: bool = True,
        origin: AppendOrigin | None = None,
        as_follower: bool = False,
    ) -> AppendInfo:
        """Validate, assign offsets (patching headers in `records`) and append.

        Three modes, each one walk over the batches before anything is written:
          - a leader's append of a client's batches (`origin` CLIENT, the default): offsets and
            the leader epoch patched in, every batch's records walked (`_walk_as_leader`);
          - a coordinator's (origin COORDINATOR: transaction markers): the same, its records
            trusted;
          - `assign_offsets=False` (a follower, the Raft log): the offsets already in the
            batches are kept; they must continue the log (`_walk_keeping_offsets`).
            `as_follower` (`append_as_follower`) also keeps every other byte.

        Batches with a producer id are checked against the producer state first (`origin`:
        CLIENT by default for a leader, REPLICATION for a follower; see producer_state.py). A
        retried request is answered with the offsets it was first written at, writing nothing.
        """
        assert not (as_follower and assign_offsets), "a follower keeps its leader's offsets"
        view = memoryview(records)
        if view.readonly and assign_offsets:
            view = memoryview(bytearray(view))
        end = len(view)
        if end == 0:
            raise KafkaError(errors.INVALID_RECORD, f"{self.topic}-{self.partition}: no batches")
        if end > self.config.segment_bytes and not as_follower:  # a follower takes it all
            raise KafkaError(
                errors.RECORD_LIST_TOO_LARGE,
                f"{end} bytes is above segment.bytes {self.config.segment_bytes}",
            )
        if now_ms is None:
            now_ms = self.clock.now_ms()
        if assign_offsets:
            client = origin is None or origin is AppendOrigin.CLIENT
            walked = self._walk_as_leader(view, leader_epoch, now_ms, client)
        else:
            walked = self._walk_keeping_offsets(view, now_ms, as_follower)
        first, next_offset, max_ts, max_ts_offset, count, infos, producers, epochs, stamped = walked
        producer_updates = None
        if producers:
            if origin is None:
                origin = AppendOrigin.CLIENT if assign_offsets else AppendOrigin.REPLICATION
            checked = self.producer_state.validate(view, producers, origin, now_ms)
            if isinstance(checked, Duplicate):
                return self._duplicate_info(checked, stamped)
            producer_updates = checked
        self._write(view, infos, first, next_offset, max_ts, now_ms, producer_updates, epochs)
        return _new_tuple(
            AppendInfo,
            (first, next_offset - 1, max_ts, max_ts_offset, now_ms if stamped else -1,
             len(infos), count, end, self.log_start_offset),
        )  # fmt: skip

    def _walk_as_leader(
        self, view: memoryview, leader_epoch: int, now_ms: int, client: bool
    ) -> _Walked:
        """A leader's walk: each batch checked (a `client`'s records too, as Kafka's LogValidator
        walks them: codec, control flag, record framing and count, offset deltas, keys if
        compacted), then its base offset, leader epoch and, if the topic stamps LogAppendTime,
        its timestamp patched in. The batches start at the log end offset."""
        config = self.config
        end = len(view)
        max_size = config.max_message_bytes
        where = self._where if client else ""
        max_uncompressed = config.max_uncompressed_bytes
        compacted = config.compact
        stamp = config.log_append_time
        first_offset = next_offset = self.log_end_offset
        max_ts, offset_of_max_ts = -1, -1
        infos: list[BatchInfo] = []
        producer_batches: list[ProducerBatch] = []
        records_count = 0
        pos = 0
        while pos < end:
            header = rb.check_batch(view, pos, end, max_size)
            if client:
                check_client_batch(
                    view, pos, header, where, compacted=compacted, max_uncompressed=max_uncompressed
                )
            size = header.batch_length + rb.LOG_OVERHEAD
            last = next_offset + header.last_offset_delta
            rb.patch_base_offset_and_epoch(view, header, pos, next_offset, leader_epoch)
            batch_ts = header.max_timestamp
            if stamp:
                rb.patch_log_append_time(view, pos, size, now_ms)
                batch_ts = now_ms
            if batch_ts > max_ts:
                max_ts, offset_of_max_ts = batch_ts, last
            infos.append(_new_tuple(BatchInfo, (pos, next_offset, last, batch_ts, size)))
            if header.producer_id >= 0:
                producer_batches.append(ProducerBatch(header, next_offset, batch_ts, pos))
            records_count += header.records_count
            next_offset = last + 1
            pos += size
        epochs = [(leader_epoch, first_offset)] if leader_epoch >= 0 else []
        return (
            first_offset,
            next_offset,
            max_ts,
            offset_of_max_ts,
            records_count,
            infos,
            producer_batches,
            epochs,
            stamp,
        )

    def _walk_keeping_offsets(self, view: memoryview, now_ms: int, as_follower: bool) -> _Walked:
        """A walk that keeps each batch's offsets (above the log end offset, increasing). A
        follower (`as_follower`) keeps every byte and takes what its leader took, whatever its
        own max.message.bytes; it notes each batch's leader epoch for its epoch cache. The
        bookkeeping at the end of the loop is `_walk_as_leader`'s, written out again rather
        than called once a batch on the produce path."""
        config = self.config
        end = len(view)
        max_size = end if as_follower else config.max_message_bytes
        stamp = config.log_append_time and not as_follower
        next_offset = self.log_end_offset
        first_offset = -1
        max_ts, offset_of_max_ts = -1, -1
        infos: list[BatchInfo] = []
        producer_batches: list[ProducerBatch] = []
        epochs: list[tuple[int, int]] = []  # a follower's (leader epoch, base offset) per batch
        records_count = 0
        pos = 0
        while pos < end:
            header = rb.check_batch(view, pos, end, max_size)
            size = header.batch_length + rb.LOG_OVERHEAD
            base = header.base_offset
            if base < next_offset:
                raise KafkaError(
                    errors.INVALID_RECORD,
                    f"batch base offset {base} is below the log end offset {next_offset}",
                )
            if first_offset < 0:
                first_offset = base
            if as_follower:
                epochs.append((header.partition_leader_epoch, base))
            last = base + header.last_offset_delta
            batch_ts = header.max_timestamp
            if stamp:
                rb.patch_log_append_time(view, pos, size, now_ms)
                batch_ts = now_ms
            if batch_ts > max_ts:
                max_ts, offset_of_max_ts = batch_ts, last
            infos.append(BatchInfo(pos, base, last, batch_ts, size))
            if header.producer_id >= 0:
                producer_batches.append(ProducerBatch(header, base, batch_ts, pos))
            records_count += header.records_count
            next_offset = last + 1
            pos += size
        return (
            first_offset,
            next_offset,
            max_ts,
            offset_of_max_ts,
            records_count,
            infos,
            producer_batches,
            epochs,
            stamp,
        )

    def _write(
        self,
        view: memoryview,
        infos: list[BatchInfo],
        first_offset: int,
        next_offset: int,
        max_ts: int,
        now_ms: int,
        producer_updates: StateUpdate | NextBatch | None,
        epochs: list[tuple[int, int]],
    ) -> None:
        """The I/O of an append, all or nothing: on any OSError (a full disk, EIO) the active
        segment is cut back to before the append, the log goes offline and KAFKA_STORAGE_ERROR
        is raised, so no later append can land after damage."""
        if self.offline:
            raise self._offline_error()
        segment = self.segments[-1]
        try:  # (`guarded`, written out: on every append; the check may read a file)
            if segment.size or segment.base_offset != first_offset:  # (else: a new segment)
                size, last_offset = len(view), next_offset - 1
                reason = segment.roll_reason(self.config, size, last_offset, max_ts, now_ms)
                if reason:
                    segment = self.roll(first_offset, reason, now_ms)
        except OSError as exc:
            raise self.fail(exc, "rolling a segment") from None
        mark, log_end_offset = segment.mark(), self.log_end_offset
        try:
            segment.append(view, infos)
            self.log_end_offset = next_offset
            if producer_updates:
                self.producer_state.apply(producer_updates, segment.txn_index)
            for epoch, base in epochs:  # a follower learns its leaders' epochs from the batches
                known = self.leader_epochs.entries  # (`latest_epoch`, inline: on every append)
                if not known or epoch > known[-1][0]:
                    self.leader_epochs.assign(epoch, base)
            if self.log_end_offset - self.recovery_point >= self.config.flush_messages:
                self.flush()
        except OSError as exc:
            segment.rollback(mark, first_offset)
            self.log_end_offset = log_end_offset
            raise self.fail(exc, f"appending offsets {first_offset}-{next_offset - 1}") from None

    # -- failures -----------------------------------------------------------------------------

    def guarded(self, doing: str, step: Callable[..., T], *args: Any) -> T:
        """Run one I/O step of this log; an OSError takes the log offline (`fail`)."""
        try:
            return step(*args)
        except OSError as exc:
            raise self.fail(exc, doing) from None

    def fail(self, exc: OSError, doing: str) -> KafkaError:
        """An I/O error: the log is offline from now on (its dir with it, when the log manager
        is told) and the caller raises KAFKA_STORAGE_ERROR."""
        first = not self.offline
        self.offline = True
        if first:
            self._changed()
        if first and self.on_failure is not None:
            self.on_failure(self, exc, doing)
        return self._offline_error(f"{doing}: {exc.strerror or exc}")

    def _offline_error(self, why: str = "") -> KafkaError:
        return KafkaError(
            errors.KAFKA_STORAGE_ERROR,
            f"{self.topic}-{self.partition} is offline: its log dir {os.path.dirname(self.directory)} "
            f"failed{' (' + why + ')' if why else ''}",
        )

    def append_as_follower(
        self, records: memoryview | bytearray, now_ms: int | None = None
    ) -> AppendInfo | None:
        """Append batches fetched from the leader as they are (Kafka's appendAsFollower): each
        CRC is checked, offsets, leader epochs and timestamps are kept, and the leader epoch of
        each batch goes into the leader-epoch cache. The producer state is updated without the
        checks a leader makes (AppendOrigin.REPLICATION), so idempotence and transactions carry
        on after a failover; transaction markers end their transactions here too (.txnindex,
        last stable offset). A partial batch at the end (a fetch may end in one) is left out.
        None when there is no whole batch."""
        view = memoryview(records)
        end, have = 0, len(view)
        while have - end >= rb.HEADER_SIZE:  # whole batches (as rb.iter_headers finds them)
            size = rb.peek_offset_and_size(view, end)[1]
            if size < rb.HEADER_SIZE or end + size > have:
                break
            end += size
        if end == 0:
            return None
        return self.append(
            view[:end],
            assign_offsets=False,
            origin=AppendOrigin.REPLICATION,
            now_ms=now_ms,
            as_follower=True,
        )

    def _duplicate_info(self, dup: Duplicate, stamped: bool) -> AppendInfo:
        """The answer to a retried request: where it was written the first time."""
        return AppendInfo(
            dup.first_offset,
            dup.last_offset,
            dup.timestamp,
            dup.last_offset,
            dup.timestamp if stamped else -1,
            0,
            0,
            0,
            self.log_start_offset,
        )

    def roll(
        self, base_offset: int | None = None, reason: str = "requested", now_ms: int | None = None
    ) -> LogSegment:
        """Start a new active segment at `base_offset` (default: the log end offset)."""
        base = self.log_end_offset if base_offset is None else max(base_offset, self.log_end_offset)
        old = self.segments[-1]
        if old.size == 0 and old.base_offset == base:
            return old
        keep_old = old.size > 0
        if keep_old:
            old.on_become_inactive()
            # The broker's roll flusher fsyncs the .log alone, off the loop; the .txnindex of
            # a segment with aborted transactions is fsynced here (recovery trusts the indexes
            # of segments below the recovery point, and a lost entry cannot be noticed).
            old.txn_index.flush()
        else:
            # An empty active segment is replaced rather than kept as an empty inactive one.
            self.segments.pop()
            self._bases.pop()
            old.delete()
        seg = LogSegment(
            self.directory,
            base,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            active=True,
            now_ms=self.clock.now_ms() if now_ms is None else now_ms,
        )
        seg.ensure_created()
        self.segments.append(seg)
        self._bases.append(base)
        # Recovery and truncation replay producer state from a snapshot at a segment base.
        previous = self._bases[-2] if len(self._bases) > 1 else base
        self.producer_state.take_snapshot(
            base, keep_from=min(self.recovery_point, previous), sync=False
        )
        log.debug("%s-%s rolled to segment %d (%s)", self.topic, self.partition, base, reason)
        if keep_old:
            # The old segment will not change again: it is fsynced now, as Kafka does at roll.
            self.roll_flusher(self, base)
        return seg

    # -- read ---------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FileSlice | None:
        """Whole batches starting with the one that holds `offset`, below `max_offset` (the
        high watermark, by default the log end offset), within `max_bytes` (but at least one
        batch when `min_one_batch`). None when there is nothing to read yet.

        OFFSET_OUT_OF_RANGE below the log start offset or above the log end offset;
        KAFKA_STORAGE_ERROR once the log is offline.
        """
        if self.offline:
            raise self._offline_error()
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise KafkaError(
                errors.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.topic}-{self.partition}",
            )
        end = self.log_end_offset
        upper = end if max_offset is None or max_offset > end else max_offset
        if offset >= upper:
            return None
        bases = self._bases
        last = len(self.segments) - 1
        # (a read from the active segment, the common case, needs no search)
        i = last if bases and offset >= bases[-1] else self._segment_index_for(offset)
        while i <= last:
            seg = self.segments[i]
            next_base = bases[i + 1] if i < last else end
            max_position = None
            if upper < next_base:
                bound = seg.translate_offset(upper)
                max_position = bound.position if bound is not None else None
            found = seg.read(offset, max_bytes, max_position, min_one_batch)
            if found is not None:
                return found[0]
            if upper <= next_base:
                return None
            if not min_one_batch and seg.translate_offset(offset) is not None:
                # The batch holding `offset` is here but larger than max_bytes: nothing fits.
                # (Going on to the next segment would skip it.)
                return None
            i += 1
        return None

    def read_bytes(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """`read`, copied into memory (tools and tests)."""
        found = self.read(offset, max_bytes, max_offset)
        return found.read() if found is not None else b""

    # -- offsets by time ----------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) as ListOffsets answers, for a time or one of the special values
        LATEST/EARLIEST/MAX_TIMESTAMP/EARLIEST_LOCAL; None when no record is that late."""
        if timestamp == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return self.log_start_offset, -1
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_offset()
        for seg in self.segments:
            if seg.largest_timestamp < timestamp and seg is not self.segments[-1]:
                continue
            start = self.log_start_offset
            while True:
                batch_offset = seg.find_offset_by_timestamp(timestamp, start)
                if batch_offset is None:
                    break
                found = self._record_at_or_after(batch_offset, seg, timestamp)
                if found is not None:
                    return found
                # The batch straddles the log start offset and its late records are all
                # below it: look on from the next batch.
                info = seg.translate_offset(batch_offset)
                assert info is not None
                start = info.last_offset + 1
        return None

    def _record_at_or_after(
        self, batch_offset: int, seg: LogSegment, timestamp: int
    ) -> tuple[int, int] | None:
        """Within the batch holding `batch_offset`, the first record at or above the log start
        offset with a timestamp >= t; None if there is none."""
        from gregor.protocol.records.records import read_batch_records

        info = seg.translate_offset(batch_offset)
        assert info is not None
        data = os.pread(seg.fd, info.size, info.position)
        header, recs = read_batch_records(data)
        for rec in recs:
            ts = header.max_timestamp if header.is_log_append_time else rec.timestamp
            if ts >= timestamp and rec.offset >= self.log_start_offset:
                return rec.offset, ts
        return None

    def _max_timestamp_offset(self) -> tuple[int, int] | None:
        from gregor.protocol.records.records import read_batch_records

        best: tuple[int, LogSegment] | None = None
        for seg in self.segments:
            ts = seg.max_timestamp_so_far()
            if seg.size and (best is None or ts.timestamp > best[0]):
                best = (ts.timestamp, seg)
        if best is None:
            return None
        seg = best[1]
        target = seg.max_timestamp_so_far()
        info = seg.translate_offset(target.offset)
        assert info is not None
        header, recs = read_batch_records(os.pread(seg.fd, info.size, info.position))
        if header.is_log_append_time:
            return header.last_offset, header.max_timestamp
        top = max(recs, key=lambda r: r.timestamp)
        return top.offset, top.timestamp

    # -- truncation and deletion --------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch that holds an offset >= `offset` (replication's truncation)."""
        if self.offline:
            raise self._offline_error()
        self.guarded(f"truncating to offset {offset}", self._truncate_to, offset)

    def _truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            # Nothing to remove, but an epoch may start at the log end (a leader that became
            # a follower before it wrote in its epoch): it goes, as in Kafka, or the follower
            # would keep naming it as its last fetched epoch.
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            return
        if offset <= self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        i = self._segment_index_for(offset)
        doomed = self.segments[i + 1 :]
        del self.segments[i + 1 :]
        del self._bases[i + 1 :]
        for seg in doomed:
            seg.delete()
        seg = self.segments[i]
        seg.offset_index.make_writable(self.config.segment_index_bytes)
        seg.time_index.make_writable(self.config.segment_index_bytes)
        seg.truncate_to(offset)
        self.log_end_offset = seg.read_next_offset() if seg.size else seg.base_offset
        # Truncation removes whole batches, so the log end can fall below a log start offset
        # that sat inside the removed batch; the start follows it down (as Kafka's
        # logStartOffset = min(targetOffset, logStartOffset)), keeping start <= end.
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self._after_truncation()
        self._changed()
        self.producer_state.truncate_and_reload(
            self.segments, self.log_start_offset, self.log_end_offset
        )
        self.producer_state.on_high_watermark(self.high_watermark)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        doomed = self.segments
        self.segments = []
        self._bases = []
        for seg in doomed:
            seg.delete()
        seg = LogSegment(
            self.directory,
            offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            active=True,
            now_ms=self.clock.now_ms(),
        )
        seg.ensure_created()
        self.segments.append(seg)
        self._bases.append(offset)
        self.log_start_offset = offset
        self.log_end_offset = offset
        self._changed()
        # Nothing of the old log is left, its epochs included (Kafka clears the cache here);
        # entries below `offset` would name offsets that no longer exist.
        self.leader_epochs.truncate_from_end(0)
        self._after_truncation()
        self.producer_state.truncate_fully_and_start_at(offset)
        # The log is empty at `offset`: so is everything below the high watermark (Kafka sets
        # it to the new log end). Keeping an older, lower one would put it below the log start.
        self.high_watermark = offset

    def _after_truncation(self) -> None:
        self.truncations += 1
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        if self.on_truncation is not None:
            self.on_truncation(self.active_segment.base_offset)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def increment_log_start_offset(self, offset: int) -> int:
        """Move the log start offset up (DeleteRecords), deleting segments wholly below it."""
        if offset > self.high_watermark:
            raise KafkaError(
                errors.OFFSET_OUT_OF_RANGE,
                f"cannot move the log start offset to {offset}, above the high watermark "
                f"{self.high_watermark}",
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._changed()
            self.leader_epochs.truncate_from_start(offset)
            self.producer_state.on_log_start_offset(offset)
            self.delete_segments_below_start()
        return self.log_start_offset

    def delete_segments_below_start(self) -> int:
        """Delete segments whose every offset is below the log start offset."""
        count = 0
        while len(self.segments) > 1 and self._bases[1] <= self.log_start_offset:
            count += 1
            self._delete_first_segments(1)
        return count

    def delete_oldest_segments(self, count: int) -> int:
        """Delete the `count` oldest segments (retention), rolling first if that would take the
        active one; the log start offset moves before any file goes."""
        count = min(count, len(self.segments))
        if count <= 0:
            return 0
        if count == len(self.segments):
            if self.active_segment.size == 0:
                count -= 1
            else:
                self.roll(reason="retention of the active segment")
        if count <= 0:
            return 0
        self._delete_first_segments(count)
        return count

    def _delete_first_segments(self, count: int) -> None:
        doomed = self.segments[:count]
        new_start = self._bases[count]
        self.log_start_offset = max(self.log_start_offset, new_start)
        self.high_watermark = max(self.high_watermark, self.log_start_offset)
        self._changed()
        self.recovery_point = max(self.recovery_point, self.log_start_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        self.producer_state.on_log_start_offset(self.log_start_offset)
        self.producer_state.on_high_watermark(self.high_watermark)
        del self.segments[:count]
        del self._bases[:count]
        for seg in doomed:
            seg.rename_to_deleted()
        self.file_deleter(doomed)
        self.producer_state.delete_snapshots_below(self._bases[0])

    # -- compaction ---------------------------------------------------------------------------

    def replace_segments(self, new: LogSegment, old: list[LogSegment], sync: bool = True) -> None:
        """Swap the cleaned segment `new` (files `<base>.*.cleaned`, complete and fsynced) in for
        the consecutive inactive segments `old`, which it covers from the first one's base.

        Crash-safe as Kafka's LocalLog.replaceSegments; loader.py finishes or undoes it:
          1. `.cleaned` -> `.swap`, the log file first. A crash before all are `.swap`
             leaves a `.cleaned` file at the new base, and recovery drops the whole attempt.
          2. The old segments are renamed `.deleted` and leave the segment list. After a crash
             recovery completes the swap: a `.swap` log covering [base, its next offset) wins
             over any live segment that starts in that range.
          3. `.swap` -> live names, the directory fsynced; the old files go to the deleter
             (readers holding their descriptors keep reading them until then).
        With `sync=False` the last fsync of the directory is the caller's, to run off this
        thread: until it, a crash finds the state of step 2 or 3, and recovery completes the
        swap from the `.swap` files, which the first fsync made durable.
        """
        first = self.segments.index(old[0])
        assert self.segments[first : first + len(old)] == old and first + len(old) < len(
            self.segments
        )
        assert new.base_offset == old[0].base_offset
        new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(self.directory)
        self.segments[first : first + len(old)] = [new]
        self._bases[first : first + len(old)] = [new.base_offset]
        for seg in old:
            seg.rename_to_deleted()
        new.change_file_suffixes(SWAP_SUFFIX, "")
        if sync:
            fsync_dir(self.directory)
        self.file_deleter(old)

    # -- durability ---------------------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the segments holding offsets from the recovery point up to `up_to_offset`
        (default: the log end offset), then move the recovery point there."""
        target = (
            self.log_end_offset if up_to_offset is None else min(up_to_offset, self.log_end_offset)
        )
        self.producer_state.sync_pending()  # a roll's producer snapshot, written without fsync
        if target <= self.recovery_point:
            return
        self.sync_creation()
        for seg in self.segments[self._segment_index_for(self.recovery_point) :]:
            if seg.base_offset >= target:
                break
            seg.flush()
        self.recovery_point = target
        self.last_flush_ms = self.clock.now_ms()

    def segments_to_flush(self, up_to_offset: int) -> list[LogSegment]:
        """The segments `flush(up_to_offset)` would fsync: for a flush on another thread, which
        fsyncs duplicates of their fds and then calls `mark_flushed` back on this one."""
        target = min(up_to_offset, self.log_end_offset)
        start = self._segment_index_for(self.recovery_point)
        return [s for s in self.segments[start:] if s.base_offset < target]

    def sync_creation(self) -> None:
        """fsync what making this log left unsynced (`creation_syncs`), once; a leader-epoch
        checkpoint still to be made is made first."""
        if self.creation_syncs:
            self.leader_epochs.make_file()
        for path in self.creation_syncs:
            fsync_if_exists(path)
        self.creation_syncs = []

    def mark_flushed(
        self, up_to_offset: int, truncations: int, creation_synced: list[str] | None = None
    ) -> None:
        """A background fsync of everything below `up_to_offset` is done. Ignored if the log was
        truncated since it began (`truncations` then differs), as those bytes may be new.
        `creation_synced`: the `creation_syncs` it fsynced first (not needed again)."""
        if creation_synced and creation_synced == self.creation_syncs:
            self.creation_syncs = []
        if truncations == self.truncations and not self.closed:
            self.recovery_point = max(self.recovery_point, min(up_to_offset, self.log_end_offset))
            self.last_flush_ms = self.clock.now_ms()

    def close(self, sync: bool = True) -> None:
        """Clean close: flush, stamp the active segment's final time-index entry, trim indexes.
        `sync=False` writes everything without an fsync: the caller syncs the whole file system
        at once, then calls `synced` (the log manager, closing thousands of logs)."""
        if self.closed:
            return
        self.leader_epochs.flush_pending()
        if sync:
            self.sync_creation()
            self.flush()
        # Producer state at the log end: a clean start reads it and scans nothing.
        if self.log_end_offset > self.log_start_offset or self.producer_state.producers:
            previous = self._bases[-2] if len(self._bases) > 1 else self._bases[-1]
            keep_from = min(self.recovery_point, previous)
            self.producer_state.take_snapshot(self.log_end_offset, keep_from=keep_from, sync=sync)
        # Unlike a roll, closing adds no time-index entry: the active segment's index stays what
        # a rebuild would make, and opening it again finds its largest timestamp with a short scan.
        for seg in self.segments:
            seg.offset_index.trim_to_valid_size()
            seg.time_index.trim_to_valid_size()
            seg.close()
        self.closed = True

    def synced(self) -> None:
        """Everything `close(sync=False)` wrote is on disk (the caller synced its file system)."""
        self.recovery_point = self.log_end_offset
        self.creation_syncs = []
        self.producer_state.unsynced.clear()

    def close_handles(self) -> None:
        for seg in self.segments:
            seg.close_handles()

    def delete(self) -> None:
        for seg in self.segments:
            seg.delete()
        for name in os.listdir(self.directory):
            os.unlink(os.path.join(self.directory, name))
        os.rmdir(self.directory)
        self.closed = True

    def largest_timestamps(self) -> list[TimestampOffset]:
        return [s.max_timestamp_so_far() for s in self.segments]

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self.segments)})"
        )
