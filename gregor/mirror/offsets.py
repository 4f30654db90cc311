"""Offset syncs and offset translation, the sans-I/O cores of MirrorMaker 2's
`OffsetSyncWriter`, `OffsetSyncStore`, `MirrorCheckpointTask` and `MirrorClient`.

A source partition and its mirror have different offsets (the target may hold older records,
transactions leave markers, compaction leaves gaps). The source task therefore writes sparse
*offset syncs* (upstream offset u was written at downstream offset d); the checkpoint task
translates each source group's committed offset through them and writes *checkpoints*; a
failing-over consumer reads the checkpoints (`offsets_from_checkpoints`).

Translation never skips a record: for a committed upstream offset g, take the latest sync
(u, d) with u <= g; the answer is d when g == u and d + 1 when g > u (the records between u
and g may or may not have reached the target, and only d + 1 is known to be after record u).
So a group that fails over rereads at most the records since the sync before its offset,
bounded by `offset.lag.max` while the source task keeps up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gregor.mirror.filters import NameFilter
from gregor.mirror.formats import Checkpoint, FormatError, OffsetSync
from gregor.mirror.policy import DefaultReplicationPolicy

TopicPartition = tuple[str, int]

OFFSET_LAG_MAX_DEFAULT = 100
MAX_OUTSTANDING_OFFSET_SYNCS = 10
SYNCS_PER_PARTITION = 64


# The source side: when to emit an offset sync.


@dataclass
class PartitionSyncState:
    """What the source task remembers of one partition to decide when a sync is due."""

    max_offset_lag: int
    previous_upstream_offset: int = -1
    previous_downstream_offset: int = -1
    last_sync_downstream_offset: int = -1

    def update(self, upstream_offset: int, downstream_offset: int) -> bool:
        """Record that `upstream_offset` was written at `downstream_offset`; True when a sync
        must go out now: the first record this lifetime; translation through the last sync
        (which answers its downstream offset + 1) would now lag by `offset.lag.max` or more;
        an upstream offset was skipped (compaction, transaction markers); or the downstream
        offset went backwards (the target topic was recreated or truncated)."""
        first = self.last_sync_downstream_offset == -1
        stale = downstream_offset - (self.last_sync_downstream_offset + 1) >= self.max_offset_lag
        skipped = upstream_offset - self.previous_upstream_offset != 1
        truncated = downstream_offset < self.previous_downstream_offset
        due = first or stale or skipped or truncated
        if due:
            self.last_sync_downstream_offset = downstream_offset
        self.previous_upstream_offset = upstream_offset
        self.previous_downstream_offset = downstream_offset
        return due


@dataclass
class OffsetSyncEmitter:
    """Decides which offset syncs a source task writes, and when.

    `record_written` is called for each record the target acknowledged. A sync that is due goes
    to *pending* (sent as soon as fewer than 10 are in flight); any other becomes the partition's
    *delayed* sync, promoted to pending at the task's periodic commit (`commit`) so that a quiet
    partition's last position is still synced. Pending and delayed hold one sync per partition,
    the latest.
    """

    max_offset_lag: int = OFFSET_LAG_MAX_DEFAULT
    max_outstanding: int = MAX_OUTSTANDING_OFFSET_SYNCS
    partitions: dict[TopicPartition, PartitionSyncState] = field(default_factory=dict)
    pending: dict[TopicPartition, OffsetSync] = field(default_factory=dict)
    delayed_partitions: set[TopicPartition] = field(default_factory=set)
    in_flight: int = 0

    def record_written(
        self, tp: TopicPartition, upstream_offset: int, downstream_offset: int
    ) -> bool:
        """Called for every record copied: cheap unless a sync is due (a delayed sync is the
        partition's latest position, built only when it is sent); True when one is."""
        state = self.partitions.get(tp)
        if state is None:
            state = self.partitions[tp] = PartitionSyncState(self.max_offset_lag)
        if state.update(upstream_offset, downstream_offset):
            self.delayed_partitions.discard(tp)
            # a partition already pending keeps its place in line
            self.pending[tp] = OffsetSync(tp[0], tp[1], upstream_offset, downstream_offset)
            return True
        self.delayed_partitions.add(tp)
        return False

    def run_written(
        self, tp: TopicPartition, upstream_offset: int, downstream_offset: int, count: int
    ) -> int:
        """The first records of a run of `count` written one after the other (upstream offsets
        `upstream_offset`, +1, ... at downstream offsets `downstream_offset`, +1, ...), up to
        and including the first that makes a sync due; returns how many it took. The caller
        sends what is pending, then passes the rest of the run. The same decisions as
        `record_written` for each record, in constant time: past a run's first record only
        the lag can make a sync due, every `offset.lag.max` + 1 records."""
        if self.record_written(tp, upstream_offset, downstream_offset) or count == 1:
            return 1
        state = self.partitions[tp]
        due = state.last_sync_downstream_offset + 1 + self.max_offset_lag
        taken = min(count, due - downstream_offset)  # the records before `due`
        state.previous_upstream_offset = upstream_offset + taken - 1
        state.previous_downstream_offset = downstream_offset + taken - 1
        if taken == count:
            return count
        self.record_written(tp, upstream_offset + taken, due)
        return taken + 1

    def _latest(self, tp: TopicPartition) -> OffsetSync:
        state = self.partitions[tp]
        return OffsetSync(
            tp[0], tp[1], state.previous_upstream_offset, state.previous_downstream_offset
        )

    @property
    def delayed(self) -> dict[TopicPartition, OffsetSync]:
        """The delayed syncs, one per partition."""
        return {tp: self._latest(tp) for tp in self.delayed_partitions}

    def commit(self) -> None:
        """The periodic commit: delayed syncs become pending."""
        for tp in self.delayed_partitions:
            self.pending[tp] = self._latest(tp)
        self.delayed_partitions.clear()

    def take_sendable(self) -> list[OffsetSync]:
        """Pending syncs to send now, oldest first, up to the in-flight limit; each must be
        acknowledged with `sync_completed` (success or failure) to free its slot."""
        out: list[OffsetSync] = []
        while self.pending and self.in_flight < self.max_outstanding:
            tp = next(iter(self.pending))
            out.append(self.pending.pop(tp))
            self.in_flight += 1
        return out

    def sync_completed(self) -> None:
        assert self.in_flight > 0, "a sync completed that was never sent"
        self.in_flight -= 1


# The target side: the store of syncs and translation.


def _recent_enough(newer: OffsetSync, older: OffsetSync, i: int, j: int) -> bool:
    """Invariant B between slots i < j: slot j is at most 2^j - 2^i offsets behind slot i."""
    return newer is older or newer.upstream_offset <= older.upstream_offset + (1 << j) - (1 << i)


def _spread_enough(newer: OffsetSync, older: OffsetSync, i: int) -> bool:
    """Invariant C between slot i and a later slot: at least 2^max(i-2, 0) offsets apart."""
    return newer is older or newer.upstream_offset >= older.upstream_offset + (1 << max(i - 2, 0))


class OffsetSyncStore:
    """The syncs of each source partition, as MirrorMaker 3.x keeps them: 64 slots, slot 0 the
    latest sync and slot k roughly 2^k offsets behind it, so memory is bounded while translation
    stays precise near the end of the topic (where live groups are) and coarse far behind.

    Invariants per partition, for slots i < j holding different syncs (checked by the tests):
    A: slot 0 is the latest sync read; B: slot i's upstream offset <= slot j's + 2^j - 2^i;
    C: slot i's upstream offset >= slot j's + 2^max(i-2, 0).

    `read_to_end` must be called once the syncs topic has been read to its end: until then no
    translation is offered (it could answer from stale syncs). With `must_read_to_end` (no
    checkpoints were found, so nothing earlier constrains us) only the last sync read before
    that point is kept, so translation never moves behind an offset answered before a restart.
    """

    def __init__(self, must_read_to_end: bool = True):
        self.must_read_to_end = must_read_to_end
        self.is_read_to_end = False
        self._syncs: dict[TopicPartition, list[OffsetSync]] = {}

    def read_to_end(self) -> None:
        self.is_read_to_end = True

    def syncs(self, tp: TopicPartition) -> list[OffsetSync]:
        return list(self._syncs.get(tp, ()))

    def add(self, sync: OffsetSync) -> None:
        """Take one sync read from the offset-syncs topic, in the topic's order."""
        tp = (sync.topic, sync.partition)
        slots = self._syncs.get(tp)
        only_last = not self.is_read_to_end and self.must_read_to_end
        if slots is None or only_last or sync.upstream_offset < slots[0].upstream_offset:
            # first sync, initial load, or the upstream partition was rewound: start over
            self._syncs[tp] = [sync] * SYNCS_PER_PARTITION
            return
        self._syncs[tp] = _insert(slots, sync)

    def translate_downstream(self, tp: TopicPartition, upstream_offset: int) -> int | None:
        """The downstream offset for a committed upstream offset: None when unknown (no syncs
        yet, or the topic not read to its end), -1 when the offset is older than every sync
        kept (too far behind to translate without skipping records)."""
        if not self.is_read_to_end:
            return None
        slots = self._syncs.get(tp)
        if slots is None:
            return None
        sync = next((s for s in slots if s.upstream_offset <= upstream_offset), slots[-1])
        if sync.upstream_offset > upstream_offset:
            return -1
        step = 0 if upstream_offset == sync.upstream_offset else 1
        return sync.downstream_offset + step


def _insert(old: list[OffsetSync], sync: OffsetSync) -> list[OffsetSync]:
    """A new slot array with `sync` in slot 0 and invariant B repaired down the slots, keeping
    as many distinct older syncs as the invariants allow (more distinct syncs, better answers).

    Walking k = 1..63: if slot k still satisfies B against the (new) slot k-1, every later slot
    does too and the walk stops. Otherwise slot k takes `candidate`: the oldest sync of the old
    array, scanned from the front, that is recent enough for slot k and spread enough from its
    neighbours; failing that, the newer candidate found earlier (first of all, `sync` itself).
    """
    slots = list(old)
    slots[0] = sync
    candidate = sync
    scan = 0  # index into `old` of the next sync that could become the candidate
    for k in range(1, SYNCS_PER_PARTITION):
        prev = slots[k - 1]
        while True:
            option = old[scan]
            recent = _recent_enough(prev, option, k - 1, k)
            apart_from_prev = _spread_enough(prev, option, k - 1)
            apart_from_next = k + 1 >= SYNCS_PER_PARTITION or _spread_enough(
                option, slots[k + 1], k
            )
            repeated = scan + 1 < SYNCS_PER_PARTITION and old[scan + 1] is option
            usable = recent and apart_from_prev and apart_from_next
            if usable:
                candidate = option
            # a repeated or too-close sync can never serve a later slot either: move past it
            skip = repeated or not apart_from_prev
            if usable or skip:
                scan += 1
            if not (skip and scan < k):
                break
        if _recent_enough(prev, slots[k], k - 1, k):
            break
        slots[k] = candidate
    return slots


# Checkpoints: translating a source group's offsets.


def rename_topic_partition(
    tp: TopicPartition, policy: DefaultReplicationPolicy, source_alias: str, target_alias: str
) -> TopicPartition:
    """A source partition's name on the target: `orders` -> `A.orders`, and a topic that came
    from the target in the first place back to its own name (`B.orders` -> `orders`)."""
    topic, partition = tp
    if policy.topic_source(topic) == target_alias:
        return policy.original_topic(topic), partition
    return policy.format_remote_topic(source_alias, topic), partition


def checkpoint_is_more_recent(new: Checkpoint, last: Checkpoint | None) -> bool:
    """Emit when there was none, when the source group rewound, or when the translated offset
    moved forward (checkpoints only go back when the group itself went back)."""
    if last is None:
        return True
    return (
        new.upstream_offset < last.upstream_offset or new.downstream_offset > last.downstream_offset
    )


def checkpoints_for_group(
    group: str,
    committed: Mapping[TopicPartition, tuple[int, str]],
    store: OffsetSyncStore,
    topics: NameFilter,
    policy: DefaultReplicationPolicy,
    source_alias: str,
    target_alias: str,
    previous: Mapping[TopicPartition, Checkpoint],
) -> dict[TopicPartition, Checkpoint]:
    """The checkpoints to emit for one source group from its committed (offset, metadata) per
    source partition; keyed by the partition's name on the target, like `previous`."""
    out: dict[TopicPartition, Checkpoint] = {}
    for tp, (offset, metadata) in committed.items():
        if not topics.accepts(tp[0]):
            continue
        downstream = store.translate_downstream(tp, offset)
        if downstream is None or downstream < 0:
            continue  # no syncs yet, or too far behind to translate safely
        renamed = rename_topic_partition(tp, policy, source_alias, target_alias)
        checkpoint = Checkpoint(group, renamed[0], renamed[1], offset, downstream, metadata)
        if checkpoint_is_more_recent(checkpoint, previous.get(renamed)):
            out[renamed] = checkpoint
    return out


def offsets_to_sync(
    converted: Mapping[TopicPartition, int],
    target_committed: Mapping[TopicPartition, int | None] | None,
) -> dict[TopicPartition, int]:
    """With `sync.group.offsets.enabled`: the offsets to commit to one target group that has
    no active members. `converted` is the group's latest checkpoints (downstream offsets);
    `target_committed` the group's offsets on the target, None when the group does not exist
    there. An offset the target group already reached or passed is left alone, so a consumer
    that ran in the target region is never moved back."""
    if target_committed is None:
        return dict(converted)
    out: dict[TopicPartition, int] = {}
    for tp, offset in converted.items():
        current = target_committed.get(tp)
        if current is None or current < offset:
            out[tp] = offset
    return out


def offsets_from_checkpoints(
    records: Iterable[tuple[bytes | None, bytes | None]], group: str
) -> dict[TopicPartition, tuple[int, str]]:
    """`translate_offsets`' core (RemoteClusterUtils.translateOffsets): the group's offsets on
    this cluster, from the records of `<remote alias>.checkpoints.internal` read from the
    start; the latest checkpoint per partition wins, and unreadable records are skipped."""
    out: dict[TopicPartition, tuple[int, str]] = {}
    for key, value in records:
        if key is None or value is None:
            continue
        try:
            checkpoint = Checkpoint.from_record(key, value)
        except FormatError:
            continue
        if checkpoint.group == group:
            tp = (checkpoint.topic, checkpoint.partition)
            out[tp] = (checkpoint.downstream_offset, checkpoint.metadata)
    return out
