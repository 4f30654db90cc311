"""The group coordinator for the groups of one `__consumer_offsets` partition: the classic
rebalance protocol, static membership, committed offsets, and their expiry. Sans-I/O: no
sockets, no event loop, no clock (every call takes `now_ms`), no global randomness (member ids
come from the injected `random.Random`).

How it is driven (`coordinator/common/runtime.py` does this, under `coordinator/runtime.py`;
unit tests do it by hand):

    records, result = shard.join_group(request, now_ms)    # every operation: (records, result)
    append `records` to the partition, then shard.replay(r) for each
    for pending, response in shard.take_completions(): pending.complete(response)
    ...
    records = shard.poll(now_ms)          # timers: sessions, rebalances, expiry; same as above
    shard.next_deadline_ms()              # when to poll next

A result is either the answer or a `Pending` (JoinGroup waiting for the rebalance, SyncGroup
waiting for the leader); a pending request's answer comes out of `take_completions()` later.
Completions are taken only after the records of the same step are appended and replayed, so no
client hears of an assignment or a commit that a crash could still lose.

What is durable changes only in `replay` (and `replay_end_transaction`): committed offsets
(OffsetCommit records and their tombstones), pending transactional offsets, a group's persisted
generation -- its members, protocol and assignments
(GroupMetadataValue) -- and its deletion (a tombstone). In particular a group becomes Stable,
and its members get their assignments, when the leader's assignment record is replayed, and
loading after a restart is nothing but replaying every record. The rebalance in flight -- who
has rejoined, the member ids handed out with MEMBER_ID_REQUIRED, session deadlines, parked
requests, the generation being formed -- is soft state that no record describes, exactly the
state Kafka's classic coordinator keeps only in memory (it writes classic-group records without
replaying them); the operations change it, through `ClassicGroup.transition_to`, and a failover
loses it: members then get UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION and rejoin. While loading
(`loaded` is False) a GroupMetadataValue rebuilds its group; afterwards it confirms the live
group's generation.

Transactional offsets (TxnOffsetCommit): the same OffsetCommit records, written in a
transactional batch of the producer. Replayed, they are not committed offsets yet but pending
ones, kept per producer id (producer -> group -> partition), and OffsetFetch with require_stable
answers UNSTABLE_OFFSET_COMMIT for a partition that has some. The producer's COMMIT or ABORT
marker in this partition (`replay_end_transaction`, from the log when loading, from the runtime
right after the broker appended it otherwise) moves them into the committed offsets or drops
them. Every offset remembers the log offset of its record: a committed transaction's offset
replaces the committed one only if its record is the later of the two in the log (a plain
commit written after the transactional one, before the marker, wins), as Kafka decides. A
tombstone (OffsetDelete, DeleteGroups, a deleted topic) also drops the partition's pending
offsets; expiry spares a partition with pending offsets, and a group with an open transaction is
never deleted by expiry.

The rules follow Kafka's GroupMetadataManager and OffsetMetadataManager (classic groups) closely,
error for error; the comments say where and why they are what they are.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from gregor.coordinator.common.shard import ShardBase
from gregor.coordinator.group import codes
from gregor.coordinator.group.classic import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    ClassicGroup,
    GroupState,
    Member,
)
from gregor.coordinator.group.records import (
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberMetadata,
    OffsetAndMetadata,
    OffsetCommitRecord,
    Record,
)
from gregor.coordinator.group.results import (
    DescribedGroup,
    DescribedMember,
    FetchedOffset,
    JoinRequest,
    JoinResult,
    LeaveResult,
    ListedGroup,
    OffsetCommitRequest,
    OffsetFetchResult,
    PartitionErrors,
    SyncRequest,
    SyncResult,
    TxnOffsetCommitRequest,
)
from gregor.coordinator.group.timers import Timers
from gregor.replication.pending import Pending

log = logging.getLogger("gregor.coordinator.group")

# Kafka's GroupCoordinatorConfig.CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS: a new member that
# parks a JoinGroup and then vanishes is dropped after this long (it cannot heartbeat yet).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
EXPIRATION_KEY = ("expire-offsets",)
NO_PRODUCER_ID = -1

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class GroupConfig:
    """The broker configs the group coordinator obeys (Kafka's names in the comments)."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS


def _hb_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("heartbeat", group_id, member_id)


def _join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def _sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


@dataclass
class GroupStats:
    """Counts kept across the shards of a node (and their unloads), for its metrics."""

    rebalances: int = 0  # generations formed with members
    offset_commits: int = 0  # partitions' offsets accepted by OffsetCommit


class GroupCoordinatorShard(ShardBase[Record, GroupConfig]):
    def __init__(
        self,
        partition: int,
        config: GroupConfig,
        rng: random.Random,
        stats: GroupStats | None = None,
    ) -> None:
        super().__init__(partition, config)
        self.rng = rng
        self.stats = stats or GroupStats()
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets: dict[str, dict[TopicPartitionKey, OffsetAndMetadata]] = {}
        # Transactional offsets waiting for their transaction's marker: producer id -> group ->
        # partition. A group stays listed under its producer (maybe with no partition left, after
        # tombstones) until the marker, and `open_txns` is the same relation by group.
        self.pending_txn_offsets: dict[
            int, dict[str, dict[TopicPartitionKey, OffsetAndMetadata]]
        ] = {}
        self.open_txns: dict[str, set[int]] = {}
        self._completions: list[tuple[Pending, Any]] = []

    # -- effects --------------------------------------------------------------------------------

    def take_completions(self) -> list[tuple[Pending, Any]]:
        out, self._completions = self._completions, []
        return out

    def _complete(self, pending: Pending | None, value: Any) -> None:
        if pending is not None:
            self._completions.append((pending, value))

    def _new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.UUID(int=self.rng.getrandbits(128), version=4)}"

    # -- loading and replay ---------------------------------------------------------------------

    def replay(self, record: Record, offset: int = -1, producer_id: int = NO_PRODUCER_ID) -> None:
        """Apply one record of this partition: the only way durable state changes. `offset` is
        the record's place in the log; `producer_id` is its batch's producer when the batch is
        transactional (an offset then waits for the transaction's end)."""
        if isinstance(record, OffsetCommitRecord):
            self._replay_offset(record, offset, producer_id)
        else:
            self._replay_group(record)

    def _replay_offset(self, r: OffsetCommitRecord, offset: int, producer_id: int) -> None:
        gid, key = r.group_id, (r.topic, r.partition)
        if r.value is None:
            by_group = self.offsets.get(gid)
            if by_group is not None:
                by_group.pop(key, None)
                if not by_group:
                    del self.offsets[gid]
            for pid in self.open_txns.get(gid, ()):
                self.pending_txn_offsets[pid][gid].pop(key, None)
            return
        value = r.value if offset < 0 else replace(r.value, record_offset=offset)
        if producer_id == NO_PRODUCER_ID:
            self.offsets.setdefault(gid, {})[key] = value
        else:
            self.pending_txn_offsets.setdefault(producer_id, {}).setdefault(gid, {})[key] = value
            self.open_txns.setdefault(gid, set()).add(producer_id)
        self._ensure_group(gid, value.commit_timestamp_ms)

    def _ensure_group(self, group_id: str, now_ms: int) -> None:
        if group_id not in self.groups:
            # Offsets with no group: a "simple" group (standalone consumers and admin tools
            # commit with generation -1), Empty and with no protocol type, as in Kafka.
            self.groups[group_id] = ClassicGroup(group_id, now_ms)

    def replay_end_transaction(self, producer_id: int, committed: bool) -> None:
        """The producer's COMMIT (`committed`) or ABORT marker in this partition: its pending
        offsets become committed offsets, or are dropped."""
        by_group = self.pending_txn_offsets.pop(producer_id, None)
        if by_group is None:
            return
        moved = 0
        for gid, pending in by_group.items():
            producers = self.open_txns.get(gid)
            if producers is not None:
                producers.discard(producer_id)
                if not producers:
                    del self.open_txns[gid]
            if not committed or not pending:
                continue
            current = self.offsets.setdefault(gid, {})
            for key, value in pending.items():
                # The later record in the log wins: a plain commit written after the
                # transactional one (before the marker) stays.
                existing = current.get(key)
                if existing is None or value.record_offset > existing.record_offset:
                    current[key] = value
                    moved += 1
            self._ensure_group(gid, max(v.commit_timestamp_ms for v in pending.values()))
        log.debug(
            "partition %d: transaction of producer %d %s (%d offsets committed)",
            self.partition,
            producer_id,
            "committed" if committed else "aborted",
            moved,
        )

    def has_pending_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset of this group for this partition."""
        key = (topic, partition)
        return any(
            key in self.pending_txn_offsets[pid][group_id]
            for pid in self.open_txns.get(group_id, ())
        )

    def _replay_group(self, r: GroupMetadataRecord) -> None:
        group = self.groups.get(r.group_id)
        if r.value is None:
            if group is not None:
                self._forget_group(group)
            return
        if group is None or not self.loaded:
            self.groups[r.group_id] = ClassicGroup.from_record(r.group_id, r.value)
            return
        if (
            group.is_(COMPLETING_REBALANCE)
            and r.value.generation == group.generation_id
            and r.value.members
        ):
            # The leader's assignment is durable: the generation is complete.
            by_member = {m.member_id: m.assignment for m in r.value.members}
            for member in group.members.values():
                member.assignment = by_member.get(member.member_id, b"")
            now_ms = r.value.current_state_timestamp_ms
            group.transition_to(STABLE, now_ms)
            log.info(
                "group %s: generation %d is stable with %d members",
                group.group_id,
                group.generation_id,
                len(group.members),
            )
            self._propagate_assignment(group, codes.NONE, now_ms)

    def _forget_group(self, group: ClassicGroup) -> None:
        gid = group.group_id
        if group.state is not DEAD:
            group.transition_to(DEAD, group.current_state_timestamp_ms or 0)
        for member in group.members.values():
            self._complete(
                group.take_join(member),
                JoinResult.failed(codes.COORDINATOR_NOT_AVAILABLE, member.member_id),
            )
            self._complete(
                group.take_sync(member), SyncResult.failed(codes.COORDINATOR_NOT_AVAILABLE)
            )
            self.timers.cancel(_hb_key(gid, member.member_id))
        for mid in group.pending_members:
            self.timers.cancel(_hb_key(gid, mid))
        self.timers.cancel(_join_key(gid))
        self.timers.cancel(_sync_key(gid))
        del self.groups[gid]

    def on_loaded(self, now_ms: int) -> None:
        """Every record is replayed: members of loaded groups get a session from now, and the
        expiry task starts."""
        self.loaded = True
        for group in self.groups.values():
            for member in group.members.values():
                self._reschedule_heartbeat(group, member, now_ms)
        self.timers.schedule(
            EXPIRATION_KEY, now_ms + self.config.offsets_retention_check_interval_ms, self._expire
        )

    def unload(self) -> None:
        """This broker no longer coordinates the partition: answer everything parked."""
        for group in list(self.groups.values()):
            for member in group.members.values():
                self._complete(
                    group.take_join(member),
                    JoinResult.failed(codes.NOT_COORDINATOR, member.member_id),
                )
                self._complete(group.take_sync(member), SyncResult.failed(codes.NOT_COORDINATOR))
        self.groups.clear()
        self.offsets.clear()
        self.pending_txn_offsets.clear()
        self.open_txns.clear()
        self.timers = Timers()

    # -- timers ---------------------------------------------------------------------------------

    def _reschedule_heartbeat(
        self, group: ClassicGroup, member: Member, now_ms: int, timeout_ms: int | None = None
    ) -> None:
        gid, mid = group.group_id, member.member_id
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self.timers.schedule(
            _hb_key(gid, mid), now_ms + timeout, lambda t: self._expire_heartbeat(gid, mid, t)
        )

    def _expire_heartbeat(self, group_id: str, member_id: str, now_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return
        if member_id in group.pending_members:
            log.info(
                "group %s: pending member %s did not rejoin within its session; removed",
                group_id,
                member_id,
            )
            group.remove(member_id)
            if group.is_(PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group, now_ms)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("group %s: member %s missed its session timeout; removed", group_id, member_id)
        self._remove_member_and_update(group, member, "session timeout expired", now_ms)

    # -- JoinGroup ------------------------------------------------------------------------------

    def join_group(self, r: JoinRequest, now_ms: int) -> tuple[list[Record], JoinResult | Pending]:
        return self._done(self._join(r, now_ms))

    def _join(self, r: JoinRequest, now_ms: int) -> JoinResult | Pending:
        cfg = self.config
        if not r.group_id:
            return JoinResult.failed(codes.INVALID_GROUP_ID, r.member_id)
        if not cfg.min_session_timeout_ms <= r.session_timeout_ms <= cfg.max_session_timeout_ms:
            return JoinResult.failed(codes.INVALID_SESSION_TIMEOUT, r.member_id)
        unknown = r.member_id == ""
        group = self.groups.get(r.group_id)
        if group is None:
            if not unknown:
                return JoinResult.failed(codes.UNKNOWN_MEMBER_ID, r.member_id)
            group = self.groups[r.group_id] = ClassicGroup(r.group_id, now_ms)
        if not self._accept_joining_member(group, r.member_id):
            # Over group.max.size: the member is turned away (and, if it was one, removed).
            member = group.remove(r.member_id)
            if member is not None:
                self.timers.cancel(_hb_key(group.group_id, r.member_id))
                self._complete(
                    group.take_join(member), JoinResult.failed(codes.GROUP_MAX_SIZE_REACHED)
                )
            return JoinResult.failed(codes.GROUP_MAX_SIZE_REACHED)
        if unknown:
            return self._join_new_member(group, r, now_ms)
        return self._join_existing_member(group, r, now_ms)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.max_size
        if group.is_(EMPTY, DEAD):
            return True
        if group.is_(PREPARING_REBALANCE):
            # Members already rejoining count, so the last to rejoin of a group over the limit
            # (group.max.size lowered) are the ones turned away.
            member = group.members.get(member_id)
            return (
                member is not None and member.awaiting_join
            ) or group.awaiting_join_count < max_size
        return member_id in group.members or len(group.members) < max_size

    def _join_new_member(
        self, group: ClassicGroup, r: JoinRequest, now_ms: int
    ) -> JoinResult | Pending:
        if group.is_(DEAD):
            return JoinResult.failed(codes.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(r.protocol_type, {name for name, _ in r.protocols}):
            return JoinResult.failed(codes.INCONSISTENT_GROUP_PROTOCOL)
        if r.group_instance_id is not None:
            new_id = self._new_member_id(r.group_instance_id)
            existing = group.static_members.get(r.group_instance_id)
            if existing is not None:
                log.info(
                    "group %s: static member %s rejoins; %s replaces %s",
                    group.group_id,
                    r.group_instance_id,
                    new_id,
                    existing,
                )
                return self._update_static_member(group, r, existing, new_id, now_ms)
            return self._add_member_and_rebalance(group, r, new_id, now_ms)
        new_id = self._new_member_id(r.client_id)
        if r.require_known_member_id:
            # KIP-394: hand out the id and let the member come back with it, so a client that
            # times out and retries does not leave defunct members behind.
            group.pending_members.add(new_id)
            gid = group.group_id
            self.timers.schedule(
                _hb_key(gid, new_id),
                now_ms + r.session_timeout_ms,
                lambda t: self._expire_heartbeat(gid, new_id, t),
            )
            return JoinResult.failed(codes.MEMBER_ID_REQUIRED, new_id)
        return self._add_member_and_rebalance(group, r, new_id, now_ms)

    def _join_existing_member(
        self, group: ClassicGroup, r: JoinRequest, now_ms: int
    ) -> JoinResult | Pending:
        mid = r.member_id
        if group.is_(DEAD):
            return JoinResult.failed(codes.COORDINATOR_NOT_AVAILABLE, mid)
        if not group.supports_protocols(r.protocol_type, {name for name, _ in r.protocols}):
            return JoinResult.failed(codes.INCONSISTENT_GROUP_PROTOCOL, mid)
        if mid in group.pending_members:
            return self._add_member_and_rebalance(group, r, mid, now_ms)
        error = group.validate_member(mid, r.group_instance_id)
        if error:
            return JoinResult.failed(error, mid)
        member = group.members[mid]
        if group.is_(PREPARING_REBALANCE):
            return self._update_member_and_rebalance(group, member, r, "member rejoins", now_ms)
        if group.is_(COMPLETING_REBALANCE):
            if member.matches(r.protocols):
                # A retry of a JoinGroup whose answer was lost: the same answer again.
                return self._join_answer(group, member, members=group.leader_id == mid)
            return self._update_member_and_rebalance(
                group, member, r, "member changed its protocols", now_ms
            )
        if group.is_(STABLE):
            if group.leader_id == mid or not member.matches(r.protocols):
                # The leader rejoining asks for a rebalance (e.g. it saw new partitions).
                return self._update_member_and_rebalance(
                    group, member, r, "leader or changed member rejoins", now_ms
                )
            return self._join_answer(group, member, members=False)
        log.warning("group %s: member %s rejoins an %s group", group.group_id, mid, group.state)
        return JoinResult.failed(codes.UNKNOWN_MEMBER_ID, mid)

    def _join_answer(
        self,
        group: ClassicGroup,
        member: Member,
        members: bool,
        leader: str | None = None,
        skip: bool = False,
    ) -> JoinResult:
        return JoinResult(
            codes.NONE,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            leader if leader is not None else (group.leader_id or ""),
            skip,
            group.joined_members() if members else [],
        )

    def _add_member_and_rebalance(
        self, group: ClassicGroup, r: JoinRequest, member_id: str, now_ms: int
    ) -> Pending:
        member = Member(
            member_id,
            r.group_instance_id,
            r.client_id,
            r.client_host,
            r.rebalance_timeout_ms,
            r.session_timeout_ms,
            r.protocol_type,
            list(r.protocols),
            is_new=True,
        )
        if group.is_(PREPARING_REBALANCE) and group.previous_state is EMPTY:
            group.new_member_added = True
        pending = Pending(f"join {group.group_id}/{member_id}")
        group.add(member, pending)
        # A new member cannot heartbeat while its JoinGroup is parked; if it goes away, it is
        # dropped after the new-member timeout rather than its session.
        self._reschedule_heartbeat(group, member, now_ms, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(group, f"member {member_id} joins", now_ms)
        return pending

    def _update_member_and_rebalance(
        self, group: ClassicGroup, member: Member, r: JoinRequest, reason: str, now_ms: int
    ) -> Pending:
        pending = Pending(f"join {group.group_id}/{member.member_id}")
        previous = group.update_member(
            member, list(r.protocols), r.rebalance_timeout_ms, r.session_timeout_ms, pending
        )
        # A second JoinGroup while the first is parked: the first is answered, so a client that
        # gave up on it never blocks its connection behind it.
        self._complete(previous, JoinResult.failed(codes.REBALANCE_IN_PROGRESS, member.member_id))
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"{reason} ({member.member_id})", now_ms
        )
        return pending

    def _update_static_member(
        self, group: ClassicGroup, r: JoinRequest, old_id: str, new_id: str, now_ms: int
    ) -> JoinResult | Pending:
        assert r.group_instance_id is not None
        current_leader = group.leader_id or ""
        old, member = group.replace_static_member(r.group_instance_id, old_id, new_id)
        # Whatever the old incarnation had parked is fenced.
        self._complete(old.join, JoinResult.failed(codes.FENCED_INSTANCE_ID, old_id))
        self._complete(old.sync, SyncResult.failed(codes.FENCED_INSTANCE_ID))
        self.timers.cancel(_hb_key(group.group_id, old_id))
        self._reschedule_heartbeat(group, member, now_ms)
        pending = Pending(f"join {group.group_id}/{new_id}")
        group.update_member(
            member, list(r.protocols), r.rebalance_timeout_ms, r.session_timeout_ms, pending
        )
        if group.is_(STABLE):
            if group.protocol_name == group.select_protocol():
                # KIP-345: same protocols, so no rebalance. Persist the new member id; the member
                # gets the current generation and, by SyncGroup, its old assignment.
                self._records.append(
                    self._group_record(group, group.assignments(), group.current_state_timestamp_ms)
                )
                if r.supports_skip_assignment:
                    is_leader = group.leader_id == new_id
                    answer = self._join_answer(group, member, members=is_leader, skip=is_leader)
                else:
                    # The old leader id tells a restarted leader to act as a follower and not
                    # reassign.
                    answer = self._join_answer(group, member, members=False, leader=current_leader)
                self._complete(group.take_join(member), answer)
                return pending
            self._maybe_prepare_rebalance_or_complete_join(
                group, f"static member {new_id} changed protocols", now_ms
            )
        elif group.is_(COMPLETING_REBALANCE):
            # The leader may be assigning to the old id: start over.
            self._prepare_rebalance(
                group, f"static member {new_id} rejoined during CompletingRebalance", now_ms
            )
        else:
            self._maybe_complete_join_phase(group, now_ms)
        return pending

    # -- rebalancing ----------------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(
        self, group: ClassicGroup, reason: str, now_ms: int
    ) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason, now_ms)
        else:
            self._maybe_complete_join_phase(group, now_ms)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str, now_ms: int) -> None:
        if group.is_(COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
            self._propagate_assignment(group, codes.REBALANCE_IN_PROGRESS, now_ms)
        self._cancel_pending_sync(group)
        initial = group.is_(EMPTY)
        gid = group.group_id
        if initial:
            # A new group waits group.initial.rebalance.delay.ms for more members, extended by
            # the same delay while members keep arriving, up to the rebalance timeout.
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self.timers.schedule(
                _join_key(gid),
                now_ms + delay,
                lambda t: self._try_complete_initial_rebalance(gid, delay, remaining, t),
            )
        group.transition_to(PREPARING_REBALANCE, now_ms)
        log.info(
            "group %s: preparing to rebalance (was %s, generation %d): %s",
            gid,
            group.previous_state,
            group.generation_id,
            reason,
        )
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group, now_ms)
            else:
                self.timers.schedule(
                    _join_key(gid),
                    now_ms + group.rebalance_timeout_ms(),
                    lambda t: self._complete_join_of(gid, t),
                )

    def _try_complete_initial_rebalance(
        self, group_id: str, delay: int, remaining: int, now_ms: int
    ) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            new_delay = min(self.config.initial_rebalance_delay_ms, remaining)
            new_remaining = max(remaining - delay, 0)
            self.timers.schedule(
                _join_key(group_id),
                now_ms + new_delay,
                lambda t: self._try_complete_initial_rebalance(
                    group_id, new_delay, new_remaining, t
                ),
            )
        else:
            self._complete_join(group, now_ms)

    def _maybe_complete_join_phase(self, group: ClassicGroup, now_ms: int) -> None:
        if not group.is_(PREPARING_REBALANCE):
            return
        if group.previous_state is EMPTY:
            return  # the initial rebalance completes on its timer
        if group.has_all_members_joined():
            self._complete_join(group, now_ms)

    def _complete_join_of(self, group_id: str, now_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is not None:
            self._complete_join(group, now_ms)

    def _complete_join(self, group: ClassicGroup, now_ms: int) -> None:
        gid = group.group_id
        if not group.is_(PREPARING_REBALANCE):
            return
        self.timers.cancel(_join_key(gid))
        gone = [m for m in group.not_yet_rejoined() if m.group_instance_id is None]
        for m in gone:
            group.remove(m.member_id)
            self.timers.cancel(_hb_key(gid, m.member_id))
        if gone:
            log.info(
                "group %s: removed members that did not rejoin: %s",
                gid,
                [m.member_id for m in gone],
            )
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: wait on, until their
            # sessions expire.
            log.warning("group %s: no member rejoined; waiting another rebalance timeout", gid)
            self.timers.schedule(
                _join_key(gid),
                now_ms + group.rebalance_timeout_ms(),
                lambda t: self._complete_join_of(gid, t),
            )
            return
        group.init_next_generation(now_ms)
        if group.is_(EMPTY):
            log.info("group %s: generation %d is empty", gid, group.generation_id)
            self._records.append(self._group_record(group, {}, now_ms))
            return
        self.stats.rebalances += 1
        log.info(
            "group %s: generation %d formed with %d members, protocol %s, leader %s",
            gid,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for member in group.members.values():
            answer = self._join_answer(group, member, members=member.member_id == group.leader_id)
            self._complete(group.take_join(member), answer)
            self._reschedule_heartbeat(group, member, now_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        # Members that never send SyncGroup are removed after the rebalance timeout.
        generation = group.generation_id
        self.timers.schedule(
            _sync_key(gid),
            now_ms + group.rebalance_timeout_ms(),
            lambda t: self._expire_pending_sync(gid, generation, t),
        )

    def _expire_pending_sync(self, group_id: str, generation: int, now_ms: int) -> None:
        group = self.groups.get(group_id)
        if (
            group is None
            or group.generation_id != generation
            or not group.is_(COMPLETING_REBALANCE, STABLE)
        ):
            return
        if not group.pending_sync:
            return
        missing = sorted(group.pending_sync)
        for mid in missing:
            member = group.remove(mid)
            self.timers.cancel(_hb_key(group_id, mid))
            if member is not None:
                self._complete(group.take_sync(member), SyncResult.failed(codes.UNKNOWN_MEMBER_ID))
        self._prepare_rebalance(group, f"members {missing} sent no SyncGroup in time", now_ms)

    def _cancel_pending_sync(self, group: ClassicGroup) -> None:
        group.pending_sync.clear()
        self.timers.cancel(_sync_key(group.group_id))

    def _propagate_assignment(self, group: ClassicGroup, error: int, now_ms: int) -> None:
        ok = error == codes.NONE
        for member in group.members.values():
            pending = group.take_sync(member)
            if pending is not None:
                self._complete(
                    pending,
                    SyncResult(
                        error,
                        group.protocol_type if ok else None,
                        group.protocol_name if ok else None,
                        member.assignment,
                    ),
                )
                # Its session restarts now: it could not heartbeat while parked.
                self._reschedule_heartbeat(group, member, now_ms)

    def _remove_member_and_update(
        self, group: ClassicGroup, member: Member, reason: str, now_ms: int
    ) -> None:
        self._complete(group.take_join(member), JoinResult.failed(codes.UNKNOWN_MEMBER_ID))
        self._complete(group.take_sync(member), SyncResult.failed(codes.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self.timers.cancel(_hb_key(group.group_id, member.member_id))
        if group.is_(STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(
                group, f"{reason} ({member.member_id})", now_ms
            )
        elif group.is_(PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group, now_ms)

    def _group_record(
        self, group: ClassicGroup, assignment: dict[str, bytes], state_ts: int | None
    ) -> GroupMetadataRecord:
        return GroupMetadataRecord(
            group.group_id,
            GroupMetadataValue(
                protocol_type=group.protocol_type or "",
                generation=group.generation_id,
                protocol=group.protocol_name,
                leader=group.leader_id,
                current_state_timestamp_ms=state_ts if state_ts is not None else -1,
                members=[
                    MemberMetadata(
                        m.member_id,
                        m.group_instance_id,
                        m.client_id,
                        m.client_host,
                        m.rebalance_timeout_ms,
                        m.session_timeout_ms,
                        m.metadata(group.protocol_name),
                        assignment.get(m.member_id, b""),
                    )
                    for m in group.members.values()
                ],
            ),
        )

    # -- SyncGroup ------------------------------------------------------------------------------

    def sync_group(self, r: SyncRequest, now_ms: int) -> tuple[list[Record], SyncResult | Pending]:
        return self._done(self._sync(r, now_ms))

    def _sync(self, r: SyncRequest, now_ms: int) -> SyncResult | Pending:
        if not r.group_id:
            return SyncResult.failed(codes.INVALID_GROUP_ID)
        group = self.groups.get(r.group_id)
        if group is None or group.is_(EMPTY):
            return SyncResult.failed(codes.UNKNOWN_MEMBER_ID)
        if group.is_(DEAD):
            return SyncResult.failed(codes.COORDINATOR_NOT_AVAILABLE)
        error = group.validate_member(r.member_id, r.group_instance_id)
        if error:
            return SyncResult.failed(error)
        if r.generation_id != group.generation_id:
            return SyncResult.failed(codes.ILLEGAL_GENERATION)
        if _inconsistent(r.protocol_type, group.protocol_type) or _inconsistent(
            r.protocol_name, group.protocol_name
        ):
            return SyncResult.failed(codes.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(PREPARING_REBALANCE):
            return SyncResult.failed(codes.REBALANCE_IN_PROGRESS)
        member = group.members[r.member_id]
        if group.is_(STABLE):
            self._synced(group, r.member_id)
            return SyncResult(
                codes.NONE, group.protocol_type, group.protocol_name, member.assignment
            )
        # CompletingRebalance: park until the leader's assignment is written.
        pending = Pending(f"sync {group.group_id}/{r.member_id}")
        self._complete(member.sync, SyncResult.failed(codes.REBALANCE_IN_PROGRESS))
        member.sync = pending
        self._synced(group, r.member_id)
        if group.leader_id == r.member_id:
            missing = [mid for mid in group.members if mid not in r.assignments]
            if missing:
                log.warning("group %s: the leader assigned nothing to %s", group.group_id, missing)
            assignment = {mid: r.assignments.get(mid, b"") for mid in group.members}
            log.info(
                "group %s: assignment for generation %d received from leader %s",
                group.group_id,
                group.generation_id,
                r.member_id,
            )
            # The group becomes Stable when this record is replayed.
            self._records.append(self._group_record(group, assignment, now_ms))
        return pending

    def _synced(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self.timers.cancel(_sync_key(group.group_id))

    # -- Heartbeat ------------------------------------------------------------------------------

    def heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        now_ms: int,
    ) -> tuple[list[Record], int]:
        return self._done(self._heartbeat(group_id, generation_id, member_id, instance_id, now_ms))

    def _heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        now_ms: int,
    ) -> int:
        if not group_id:
            return codes.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return codes.UNKNOWN_MEMBER_ID
        if group.is_(DEAD):
            return codes.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, instance_id)
        if error:
            return error
        if generation_id != group.generation_id:
            return codes.ILLEGAL_GENERATION
        if group.is_(EMPTY):
            return codes.UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.members[member_id], now_ms)
        if group.is_(PREPARING_REBALANCE):
            return codes.REBALANCE_IN_PROGRESS
        return codes.NONE

    # -- LeaveGroup -----------------------------------------------------------------------------

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]], now_ms: int
    ) -> tuple[list[Record], LeaveResult]:
        return self._done(self._leave(group_id, members, now_ms))

    def _leave(
        self, group_id: str, members: list[tuple[str, str | None]], now_ms: int
    ) -> LeaveResult:
        if not group_id:
            return LeaveResult(codes.INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:
            return LeaveResult(codes.UNKNOWN_MEMBER_ID)
        if group.is_(DEAD):
            return LeaveResult(codes.COORDINATOR_NOT_AVAILABLE)
        out: list[tuple[str, str | None, int]] = []
        left = []
        for member_id, instance_id in members:
            if member_id == "":
                # An admin removes a static member by its instance id alone.
                existing = (
                    group.static_members.get(instance_id) if instance_id is not None else None
                )
                if existing is None:
                    out.append((member_id, instance_id, codes.UNKNOWN_MEMBER_ID))
                    continue
                self._leave_member(group, existing, now_ms)
            elif member_id in group.pending_members:
                group.remove(member_id)
                self.timers.cancel(_hb_key(group_id, member_id))
            else:
                error = group.validate_member(member_id, instance_id)
                if error:
                    out.append((member_id, instance_id, error))
                    continue
                self._leave_member(group, member_id, now_ms)
            out.append((member_id, instance_id, codes.NONE))
            left.append(member_id or instance_id)
        if left:
            log.info("group %s: members left: %s", group_id, left)
            if group.is_(STABLE, COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"members left: {left}", now_ms
                )
            elif group.is_(PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group, now_ms)
        return LeaveResult(codes.NONE, out)

    def _leave_member(self, group: ClassicGroup, member_id: str, now_ms: int) -> None:
        member = group.members[member_id]
        self.timers.cancel(_hb_key(group.group_id, member_id))
        self._complete(group.take_join(member), JoinResult.failed(codes.UNKNOWN_MEMBER_ID))
        self._complete(group.take_sync(member), SyncResult.failed(codes.UNKNOWN_MEMBER_ID))
        group.remove(member_id)

    # -- offsets --------------------------------------------------------------------------------

    def commit_offsets(
        self, r: OffsetCommitRequest, now_ms: int
    ) -> tuple[list[Record], PartitionErrors]:
        return self._done(self._commit(r, now_ms))

    def _commit(self, r: OffsetCommitRequest, now_ms: int) -> PartitionErrors:
        error = self._validate_commit(r, now_ms)
        if error:
            return PartitionErrors(error, [(t, p, error) for t, p, *_ in r.offsets])
        expire = now_ms + r.retention_time_ms if r.retention_time_ms >= 0 else -1
        out = []
        for topic, partition, offset, epoch, metadata in r.offsets:
            if metadata is not None and len(metadata) > self.config.offset_metadata_max_bytes:
                out.append((topic, partition, codes.OFFSET_METADATA_TOO_LARGE))
                continue
            value = OffsetAndMetadata(offset, epoch, metadata or "", now_ms, expire)
            self._records.append(OffsetCommitRecord(r.group_id, topic, partition, value))
            out.append((topic, partition, codes.NONE))
            self.stats.offset_commits += 1
        return PartitionErrors(codes.NONE, out)

    def _validate_commit(self, r: OffsetCommitRequest, now_ms: int) -> int:
        # The empty group id is a group like any other here, as in Kafka (old clients commit
        # to it); only the membership APIs, TxnOffsetCommit and OffsetDelete refuse it.
        group = self.groups.get(r.group_id)
        if group is None:
            if r.generation_id < 0:
                return codes.NONE  # a simple group, made when the commit is replayed
            return codes.GROUP_ID_NOT_FOUND if r.api_version >= 9 else codes.ILLEGAL_GENERATION
        if group.is_(DEAD):
            return codes.COORDINATOR_NOT_AVAILABLE
        if r.generation_id < 0 and group.is_(EMPTY):
            return codes.NONE  # admin tools and standalone consumers
        if r.generation_id >= 0 or r.member_id or r.group_instance_id is not None:
            error = group.validate_member(r.member_id, r.group_instance_id)
            if error:
                return error
            if r.generation_id != group.generation_id:
                return codes.ILLEGAL_GENERATION
        elif not group.is_(EMPTY):
            return codes.UNKNOWN_MEMBER_ID
        if group.is_(COMPLETING_REBALANCE):
            # The member knows the new generation but not its assignment yet.
            return codes.REBALANCE_IN_PROGRESS
        if group.is_(STABLE, PREPARING_REBALANCE):
            # A commit keeps the member's session alive, as a heartbeat does.
            self._reschedule_heartbeat(group, group.members[r.member_id], now_ms)
        return codes.NONE

    def txn_offset_commit(
        self, r: TxnOffsetCommitRequest, now_ms: int
    ) -> tuple[list[Record], PartitionErrors]:
        """TxnOffsetCommit: the records to append in ONE transactional batch of `r.producer_id`
        (the runtime does that), and the answer. Replayed, they are pending offsets."""
        return self._done(self._txn_commit(r, now_ms))

    def _txn_commit(self, r: TxnOffsetCommitRequest, now_ms: int) -> PartitionErrors:
        error = self._validate_txn_commit(r)
        if error:
            return PartitionErrors(error, [(t, p, error) for t, p, *_ in r.offsets])
        out = []
        for topic, partition, offset, epoch, metadata in r.offsets:
            if metadata is not None and len(metadata) > self.config.offset_metadata_max_bytes:
                out.append((topic, partition, codes.OFFSET_METADATA_TOO_LARGE))
                continue
            value = OffsetAndMetadata(offset, epoch, metadata or "", now_ms)
            self._records.append(OffsetCommitRecord(r.group_id, topic, partition, value))
            out.append((topic, partition, codes.NONE))
        return PartitionErrors(codes.NONE, out)

    def _validate_txn_commit(self, r: TxnOffsetCommitRequest) -> int:
        """Kafka's rules for a transactional commit to a classic group: those of OffsetCommit,
        except that a request without member fields (v0-2) is accepted whatever the group's
        state, CompletingRebalance is no reason to refuse, and the member's session is not
        touched. An unknown group with a generation is ILLEGAL_GENERATION at every version."""
        if not r.group_id:
            return codes.INVALID_GROUP_ID
        if r.producer_id < 0:
            # Kafka would write such a batch as a plain commit; a transactional commit without a
            # producer is a client bug, refused rather than committed outside any transaction.
            return codes.INVALID_PRODUCER_ID_MAPPING
        group = self.groups.get(r.group_id)
        if group is None:
            # Generation -1: a simple group, made when the records are replayed.
            return codes.NONE if r.generation_id < 0 else codes.ILLEGAL_GENERATION
        if group.is_(DEAD):
            return codes.COORDINATOR_NOT_AVAILABLE
        if r.generation_id < 0 and group.is_(EMPTY):
            return codes.NONE
        if r.generation_id >= 0 or r.member_id or r.group_instance_id is not None:
            error = group.validate_member(r.member_id, r.group_instance_id)
            if error:
                return error
            if r.generation_id != group.generation_id:
                return codes.ILLEGAL_GENERATION
        return codes.NONE

    def fetch_offsets(
        self,
        group_id: str,
        topics: list[tuple[str, list[int]]] | None,
        require_stable: bool = False,
    ) -> OffsetFetchResult:
        """Committed offsets (-1 where none is); every committed one when `topics` is None. With
        `require_stable`, a partition an open transaction has an offset for answers
        UNSTABLE_OFFSET_COMMIT (the client retries); without, its last committed offset."""
        group = self.groups.get(group_id)
        if group is not None and group.is_(DEAD):
            return OffsetFetchResult(codes.GROUP_ID_NOT_FOUND)
        committed = self.offsets.get(group_id, {})
        unstable = require_stable and group_id in self.open_txns
        if topics is None:
            # As Kafka: the committed partitions only (one with nothing but a pending offset is
            # not listed).
            wanted = sorted(committed)
        else:
            wanted = [
                (topic, partition) for topic, partitions in topics for partition in partitions
            ]
        out = []
        for topic, partition in wanted:
            if unstable and self.has_pending_offsets(group_id, topic, partition):
                out.append(
                    FetchedOffset(topic, partition, -1, -1, "", codes.UNSTABLE_OFFSET_COMMIT)
                )
                continue
            found = committed.get((topic, partition))
            if found is None:
                out.append(FetchedOffset(topic, partition, -1, -1, ""))
            else:
                out.append(
                    FetchedOffset(
                        topic, partition, found.offset, found.leader_epoch, found.metadata
                    )
                )
        return OffsetFetchResult(codes.NONE, out)

    def delete_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]]
    ) -> tuple[list[Record], PartitionErrors]:
        return self._done(self._delete_offsets(group_id, topics))

    def _delete_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]]
    ) -> PartitionErrors:
        if not group_id:
            return PartitionErrors(codes.INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return PartitionErrors(codes.GROUP_ID_NOT_FOUND)
        if not group.is_(EMPTY) and not group.uses_consumer_protocol():
            return PartitionErrors(codes.NON_EMPTY_GROUP)
        committed = self.offsets.get(group_id, {})
        out = []
        for topic, partitions in topics:
            subscribed = group.is_subscribed_to(topic)
            for partition in partitions:
                if subscribed:
                    out.append((topic, partition, codes.GROUP_SUBSCRIBED_TO_TOPIC))
                    continue
                if (topic, partition) in committed or self.has_pending_offsets(
                    group_id, topic, partition
                ):
                    # The tombstone drops the pending transactional offsets too.
                    self._records.append(OffsetCommitRecord(group_id, topic, partition, None))
                out.append((topic, partition, codes.NONE))
        return PartitionErrors(codes.NONE, out)

    def _expire(self, now_ms: int) -> None:
        """offsets.retention.minutes: expire offsets, then delete Empty groups left with none."""
        retention = self.config.offsets_retention_ms
        expired = 0
        for gid, group in list(self.groups.items()):
            committed = self.offsets.get(gid, {})
            all_expired = True
            base = _expiration_base(group)
            if base is None:
                all_expired = not committed
            else:
                for (topic, partition), o in committed.items():
                    if group.is_subscribed_to(topic):
                        all_expired = False
                        continue
                    if o.expire_timestamp_ms >= 0:
                        gone = now_ms >= o.expire_timestamp_ms
                    else:
                        gone = now_ms - base(o) >= retention
                    if gone and not self.has_pending_offsets(gid, topic, partition):
                        self._records.append(OffsetCommitRecord(gid, topic, partition, None))
                        expired += 1
                    else:
                        all_expired = False
            if (
                all_expired
                and group.is_(EMPTY)
                and not group.pending_members
                and gid not in self.open_txns
            ):
                # (A group with an open transaction stays, for the offsets its marker may commit.)
                log.info("group %s: empty with no offsets left; deleting it", gid)
                self._records.append(GroupMetadataRecord(gid, None))
        if expired:
            log.info("partition %d: %d committed offsets expired", self.partition, expired)
        self.timers.schedule(
            EXPIRATION_KEY, now_ms + self.config.offsets_retention_check_interval_ms, self._expire
        )

    def delete_topic_offsets(self, topics: set[str]) -> list[Record]:
        """Tombstones for every committed offset of topics that were deleted (Kafka's
        onPartitionsDeleted), to be appended like any operation's records."""
        doomed: set[tuple[str, str, int]] = set()
        for gid, committed in self.offsets.items():
            doomed.update((gid, t, p) for t, p in committed if t in topics)
        for by_group in self.pending_txn_offsets.values():
            for gid, pending in by_group.items():
                doomed.update((gid, t, p) for t, p in pending if t in topics)
        self._records += [OffsetCommitRecord(gid, t, p, None) for gid, t, p in sorted(doomed)]
        records, self._records = self._records, []
        return records

    # -- admin ----------------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> DescribedGroup | None:
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return None
        stable = group.is_(STABLE)
        return DescribedGroup(
            codes.NONE,
            group_id,
            str(group.state),
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            [
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(group.protocol_name) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in group.members.values()
            ],
        )

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> list[ListedGroup]:
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and "classic" not in wanted_types:
            return []
        return [
            ListedGroup(gid, g.protocol_type or "", str(g.state))
            for gid, g in self.groups.items()
            if not g.is_(DEAD) and (not wanted_states or str(g.state).lower() in wanted_states)
        ]

    def delete_groups(self, group_ids: list[str]) -> tuple[list[Record], dict[str, int]]:
        out = {}
        for gid in group_ids:
            group = self.groups.get(gid)
            if group is None or group.is_(DEAD):
                out[gid] = codes.GROUP_ID_NOT_FOUND
            elif not group.is_(EMPTY):
                out[gid] = codes.NON_EMPTY_GROUP
            else:
                committed = self.offsets.get(gid, {})
                pending: set[TopicPartitionKey] = set()
                for pid in self.open_txns.get(gid, ()):
                    # Pending transactional offsets go too (one tombstone per partition).
                    pending.update(
                        k for k in self.pending_txn_offsets[pid][gid] if k not in committed
                    )
                for topic, partition in [*committed, *sorted(pending)]:
                    self._records.append(OffsetCommitRecord(gid, topic, partition, None))
                self._records.append(GroupMetadataRecord(gid, None))
                out[gid] = codes.NONE
        return self._done(out)

    def group_state(self, group_id: str) -> GroupState | None:
        group = self.groups.get(group_id)
        return group.state if group is not None else None


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


def _expiration_base(group: ClassicGroup) -> Any:
    """How old an offset is, for offsets.retention.minutes (Kafka's OffsetExpirationCondition):
    a consumer group's offsets age from the moment it became Empty (never while it has members,
    except for topics it no longer subscribes to); a simple group's from their commit."""
    if group.protocol_type is None:
        return lambda o: o.commit_timestamp_ms
    if group.is_(EMPTY):
        since = group.current_state_timestamp_ms
        return lambda o: since if since is not None else o.commit_timestamp_ms
    if group.uses_consumer_protocol() and group.subscribed is not None and group.is_(STABLE):
        return lambda o: o.commit_timestamp_ms
    return None
