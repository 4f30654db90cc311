"""Partitions this broker hosts, as leader or follower, and the replica manager that finds them.

A `Partition` is one replica of a partition on this broker: its log, and what the metadata
says of it (leader, leader epoch, partition epoch, replicas, ISR). The metadata image is the
only source of that state (`ReplicaManager.apply`): a new registration makes the partition
leader or follower, as Kafka's makeLeader / makeFollower do, and registrations no newer than
the partition epoch already known are skipped (an AlterPartition answer may bring it first).

Leader (Kafka's Partition.scala, sans I/O: every time is a `now_ms` argument):

  followers     one `ReplicaState` per other replica: its log end offset (LEO) as its last
                Fetch said, and when it was last caught up. A follower's Fetch offset is its
                LEO (`fetch_for_follower`). A new leader epoch resets them: LEOs unknown (-1)
                on a new leader, last caught up "now" for ISR members, 0 for the others.
  high water    HW = the smallest LEO among the leader and the "maximal" ISR (the committed
  mark          ISR plus a replica whose addition is in flight), and among replicas outside it
                that are caught up and may join (Kafka's shouldWaitForReplicaToJoinIsr). It
                only moves up, and not at all while the committed ISR is smaller than
                min(min.insync.replicas, replication factor) (Kafka 3.7+: a write then has
                fewer copies than asked, so consumers do not see it yet).
  ISR changes   shrink (`maybe_shrink_isr`, on a timer): ISR members other than the leader
                that are not caught up, i.e. whose LEO is not the leader's and who were last
                caught up more than replica.lag.time.max.ms ago. Expand (on a follower's
                Fetch): a replica outside the ISR whose LEO is at or past the HW and the start
                of the leader's epoch, and that is eligible (registered, unfenced, not
                shutting down, its Fetch's broker epoch the registered one, KIP-903). A change
                is an `IsrUpdate` handed to `submit` (an AlterPartition to the controller);
                one at a time per partition. Until the controller answers, the ISR used for
                everything is the committed one, except that an expansion already counts for
                the HW (stricter, so safe either way); a shrink counts for nothing until
                committed. `on_alter_partition_result` applies the answer: committed (new ISR
                and partition epoch); INELIGIBLE_REPLICA / OPERATION_NOT_ATTEMPTED: back to
                the committed state; FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, unknown
                topic, INVALID_REQUEST: stay pending until the metadata brings a new state;
                other errors: send again.
  acks=all      `append_as_leader` refuses NOT_ENOUGH_REPLICAS when the committed ISR is
                smaller than min.insync.replicas; after the append `acks_all_status` says when
                the HW has passed the batch (NONE; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR
                shrank below the minimum meanwhile), or NOT_LEADER_OR_FOLLOWER once this
                replica no longer leads in the epoch it appended in.
  divergence    a follower's Fetch names the epoch of its last batch (`last_fetched_epoch`,
                KIP-320); when our epoch history says that epoch ended before the fetch
                offset, or we never had it, the answer is `diverging_epoch` = (the largest
                epoch we had up to it, where that epoch ended), with no records, and the
                follower truncates there (follower.py).

Follower: no produce and no consumer reads (NOT_LEADER_OR_FOLLOWER); `append_as_follower`,
`truncate_to` and `truncate_fully_and_start_at` are the fetcher's (follower.py).

Transactions: a transaction marker (COMMIT or ABORT control batch) comes from the transaction
coordinator through `write_txn_marker`; the last stable offset (LSO) is the high watermark or
the first offset of the oldest open transaction, whichever is lower, and read_committed reads
stop there.

Waiting fetches register a callback with `watch`; appends, HW moves and leadership changes
call them. Waiting acks=all writes watch `commits` instead, called on all of these but the
leader's appends that leave the HW where it was (every produce is one: the writes waiting on a
partition are not checked again for each). No I/O and no event loop: the caller decides how to
wait.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import logging
import struct
import uuid
from collections.abc import Callable, Collection, Generator
from dataclasses import dataclass, field
from typing import Any

from gregor.metadata.cluster import BrokerLiveness
from gregor.metadata.image import NO_LEADER, PartitionRegistration
from gregor.protocol import errors
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import batch as rb
from gregor.protocol.records.records import CODEC_BY_NAME, build_control_batch, recompress
from gregor.protocol.records.validate import (
    check_client_records,
    check_single_batch,
    uncompressed_limit,
)
from gregor.security.replication_quotas import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    ReplicationQuota,
    unthrottled,
)
from gregor.storage.config import LONG_MAX, LogConfig
from gregor.storage.log import AppendInfo, Log
from gregor.storage.log_manager import LogManager
from gregor.storage.producer_state import AppendOrigin
from gregor.storage.segment import FileSlice

log = logging.getLogger("gregor.replication")

Watcher = Callable[[], None]
UNKNOWN_OFFSET = -1
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000
# The latest partition state changes a ReplicaManager lists per topic (`changed_since`).
CHANGES_KEPT = 1024
_LAST = 1 << 62  # an index after every other, to search (stamp, index) pairs by stamp
_code = errors.BY_NAME
FENCED_LEADER_EPOCH = _code["FENCED_LEADER_EPOCH"].code
UNKNOWN_LEADER_EPOCH = _code["UNKNOWN_LEADER_EPOCH"].code
NOT_ENOUGH_REPLICAS_AFTER_APPEND = _code["NOT_ENOUGH_REPLICAS_AFTER_APPEND"].code
# AlterPartition answers: the controller says nothing was changed (back to the committed ISR)...
_RESET = frozenset({_code["OPERATION_NOT_ATTEMPTED"].code, _code["INELIGIBLE_REPLICA"].code})
# ...or our state is stale: wait for the metadata to bring the partition's new state.
_AWAIT_METADATA = frozenset(
    {
        errors.UNKNOWN_TOPIC_OR_PARTITION,
        _code["UNKNOWN_TOPIC_ID"].code,
        FENCED_LEADER_EPOCH,
        _code["INVALID_UPDATE_VERSION"].code,
        errors.INVALID_REQUEST,
        _code["NEW_LEADER_ELECTED"].code,
    }
)


def _always_eligible(broker_id: int) -> BrokerLiveness:
    return BrokerLiveness(-1, True)


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one follower (Kafka's Replica/ReplicaState)."""

    broker_id: int
    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    # The leader's LEO at the follower's previous Fetch, and when that Fetch came.
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0
    # The latest time at which the follower had everything the leader had.
    last_caught_up_time_ms: int = 0
    broker_epoch: int | None = None  # of its last Fetch (v15+; -1 before)
    # While its session's Fetches find it at our log end with nothing new (replication/
    # fetch_watch.py), the session's watch: the two times above are at least its `fetch_ms`,
    # written here by `unbind` before anything else changes them.
    clock: Any = None

    def unbind(self) -> None:
        """Write the bound session's latest Fetch time into the times, and unbind."""
        clock = self.clock
        if clock is not None:
            self.clock = None
            t = clock.fetch_ms
            if t > self.last_caught_up_time_ms:
                self.last_caught_up_time_ms = t
            if t > self.last_fetch_time_ms:
                self.last_fetch_time_ms = t

    def caught_up_ms(self) -> int:
        """The latest time at which the follower had everything the leader had."""
        clock = self.clock
        if clock is not None and clock.fetch_ms > self.last_caught_up_time_ms:
            return int(clock.fetch_ms)
        return self.last_caught_up_time_ms

    def update_fetch_state(
        self,
        fetch_offset: int,
        log_start_offset: int,
        now_ms: int,
        leader_end_offset: int,
        broker_epoch: int,
    ) -> None:
        """A Fetch at `fetch_offset` while the leader's LEO was `leader_end_offset`. Caught up
        now if it asked for everything; caught up at the previous Fetch if it now asks for at
        least what the leader had then (so a follower always one small batch behind a busy
        leader still counts as in sync)."""
        if self.clock is not None:
            self.unbind()
        if fetch_offset >= leader_end_offset:
            if now_ms > self.last_caught_up_time_ms:
                self.last_caught_up_time_ms = now_ms
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            if self.last_fetch_time_ms > self.last_caught_up_time_ms:
                self.last_caught_up_time_ms = self.last_fetch_time_ms
        self.log_start_offset = log_start_offset
        self.log_end_offset = fetch_offset
        if leader_end_offset > self.last_fetch_leader_log_end_offset:
            self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms
        self.broker_epoch = broker_epoch

    def fetched_again(self, leader_end_offset: int, now_ms: int) -> None:
        """`update_fetch_state` of a Fetch at the leader's log end by a follower already there,
        with the same log start and broker epoch: only the times move."""
        if self.clock is not None:
            self.unbind()
        if now_ms > self.last_caught_up_time_ms:
            self.last_caught_up_time_ms = now_ms
        if leader_end_offset > self.last_fetch_leader_log_end_offset:
            self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return (
            leader_end_offset == self.log_end_offset or now_ms - self.caught_up_ms() <= max_lag_ms
        )

    def reset(self, now_ms: int, leader_end_offset: int, new_leader: bool, in_sync: bool) -> None:
        """A new leader epoch: an ISR member counts as caught up now, others not at all (so
        they do not hold the HW back). A new leader knows nothing of the follower's log."""
        self.clock = None
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        if new_leader:
            self.log_start_offset = UNKNOWN_OFFSET
            self.log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_time_ms = 0
            self.broker_epoch = None
        else:
            self.last_fetch_leader_log_end_offset = leader_end_offset
            self.last_fetch_time_ms = now_ms if in_sync else 0


@dataclass(frozen=True, slots=True)
class IsrUpdate:
    """An ISR change sent to the controller (AlterPartition) and not answered yet."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]
    broker_epochs: tuple[int, ...]  # one per member of new_isr; -1 when not known
    committed_isr: tuple[int, ...]
    adding: int | None  # the replica an expansion adds; None for a shrink

    @property
    def maximal_isr(self) -> frozenset[int]:
        members = set(self.committed_isr)
        if self.adding is not None:
            members.add(self.adding)
        return frozenset(members)


@dataclass(slots=True)
class FollowerRead:
    """A leader's answer to one partition of a follower's Fetch."""

    records: FileSlice | None
    diverging_epoch: tuple[int, int] | None  # (epoch, end offset): truncate, nothing appended
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int


class Watchers:
    """Callbacks called once each on the next event (the purgatory's watch key)."""

    __slots__ = ("watchers",)

    def __init__(self) -> None:
        self.watchers: list[Watcher] = []

    def watch(self, watcher: Watcher) -> None:
        self.watchers.append(watcher)

    def unwatch(self, watcher: Watcher) -> None:
        try:
            self.watchers.remove(watcher)
        except ValueError:
            pass

    def notify(self) -> None:
        if self.watchers:
            waiting, self.watchers = self.watchers, []
            for w in waiting:
                w()


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    node_id: int  # this broker
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)  # the committed ISR
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    fetches: Watchers = field(default_factory=Watchers)  # parked fetches: every event
    commits: Watchers = field(default_factory=Watchers)  # all events but HW-less appends
    followers: dict[int, ReplicaState] = field(default_factory=dict)  # leader only
    pending: IsrUpdate | None = None  # leader only: an AlterPartition in flight
    leader_epoch_start_offset: int | None = None  # leader only
    registration: PartitionRegistration | None = None  # the last one applied
    # What the metadata says of other brokers, and this broker's epoch (the ReplicaManager's).
    liveness: Callable[[int], BrokerLiveness] = _always_eligible
    local_broker_epoch: Callable[[], int] = lambda: -1
    # Where ISR changes go (the AlterPartition sender); None: kept pending (tests).
    submit: Callable[[Partition, IsrUpdate], None] | None = None
    # Told (old ISR size, new ISR size) when the controller commits an ISR change of ours.
    on_isr_committed: Callable[[int, int], None] | None = None
    # Told (topic, index) whenever leader_id, leader_epoch or isr is set (`_Announced`).
    on_state_change: Callable[[str, int], None] | None = None

    @functools.cached_property
    def name(self) -> str:
        """topic-index, as messages name the partition (built once: a produce reads it)."""
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    # -- becoming leader or follower ----------------------------------------------------------

    def make_leader(self, reg: PartitionRegistration, now_ms: int) -> bool:
        """This broker leads `reg` (Kafka's makeLeader). True if it did not lead before."""
        if reg.partition_epoch < self.partition_epoch:
            log.info("%s: skipping leadership in epoch %d: partition epoch %d is newer than %d",
                     self.name, reg.leader_epoch, self.partition_epoch, reg.partition_epoch)  # fmt: skip
            return False
        if (
            self.is_leader
            and reg.leader_epoch == self.leader_epoch
            and reg.partition_epoch == self.partition_epoch
        ):
            # The state an AlterPartition answer already brought (every change bumps the
            # partition epoch): applying it again would drop an ISR change in flight since.
            self.registration = reg
            self.maybe_increment_high_watermark(now_ms)
            return False
        new_leader = not self.is_leader
        new_epoch = reg.leader_epoch > self.leader_epoch
        if not new_leader and not new_epoch and self.on_isr_committed is not None:
            # An ISR change committed while we lead, brought by the metadata before (or
            # instead of) the AlterPartition answer: that answer will find nothing pending.
            self.on_isr_committed(len(self.isr), len(reg.isr))
        self.replicas = list(reg.replicas)
        self.isr = list(reg.isr)
        self.pending = None
        wanted = [b for b in reg.replicas if b != self.node_id]
        self.followers = {b: self.followers.get(b) or ReplicaState(b) for b in wanted}
        if new_epoch:
            start = self.log.log_end_offset
            # A follower may hold batches of a later epoch than any in our log (quick
            # successive elections); recording ours at the log end lets it find where to
            # truncate (Kafka does the same).
            self.log.leader_epochs.assign(reg.leader_epoch, start)
            # What we knew of the followers' logs holds only if no one else led since: led
            # again after epochs we never saw (cut off while another broker led), a follower
            # may have truncated under that leader, and its old log end would move our HW
            # over batches it no longer has (Kafka keeps it whenever the leader stays).
            forget = new_leader or reg.leader_epoch > self.leader_epoch + 1
            for state in self.followers.values():
                state.reset(now_ms, start, forget, state.broker_id in reg.isr)
            self.leader_epoch = reg.leader_epoch
            self.leader_epoch_start_offset = start
            log.info(
                "%s: leader in epoch %d from offset %d (partition epoch %d, high watermark %d, ISR %s)",
                self.name, reg.leader_epoch, start, reg.partition_epoch, self.log.high_watermark, list(reg.isr),
            )  # fmt: skip
        self.partition_epoch = reg.partition_epoch
        self.leader_id = self.node_id
        self.registration = reg
        self.maybe_increment_high_watermark(now_ms)
        self.notify()
        return new_leader

    def make_follower(self, reg: PartitionRegistration) -> bool:
        """Another broker (or none) leads `reg` (Kafka's makeFollower). True if the leader
        epoch is new: the fetcher must start again with it."""
        if reg.partition_epoch < self.partition_epoch:
            log.info("%s: skipping a follower state of epoch %d: partition epoch %d is newer than %d",
                     self.name, reg.leader_epoch, self.partition_epoch, reg.partition_epoch)  # fmt: skip
            return False
        new_epoch = reg.leader_epoch > self.leader_epoch
        was_leader = self.is_leader
        self.leader_id = reg.leader
        self.leader_epoch = reg.leader_epoch
        self.partition_epoch = reg.partition_epoch
        self.leader_epoch_start_offset = None
        self.replicas = list(reg.replicas)
        self.isr = list(reg.isr)
        self.followers = {}
        self.pending = None
        self.registration = reg
        if new_epoch:
            log.info(
                "%s: follower in epoch %d of leader %d from offset %d (high watermark %d)%s",
                self.name, reg.leader_epoch, reg.leader, self.log.log_end_offset, self.log.high_watermark,
                " (was the leader)" if was_leader else "",
            )  # fmt: skip
        self.notify()  # waiting produces and fetches find out
        return new_epoch

    def check_leader_epoch(self, current_leader_epoch: int, require_leader: bool = True) -> None:
        """A request's view of the leader epoch (-1: none given) against ours (Kafka's
        localLogWithEpochOrThrow): older FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH;
        then NOT_LEADER_OR_FOLLOWER off the leader."""
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise KafkaError(
                    FENCED_LEADER_EPOCH,
                    f"{self.name}: leader epoch {current_leader_epoch} is older than {self.leader_epoch}",
                )
            if current_leader_epoch > self.leader_epoch:
                raise KafkaError(
                    UNKNOWN_LEADER_EPOCH,
                    f"{self.name}: leader epoch {current_leader_epoch} is newer than ours ({self.leader_epoch})",
                )
        if require_leader and self.leader_id != self.node_id:  # (`is_leader`)
            raise self._not_leader()

    def _not_leader(self) -> KafkaError:
        return KafkaError(
            errors.NOT_LEADER_OR_FOLLOWER,
            f"broker {self.node_id} does not lead {self.name} (leader {self.leader_id}, epoch {self.leader_epoch})",
        )

    # -- the leader's writes ------------------------------------------------------------------

    def append_as_leader(
        self, records: memoryview | bytearray, acks: int, now_ms: int
    ) -> AppendInfo:
        if self.leader_id != self.node_id:  # (`is_leader`, inline)
            raise self._not_leader()
        if acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise KafkaError(
                errors.NOT_ENOUGH_REPLICAS,
                f"{self.name}: ISR {self.isr} is smaller than min.insync.replicas {self.min_insync_replicas}",
            )
        check_single_batch(records, self.name)
        config = self.log.config
        check_timestamps(records, config, now_ms, self.name)
        codec = config.compression_type
        if codec != "producer":
            # The topic fixes the codec: batches in another one are rewritten (the only path
            # where the broker decodes records on produce), once their records are known sound.
            check_client_records(
                records,
                self.name,
                max_size=config.max_message_bytes,
                compacted=config.compact,
                max_uncompressed=uncompressed_limit(config.max_message_bytes),
            )
            records = recompress(records, CODEC_BY_NAME[codec])
        # The log walks a client's records (records/validate.py), a compacted topic's keys too.
        info = self.log.append(records, leader_epoch=self.leader_epoch, now_ms=now_ms)
        self.after_leader_append(now_ms)
        return info

    def write_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        now_ms: int,
    ) -> AppendInfo:
        """Append the COMMIT or ABORT marker that ends `producer_id`'s transaction here (its
        epoch and the coordinator epoch are checked by the producer state)."""
        if not self.is_leader:
            raise self._not_leader()
        batch = build_control_batch(
            producer_id, producer_epoch, coordinator_epoch, committed, now_ms
        )
        info = self.log.append(
            batch, leader_epoch=self.leader_epoch, now_ms=now_ms, origin=AppendOrigin.COORDINATOR
        )
        self.after_leader_append(now_ms)
        return info

    def after_leader_append(self, now_ms: int) -> None:
        """After anything appended as leader: the HW may move (an ISR of one), and waiting
        fetches (followers read to the log end) wake; the writes waiting for the HW only if
        it moved."""
        if not self.maybe_increment_high_watermark(now_ms):
            self.fetches.notify()

    def acks_all_status(self, required_offset: int, leader_epoch: int) -> int | None:
        """For an acks=all write ending before `required_offset`, appended in `leader_epoch`:
        None while the HW is below it; else the error code to answer with (Kafka's
        checkEnoughReplicasReachOffset)."""
        if self.leader_id != self.node_id or self.leader_epoch != leader_epoch:
            return errors.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark < required_offset:
            return None
        if len(self.maximal_isr) < self.effective_min_isr:
            return NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return errors.NONE

    # -- the high watermark -------------------------------------------------------------------

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The committed ISR, plus a replica whose addition is in flight."""
        if self.pending is not None:
            return self.pending.maximal_isr
        return frozenset(self.isr)

    @property
    def effective_min_isr(self) -> int:
        n = len(self.replicas) or 1  # (min and max written out)
        return self.min_insync_replicas if self.min_insync_replicas < n else n

    @property
    def under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.effective_min_isr

    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        """Move the HW up to the smallest LEO that must hold it (module docstring); wake the
        watchers if it moved. Without `now_ms` only the maximal ISR counts (no replica is
        judged to be about to join)."""
        isr = self.isr
        if self.leader_id != self.node_id or (
            len(isr) < self.min_insync_replicas and len(isr) < (len(self.replicas) or 1)
        ):  # (`effective_min_isr`, inline)
            return False  # (not leading, or under min.insync.replicas: `under_min_isr`)
        leader_end = self.log.log_end_offset
        new_hw = leader_end
        followers = self.followers
        # (`maximal_isr`, without making a set: the committed ISR, unless a change is pending)
        maximal: Collection[int] = isr if self.pending is None else self.pending.maximal_isr
        for state in followers.values():
            if state.log_end_offset >= new_hw:
                continue
            if state.broker_id in maximal or (
                now_ms is not None
                and state.is_caught_up(leader_end, now_ms, self.replica_lag_time_max_ms)
                and self._isr_eligible(state)
            ):
                new_hw = state.log_end_offset
        if new_hw <= self.log.high_watermark:
            return False
        self.log.update_high_watermark(new_hw)
        self.notify()
        return True

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    # -- followers' fetches (leader side) -----------------------------------------------------

    def fetch_for_follower(
        self,
        replica_id: int,
        broker_epoch: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        current_leader_epoch: int,
        follower_log_start_offset: int,
        max_bytes: int,
        min_one_batch: bool,
        now_ms: int,
        update_fetch_state: bool = True,
    ) -> FollowerRead:
        """One partition of a follower's Fetch: records up to our log end, or the epoch where
        its log diverges from ours; its fetch offset becomes its LEO (Kafka's fetchRecords for
        a follower). Raises KafkaError for the partition's error code."""
        self.check_leader_epoch(current_leader_epoch)
        state = self.followers.get(replica_id)
        if state is None:
            raise KafkaError(
                UNKNOWN_LEADER_EPOCH
                if current_leader_epoch >= 0
                else errors.NOT_LEADER_OR_FOLLOWER,
                f"broker {replica_id} is not a replica of {self.name} (replicas {self.replicas}, "
                f"epoch {self.leader_epoch})",
            )
        log_ = self.log
        hw, start, end, lso = (
            log_.high_watermark,
            log_.log_start_offset,
            log_.log_end_offset,
            log_.last_stable_offset,
        )
        if last_fetched_epoch >= 0:
            epoch, epoch_end = log_.leader_epochs.end_offset_for(last_fetched_epoch, end)
            if epoch < 0 or epoch_end < 0:
                raise KafkaError(
                    errors.OFFSET_OUT_OF_RANGE,
                    f"{self.name}: no end offset for the last fetched epoch {last_fetched_epoch}",
                )
            if fetch_offset < start:
                raise KafkaError(
                    errors.OFFSET_OUT_OF_RANGE,
                    f"{self.name}: offset {fetch_offset} is below the log start offset {start}",
                )
            if epoch < last_fetched_epoch or epoch_end < fetch_offset:
                return FollowerRead(None, (epoch, epoch_end), hw, start, lso)
        records = log_.read(fetch_offset, max_bytes, end, min_one_batch)
        if update_fetch_state:
            self.update_follower_fetch_state(
                state, fetch_offset, follower_log_start_offset, now_ms, end, broker_epoch
            )
        return FollowerRead(records, None, hw, start, lso)

    def update_follower_fetch_state(
        self,
        state: ReplicaState,
        fetch_offset: int,
        log_start_offset: int,
        now_ms: int,
        leader_end_offset: int,
        broker_epoch: int,
    ) -> None:
        if broker_epoch != -1 and (known := self.liveness(state.broker_id).epoch) > broker_epoch:
            raise KafkaError(
                errors.NOT_LEADER_OR_FOLLOWER,
                f"{self.name}: a fetch of broker {state.broker_id} with stale broker epoch {broker_epoch} ({known})",
            )
        previous = state.log_end_offset
        state.update_fetch_state(
            fetch_offset, log_start_offset, now_ms, leader_end_offset, broker_epoch
        )
        self.maybe_expand_isr(state)
        if previous != state.log_end_offset:
            self.maybe_increment_high_watermark(now_ms)

    # -- ISR changes --------------------------------------------------------------------------

    def _isr_eligible(self, state: ReplicaState) -> bool:
        live = self.liveness(state.broker_id)
        fetched = state.broker_epoch
        return (
            live.eligible and fetched is not None and (fetched == -1 or live.epoch in (-1, fetched))
        )

    def maybe_expand_isr(self, state: ReplicaState) -> IsrUpdate | None:
        """Propose adding `state`'s replica once it has caught up to the HW and to the start of
        our epoch (so it cannot become leader missing committed data of a former epoch)."""
        if self.pending is not None or state.broker_id in self.isr or not self.is_leader:
            return None
        start = self.leader_epoch_start_offset
        end = state.log_end_offset
        if (
            start is None
            or end < self.log.high_watermark
            or end < start
            or not self._isr_eligible(state)
        ):
            return None
        members = set(self.isr) | {state.broker_id}
        return self._propose([b for b in self.replicas if b in members], adding=state.broker_id)

    def out_of_sync_replicas(self, now_ms: int) -> list[int]:
        if self.pending is not None or not self.is_leader:
            return []
        end = self.log.log_end_offset
        lag = self.replica_lag_time_max_ms
        out = []
        for b in self.isr:
            if b == self.node_id:
                continue
            state = self.followers.get(b)
            if state is None or not state.is_caught_up(end, now_ms, lag):
                out.append(b)
        return out

    def maybe_shrink_isr(self, now_ms: int) -> IsrUpdate | None:
        """Propose removing the ISR members that have not caught up within
        replica.lag.time.max.ms."""
        out = self.out_of_sync_replicas(now_ms)
        if not out:
            return None
        end = self.log.log_end_offset
        log.info(
            "%s: shrinking the ISR from %s: %s (leader LEO %d, high watermark %d)",
            self.name, self.isr,
            ", ".join(
                f"broker {b} at {self.followers[b].log_end_offset}, last caught up "
                f"{now_ms - self.followers[b].caught_up_ms()} ms ago"
                if b in self.followers else f"broker {b} unknown"
                for b in out
            ),
            end, self.log.high_watermark,
        )  # fmt: skip
        return self._propose([b for b in self.isr if b not in out], adding=None)

    def _propose(self, new_isr: list[int], adding: int | None) -> IsrUpdate:
        epochs = []
        for b in new_isr:
            if b == self.node_id:
                epochs.append(self.local_broker_epoch())
            else:
                fetched = self.followers[b].broker_epoch if b in self.followers else None
                epochs.append(-1 if fetched is None else fetched)
        update = IsrUpdate(
            self.topic_id,
            self.index,
            self.leader_epoch,
            self.partition_epoch,
            tuple(new_isr),
            tuple(epochs),
            tuple(self.isr),
            adding,
        )
        self.pending = update
        if adding is not None:
            log.info("%s: adding broker %d to the ISR %s", self.name, adding, self.isr)
        if self.submit is not None:
            self.submit(self, update)
        return update

    def on_alter_partition_result(
        self,
        update: IsrUpdate,
        error: int,
        leader_epoch: int = -1,
        partition_epoch: int = -1,
        isr: tuple[int, ...] | list[int] = (),
        now_ms: int = 0,
    ) -> bool:
        """The controller's answer to `update`; True if it should be sent again."""
        if self.pending is not update:
            return False  # our state moved on (new metadata): the answer is out of date
        if error != errors.NONE:
            if error in _RESET:
                self.pending = None
                log.info(
                    "%s: ISR change to %s refused (%s)",
                    self.name,
                    list(update.new_isr),
                    errors.name_of(error),
                )
                return False
            if error in _AWAIT_METADATA:
                log.info("%s: ISR change to %s refused (%s); waiting for metadata",
                         self.name, list(update.new_isr), errors.name_of(error))  # fmt: skip
                return False
            log.warning("%s: ISR change to %s failed (%s); sending it again",
                        self.name, list(update.new_isr), errors.name_of(error))  # fmt: skip
            return True
        if leader_epoch != self.leader_epoch or partition_epoch < self.partition_epoch:
            return False  # stale: the metadata will bring the partition's state
        if self.on_isr_committed is not None:
            self.on_isr_committed(len(self.isr), len(isr))
        self.isr = list(isr)
        self.partition_epoch = partition_epoch
        self.pending = None
        log.info("%s: ISR is now %s (partition epoch %d)%s", self.name, self.isr, partition_epoch,
                 " (under min ISR)" if self.under_min_isr else "")  # fmt: skip
        self.maybe_increment_high_watermark(now_ms)
        self.notify()
        return False

    # -- the follower's writes ----------------------------------------------------------------

    def append_as_follower(self, records: memoryview | bytearray, now_ms: int) -> AppendInfo | None:
        return self.log.append_as_follower(records, now_ms)

    # -- reads --------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        committed_only: bool = True,
        min_one_batch: bool = True,
        read_committed: bool = False,
    ) -> FileSlice | None:
        """Whole batches from `offset`: up to the LSO for read_committed, the high watermark
        for other consumers (`committed_only`), the log end for followers."""
        if read_committed:
            upper = self.log.last_stable_offset
        else:
            upper = self.log.high_watermark if committed_only else self.log.log_end_offset
        return self.log.read(offset, max_bytes, upper, min_one_batch)

    def watch(self, watcher: Watcher) -> None:
        self.fetches.watch(watcher)

    def unwatch(self, watcher: Watcher) -> None:
        self.fetches.unwatch(watcher)

    def notify(self) -> None:
        if self.fetches.watchers:  # (usually none: a call less each)
            self.fetches.notify()
        if self.commits.watchers:
            self.commits.notify()


class _Announced:
    """A Partition field whose every assignment calls the partition's `on_state_change` (once
    it has one) with its topic and index: what Metadata answers of it (leader, leader epoch,
    ISR) is kept encoded per topic until then (handlers/metadata_partitions.py). Setting is
    the only way to change them: the ISR list is replaced, never changed in place.

    It defines `__set__` only: a read finds the value in the instance's dict as for a plain
    attribute (a descriptor without `__get__` steps aside), so reads cost nothing more."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __set__(self, p: Partition, value: object) -> None:
        fields = p.__dict__
        fields[self.name] = value
        announce = fields.get("on_state_change")
        if announce is not None:
            announce(p.topic, p.index)


for _name in ("leader_id", "leader_epoch", "isr"):
    setattr(Partition, _name, _Announced(_name))


# What `check_timestamps` reads of a batch header: batchLength (at 8), attributes (21), the
# base and max timestamps (27, 35).
_TIMESTAMP_FIELDS = struct.Struct(">8xi9xh4xqq")
# Attributes with which the base timestamp is not a record's (it is the delete horizon).
_FIRST_NOT_A_TIMESTAMP = rb.DELETE_HORIZON_FLAG | rb.CONTROL_FLAG


def check_timestamps(
    records: memoryview | bytearray, config: LogConfig, now_ms: int, where: str
) -> None:
    """Refuse a CreateTime batch holding records outside [now - message.timestamp.before.max.ms,
    now + message.timestamp.after.max.ms] (KIP-937) as Kafka's LogValidator does: INVALID_TIMESTAMP
    naming each such record (KIP-467, `validate.RecordValidationError`). The header decides
    whether the records are read: its base timestamp (the first record's) and max timestamp
    bound them when they are in order, so a batch within bounds by its header passes unread
    under the default unbounded before.max.ms; with a lower bound set, or a header out of
    bounds, every record's timestamp is read (a second walk, and a second decompression)."""
    if config.log_append_time:
        return
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    low, high = now_ms - before, now_ms + after
    lower = before < now_ms  # a lower bound above 0: a record before the first may be out
    if not lower and after >= LONG_MAX - now_ms:
        return  # the defaults (before: unbounded) with after at its max: nothing to check
    refusal = None
    pos = 0
    while refusal is None and pos + rb.HEADER_SIZE <= len(records):
        length, attributes, first, last = _TIMESTAMP_FIELDS.unpack_from(records, pos)
        if low <= last <= high and (low <= first <= high or attributes & _FIRST_NOT_A_TIMESTAMP):
            pos += max(length + rb.LOG_OVERHEAD, rb.HEADER_SIZE)  # (the usual batch)
            continue
        if attributes & _FIRST_NOT_A_TIMESTAMP:
            first = last
        for ts in (first, last):
            if ts != rb.NO_TIMESTAMP and not low <= ts <= high:
                refusal = KafkaError(
                    errors.INVALID_TIMESTAMP,
                    f"Timestamp {ts} of message with offset {rb.read_header(records, pos).base_offset} "
                    f"is out of range. The timestamp should be within [{low}, {high}] "
                    f"(topic partition {where}).",
                )
        pos += max(length + rb.LOG_OVERHEAD, rb.HEADER_SIZE)
    if refusal is None and not lower:
        return
    check_client_records(
        records,
        where,
        max_size=config.max_message_bytes,
        compacted=config.compact,
        max_uncompressed=uncompressed_limit(config.max_message_bytes),
        timestamp_bounds=(low, high),
    )
    if refusal is not None:
        raise refusal  # a header naming a timestamp that none of its records has


@dataclass(frozen=True, slots=True)
class FollowerChange:
    """A partition this broker now follows in a new leader epoch (`leader` -1: nobody to
    fetch from), or no longer follows (`leader` None: it leads, or is gone)."""

    topic: str
    index: int
    leader: int | None
    leader_epoch: int


class ReplicaManager:
    """Every partition this broker hosts, created, changed and removed to match the metadata.

    `apply` is the one place partition state changes from the metadata; the partitions whose
    follower state changed are queued in `follower_changes` for the fetchers (fetcher I/O is
    the broker's). ISR changes go to `on_isr_update` (the AlterPartition sender)."""

    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        *,
        liveness: Callable[[int], BrokerLiveness] = _always_eligible,
        local_broker_epoch: Callable[[], int] = lambda: -1,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    ) -> None:
        self.node_id = node_id
        self.logs = logs
        self.liveness = liveness
        self.local_broker_epoch = local_broker_epoch
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.follower_changes: list[FollowerChange] = []
        self.on_isr_update: Callable[[Partition, IsrUpdate], None] | None = None
        self.on_follower_change: Callable[[], None] | None = None
        # Replication throttles (security/replication_quotas.py), set by the owner: the leader's
        # answers to followers' Fetches and this broker's replica fetchers.
        self.leader_quota: ReplicationQuota = unthrottled(LEADER_REPLICAS)
        self.follower_quota: ReplicationQuota = unthrottled(FOLLOWER_REPLICAS)
        # Moves whenever a partition is applied or removed (`stamp`, with the logs' changes).
        self.changes = 0
        self._change_seq = itertools.count(1)
        # Per topic, a value that moves whenever a hosted partition of it is added or removed,
        # or its leader, leader epoch or ISR set (`state_stamp`); the latest such changes,
        # (stamp, index) in stamp order, and the stamp up to which they are forgotten.
        self._topic_stamps: dict[str, int] = {}
        self._topic_changes: dict[str, list[tuple[int, int]]] = {}
        self._changes_floor: dict[str, int] = {}
        self.isr_shrinks = 0  # ISR changes of led partitions committed (Kafka's IsrShrinksPerSec)
        self.isr_expands = 0

    def stamp(self) -> tuple[int, int]:
        """A value that moves whenever a partition's state may have changed without an event
        on it: a partition applied or removed, a log's start moved or a log offline."""
        return self.changes, self.logs.changes

    def _count_isr_change(self, before: int, after: int) -> None:
        if after < before:
            self.isr_shrinks += 1
        elif after > before:
            self.isr_expands += 1

    def state_stamp(self, topic: str) -> int:
        """A value that moves whenever this broker's partitions of `topic` are added or
        removed, or one's leader, leader epoch or ISR is set; 0 before any was."""
        return self._topic_stamps.get(topic, 0)

    def changed_since(self, topic: str, stamp: int) -> list[int] | None:
        """The indexes of `topic`'s partitions whose state may have changed after `stamp` (a
        `state_stamp` of it), in no order, maybe repeated; None when that is no longer known
        (the oldest changes are forgotten, and all of a topic's when a partition is removed)."""
        if stamp < self._changes_floor.get(topic, 0):
            return None
        changes = self._topic_changes.get(topic, [])
        return [i for _, i in changes[bisect.bisect_right(changes, (stamp, _LAST)) :]]

    def _state_changed(self, topic: str, index: int) -> None:
        stamp = self._topic_stamps[topic] = next(self._change_seq)
        changes = self._topic_changes.setdefault(topic, [])
        changes.append((stamp, index))
        if len(changes) > CHANGES_KEPT:  # forget the older half
            half = len(changes) // 2
            self._changes_floor[topic] = changes[half - 1][0]
            del changes[:half]

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def leader(self, topic: str, index: int) -> Partition:
        """The partition, if this broker leads it: else UNKNOWN_TOPIC_OR_PARTITION (not
        hosted here) or NOT_LEADER_OR_FOLLOWER (a follower)."""
        p = self.partitions.get((topic, index))
        if p is None:
            raise KafkaError(
                errors.UNKNOWN_TOPIC_OR_PARTITION,
                f"This server does not host this topic-partition: {topic}-{index}",
            )
        if p.leader_id != p.node_id:  # (`is_leader`, inline: once a produced partition)
            raise p._not_leader()
        return p

    def leading(self) -> list[Partition]:
        return [p for p in self.partitions.values() if p.is_leader]

    def apply(
        self,
        topic: str,
        index: int,
        topic_id: uuid.UUID,
        reg: PartitionRegistration,
        config: LogConfig,
        min_insync_replicas: int,
        now_ms: int,
    ) -> Partition:
        """Host `topic`-`index` as `reg` says (this broker is among its replicas): create it
        if new, apply its configs, and become leader or follower when the registration
        changed."""
        self.changes = next(self._change_seq)
        p = self.partitions.get((topic, index))
        if p is None:
            log_ = self.logs.get_or_create(topic, index, config)
            log_.update_config(config)
            p = Partition(
                topic,
                index,
                topic_id,
                log_,
                self.node_id,
                min_insync_replicas=min_insync_replicas,
                replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                liveness=self.liveness,
                local_broker_epoch=self.local_broker_epoch,
                submit=self._submit,
                on_isr_committed=self._count_isr_change,
                on_state_change=self._state_changed,
            )
            self.partitions[(topic, index)] = p
            self._state_changed(topic, index)
        else:
            p.log.update_config(config)
            p.min_insync_replicas = min_insync_replicas  # a lower one may free the HW
            p.topic_id = topic_id
        if reg != p.registration:
            self._transition(p, reg, now_ms)
        else:
            p.maybe_increment_high_watermark(now_ms)
        return p

    def _transition(self, p: Partition, reg: PartitionRegistration, now_ms: int) -> None:
        was_follower = p.registration is not None and not p.is_leader
        if reg.leader == self.node_id:
            p.make_leader(reg, now_ms)
            if was_follower:
                self._follower_change(FollowerChange(p.topic, p.index, None, reg.leader_epoch))
        elif p.make_follower(reg) or not was_follower:
            self._follower_change(FollowerChange(p.topic, p.index, reg.leader, reg.leader_epoch))

    def _follower_change(self, change: FollowerChange) -> None:
        self.follower_changes.append(change)
        if self.on_follower_change is not None:
            self.on_follower_change()

    def take_follower_changes(self) -> list[FollowerChange]:
        changes, self.follower_changes = self.follower_changes, []
        return changes

    def _submit(self, p: Partition, update: IsrUpdate) -> None:
        if self.on_isr_update is not None:
            self.on_isr_update(p, update)

    def maybe_shrink_isr(self, now_ms: int) -> list[IsrUpdate]:
        """Every led partition's ISR shrink, if one is due (Kafka runs this every
        replica.lag.time.max.ms / 2)."""
        return [u for p in self.leading() if (u := p.maybe_shrink_isr(now_ms)) is not None]

    def maybe_shrink_isr_steps(self, now_ms: int) -> Generator[None, None, list[IsrUpdate]]:
        """`maybe_shrink_isr` as a step per led partition, for a timer that gives the loop a
        turn between slices (runtime/slicing.py): thousands of led partitions cost
        milliseconds in one piece. A partition no longer led when its step comes is passed."""
        updates = []
        for p in self.leading():
            if p.is_leader and (u := p.maybe_shrink_isr(now_ms)) is not None:
                updates.append(u)
            yield
        return updates

    def set_replica_lag_time_max_ms(self, value: int) -> None:
        self.replica_lag_time_max_ms = value
        for p in self.partitions.values():
            p.replica_lag_time_max_ms = value

    def remove(self, topic: str, index: int) -> None:
        self.changes = next(self._change_seq)
        p = self.partitions.pop((topic, index), None)
        self._state_changed(topic, index)
        # forget the topic's changes: a removal is mostly a deletion, of every partition
        self._changes_floor[topic] = self._topic_stamps[topic]
        self._topic_changes.pop(topic, None)
        if p is not None:
            p.leader_id = NO_LEADER
            p.notify()
            if p.registration is not None:
                self._follower_change(FollowerChange(topic, index, None, p.leader_epoch))
        self.logs.delete(topic, index)

    def describe(self) -> list[dict[str, Any]]:
        """Each partition's replication state (logs and tests)."""
        return [
            {
                "partition": p.name,
                "leader": p.leader_id,
                "leader_epoch": p.leader_epoch,
                "isr": list(p.isr),
                "high_watermark": p.log.high_watermark,
                "log_end_offset": p.log.log_end_offset,
            }
            for p in self.partitions.values()
        ]
