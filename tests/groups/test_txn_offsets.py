"""Transactional offset commits in the group coordinator core, without I/O: TxnOffsetCommit's
rules, pending offsets and require_stable, COMMIT/ABORT markers, the log-offset order between a
transactional commit and plain ones, reloads at every point of a transaction, and OffsetDelete,
DeleteGroups, deleted topics and expiry around pending offsets.

The harness keeps a log as the runtime writes it: every record with its offset and, for a
transactional batch, its producer id; markers take an offset too. A reload replays that log.
"""

from __future__ import annotations

import random

from core_harness import Harness, value
from test_core import assign_all, form_group

from gregor.coordinator.group import codes
from gregor.coordinator.group.records import (
    GroupMetadataRecord,
    OffsetCommitRecord,
    Record,
    decode,
    encode,
)
from gregor.coordinator.group.results import PartitionErrors, TxnOffsetCommitRequest
from gregor.coordinator.group.shard import NO_PRODUCER_ID, GroupConfig, GroupCoordinatorShard

G = "txn-group"
PID, OTHER = 1000, 2000
DAY = 24 * 3600 * 1000


class TxnHarness(Harness):
    def __init__(self, config: GroupConfig | None = None) -> None:
        super().__init__(config)
        # (offset, producer id, record) for records; (offset, producer id, committed) for markers
        self.entries: list[tuple[int, int, Record | bool]] = []

    def _append(self, records: list[Record], producer_id: int) -> None:
        for r in records:
            key, val = encode(r)
            again = decode(key, val)
            assert again == r
            self.log.append(again)
            offset = len(self.entries)
            self.entries.append((offset, producer_id, again))
            self.shard.replay(again, offset, producer_id)
        done = self.shard.take_completions()
        for pending, result in done:
            pending.complete(result)
        self.completed += done

    def _commit(self, records: list[Record]) -> None:
        self._append(records, NO_PRODUCER_ID)

    def txn_commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        producer_id: int = PID,
        *,
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
        metadata: str | None = "",
    ) -> PartitionErrors:
        r = TxnOffsetCommitRequest(
            group, producer_id, 0, generation, member_id, instance,
            [(t, p, o, 7, metadata) for (t, p), o in offsets.items()],
        )  # fmt: skip
        records, result = self.shard.txn_offset_commit(r, self.now)
        self._append(records, producer_id)
        self._settle()
        return result

    def marker(self, producer_id: int, committed: bool) -> None:
        self.entries.append((len(self.entries), producer_id, committed))
        self.shard.replay_end_transaction(producer_id, committed)

    def reload(self) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(0, self.config, random.Random(self.seed + 1))
        for offset, producer_id, entry in self.entries:
            if isinstance(entry, bool):
                shard.replay_end_transaction(producer_id, entry)
            else:
                shard.replay(entry, offset, producer_id)
        shard.on_loaded(self.now)
        self.shard = shard
        return shard

    def fetch(
        self, group: str, *partitions: tuple[str, int], stable: bool = True
    ) -> list[tuple[int, int]]:
        """(offset, error) per partition, asked with require_stable."""
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        res = self.shard.fetch_offsets(group, list(topics.items()), stable)
        assert res.error == codes.NONE
        return [(o.offset, o.error) for o in res.offsets]

    def tombstones(self) -> list[tuple[str, str, int]]:
        return [
            (e.group_id, e.topic, e.partition)
            for _, _, e in self.entries
            if isinstance(e, OffsetCommitRecord) and e.value is None
        ]


UNSTABLE = codes.UNSTABLE_OFFSET_COMMIT


def errors_of(res: PartitionErrors) -> list[int]:
    return [e for _, _, e in res.partitions]


# -- pending, committed, aborted --------------------------------------------------------------


def test_offsets_are_pending_until_the_commit_marker() -> None:
    h = TxnHarness()
    h.commit(G, {("t", 0): 5})
    res = h.txn_commit(G, {("t", 0): 10, ("t", 1): 11})
    assert res.error == codes.NONE and errors_of(res) == [0, 0]
    assert all(pid == PID for _, pid, e in h.entries[1:] if not isinstance(e, bool)), (
        "written in the txn batch"
    )
    assert h.committed(G) == {("t", 0): 5}, "nothing committed yet"
    assert h.fetch(G, ("t", 0), ("t", 1), ("t", 2)) == [(-1, UNSTABLE), (-1, UNSTABLE), (-1, 0)]
    assert h.fetch(G, ("t", 0), ("t", 1), stable=False) == [(5, 0), (-1, 0)], (
        "the last committed without require_stable"
    )
    # All partitions (null topics): the committed ones only, unstable where a txn holds one.
    res_all = h.shard.fetch_offsets(G, None, True)
    assert [(o.topic, o.partition, o.offset, o.error) for o in res_all.offsets] == [
        ("t", 0, -1, UNSTABLE)
    ]
    assert h.shard.has_pending_offsets(G, "t", 1) and not h.shard.has_pending_offsets(G, "t", 2)

    h.marker(PID, committed=True)
    assert h.committed(G) == {("t", 0): 10, ("t", 1): 11}
    assert h.fetch(G, ("t", 0), ("t", 1)) == [(10, 0), (11, 0)]
    fetched = h.shard.fetch_offsets(G, [("t", [0])]).offsets[0]
    assert (fetched.leader_epoch, fetched.metadata) == (7, "")
    assert h.shard.pending_txn_offsets == {} and h.shard.open_txns == {}


def test_abort_marker_drops_them_and_keeps_what_was_committed() -> None:
    h = TxnHarness()
    h.commit(G, {("t", 0): 5})
    h.txn_commit(G, {("t", 0): 10, ("t", 1): 11})
    h.marker(PID, committed=False)
    assert h.committed(G) == {("t", 0): 5}
    assert h.fetch(G, ("t", 0), ("t", 1)) == [(5, 0), (-1, 0)], "stable again"
    assert h.shard.open_txns == {}


def test_a_marker_ends_only_its_own_producers_transaction() -> None:
    h = TxnHarness()
    h.txn_commit(G, {("t", 0): 10})
    h.txn_commit(G, {("t", 1): 20}, producer_id=OTHER)
    h.marker(PID, committed=True)
    assert h.committed(G) == {("t", 0): 10}
    assert h.fetch(G, ("t", 0), ("t", 1)) == [(10, 0), (-1, UNSTABLE)]
    h.marker(OTHER, committed=True)
    assert h.committed(G) == {("t", 0): 10, ("t", 1): 20}
    h.marker(OTHER, committed=True)  # a marker with nothing pending changes nothing
    assert h.committed(G) == {("t", 0): 10, ("t", 1): 20}


def test_the_later_record_in_the_log_wins() -> None:
    h = TxnHarness()
    # A plain commit written after the transactional one, before the marker: it stays.
    h.txn_commit(G, {("t", 0): 10})
    h.commit(G, {("t", 0): 30})
    h.marker(PID, committed=True)
    assert h.committed(G) == {("t", 0): 30}
    # A plain commit written before: the transaction's offset replaces it.
    h.commit(G, {("t", 1): 40})
    h.txn_commit(G, {("t", 1): 12})
    h.marker(PID, committed=True)
    assert h.committed(G) == {("t", 0): 30, ("t", 1): 12}
    # The same outcome from the log alone.
    h.reload()
    assert h.committed(G) == {("t", 0): 30, ("t", 1): 12}


def test_reload_at_every_point_of_a_transaction() -> None:
    h = TxnHarness()
    h.commit(G, {("t", 0): 5})
    h.txn_commit(G, {("t", 0): 10})
    h.reload()
    assert h.committed(G) == {("t", 0): 5}, "pending after a restart, not committed"
    assert h.fetch(G, ("t", 0)) == [(-1, UNSTABLE)]
    h.marker(PID, committed=True)  # the re-sent marker
    assert h.committed(G) == {("t", 0): 10}
    h.reload()
    assert h.committed(G) == {("t", 0): 10} and h.shard.open_txns == {}
    h.txn_commit(G, {("t", 0): 20})
    h.marker(PID, committed=False)
    h.reload()
    assert h.committed(G) == {("t", 0): 10} and h.fetch(G, ("t", 0)) == [(10, 0)]


def test_a_transactional_commit_makes_a_simple_group() -> None:
    h = TxnHarness()
    h.txn_commit("solo", {("t", 0): 3})
    described = h.shard.describe_group("solo")
    assert described is not None and described.state == "Empty" and described.protocol_type == ""
    h.marker(PID, committed=True)
    h.reload()
    assert h.committed("solo") == {("t", 0): 3}
    assert h.shard.describe_group("solo") is not None


# -- validation -------------------------------------------------------------------------------


def test_member_fields_are_checked_against_the_group() -> None:
    h = TxnHarness()
    answers = form_group(h, 1, group=G)
    me = answers[0].member_id
    gen = answers[0].generation_id
    # CompletingRebalance does not refuse a transactional commit (OffsetCommit would).
    assert errors_of(h.txn_commit(G, {("t", 0): 1}, generation=gen, member_id=me)) == [0]
    assign_all(h, answers, group=G)
    assert errors_of(h.txn_commit(G, {("t", 0): 2}, generation=gen, member_id=me)) == [0]
    assert errors_of(h.txn_commit(G, {("t", 0): 3}, generation=gen + 1, member_id=me)) == [
        codes.ILLEGAL_GENERATION
    ]
    assert errors_of(h.txn_commit(G, {("t", 0): 3}, generation=gen, member_id="stranger")) == [
        codes.UNKNOWN_MEMBER_ID
    ]
    # v0-2 carry no member fields: accepted whatever the group's state.
    assert errors_of(h.txn_commit(G, {("t", 0): 4})) == [0]
    # A group nobody knows, with a generation.
    res = h.txn_commit("nobody", {("t", 0): 1}, generation=1, member_id="m")
    assert res.error == codes.ILLEGAL_GENERATION and errors_of(res) == [codes.ILLEGAL_GENERATION]
    assert "nobody" not in h.shard.groups
    h.marker(PID, committed=True)
    assert h.committed(G) == {("t", 0): 4}


def test_static_member_fencing() -> None:
    h = TxnHarness()
    [answer] = form_group(h, 1, group=G, instance="i-1")
    assign_all(h, [answer], group=G)
    gen, me = answer.generation_id, answer.member_id
    assert errors_of(
        h.txn_commit(G, {("t", 0): 1}, generation=gen, member_id=me, instance="i-1")
    ) == [0]
    assert errors_of(
        h.txn_commit(G, {("t", 0): 1}, generation=gen, member_id="old-id", instance="i-1")
    ) == [codes.FENCED_INSTANCE_ID]
    assert errors_of(
        h.txn_commit(G, {("t", 0): 1}, generation=gen, member_id=me, instance="i-2")
    ) == [codes.UNKNOWN_MEMBER_ID]


def test_request_errors() -> None:
    h = TxnHarness(GroupConfig(initial_rebalance_delay_ms=0, offset_metadata_max_bytes=10))
    res = h.txn_commit(G, {("t", 0): 1, ("t", 1): 2}, metadata="x" * 11)
    assert errors_of(res) == [codes.OFFSET_METADATA_TOO_LARGE] * 2 and not h.entries
    assert errors_of(h.txn_commit("", {("t", 0): 1})) == [codes.INVALID_GROUP_ID]
    assert errors_of(h.txn_commit(G, {("t", 0): 1}, producer_id=-1)) == [
        codes.INVALID_PRODUCER_ID_MAPPING
    ]
    assert not h.entries
    assert errors_of(h.txn_commit(G, {("t", 0): 1}, metadata=None)) == [0]


# -- deletion and expiry ----------------------------------------------------------------------


def test_offset_delete_drops_pending_offsets_too() -> None:
    h = TxnHarness()
    h.txn_commit(G, {("t", 0): 10, ("t", 1): 11})
    res = value(h.run(h.shard.delete_offsets(G, [("t", [0, 2])])))
    assert res.error == codes.NONE and errors_of(res) == [0, 0]
    assert h.tombstones() == [(G, "t", 0)], "a tombstone for the pending partition, none for t-2"
    assert h.fetch(G, ("t", 0), ("t", 1)) == [(-1, 0), (-1, UNSTABLE)]
    h.marker(PID, committed=True)
    assert h.committed(G) == {("t", 1): 11}, "the deleted partition is not resurrected"
    h.reload()
    assert h.committed(G) == {("t", 1): 11}


def test_delete_groups_removes_pending_offsets() -> None:
    h = TxnHarness()
    h.commit(G, {("t", 0): 5})
    h.txn_commit(G, {("t", 0): 10, ("t", 1): 11})
    assert h.run(h.shard.delete_groups([G])) == {G: codes.NONE}
    assert h.tombstones() == [(G, "t", 0), (G, "t", 1)], "one tombstone per partition"
    assert isinstance(h.entries[-1][2], GroupMetadataRecord) and h.entries[-1][2].value is None
    assert G not in h.shard.groups
    h.marker(PID, committed=True)
    assert h.committed(G) == {} and G not in h.shard.offsets
    h.reload()
    assert h.committed(G) == {} and G not in h.shard.groups


def test_expiry_spares_pending_offsets_and_their_group() -> None:
    h = TxnHarness(
        GroupConfig(
            initial_rebalance_delay_ms=0,
            offsets_retention_ms=DAY,
            offsets_retention_check_interval_ms=60_000,
        )
    )
    h.commit(G, {("t", 0): 5, ("t", 1): 6})
    h.txn_commit(G, {("t", 0): 10})
    h.txn_commit("only-pending", {("t", 0): 1}, producer_id=OTHER)
    h.advance(DAY + 120_000)
    assert h.committed(G) == {("t", 0): 5}, "t-1 expired; t-0 waits for its transaction"
    assert G in h.shard.groups and "only-pending" in h.shard.groups, (
        "groups with an open transaction stay"
    )
    h.marker(PID, committed=False)
    h.advance(120_000)
    assert h.committed(G) == {} and G not in h.shard.groups, "expired once the transaction ended"
    assert "only-pending" in h.shard.groups, "its own transaction is still open"
    # Committed long after it was written: it ages from its commit timestamp, so it goes at
    # the next expiry run, and its group with it.
    h.marker(OTHER, committed=True)
    assert h.committed("only-pending") == {("t", 0): 1}
    h.advance(120_000)
    assert "only-pending" not in h.shard.groups and h.committed("only-pending") == {}


def test_a_tombstone_empties_a_transaction_and_its_marker_still_closes_it() -> None:
    h = TxnHarness(
        GroupConfig(
            initial_rebalance_delay_ms=0,
            offsets_retention_ms=DAY,
            offsets_retention_check_interval_ms=60_000,
        )
    )
    h.txn_commit(G, {("t", 0): 10})
    value(h.run(h.shard.delete_offsets(G, [("t", [0])])))
    assert G in h.shard.open_txns and not h.shard.has_pending_offsets(G, "t", 0)
    h.marker(PID, committed=True)
    assert h.shard.open_txns == {} and h.committed(G) == {}
    h.advance(120_000)
    assert G not in h.shard.groups, "no open transaction left: the empty group is deleted"


def test_deleted_topics_take_their_pending_offsets() -> None:
    h = TxnHarness()
    h.commit(G, {("gone", 0): 1, ("kept", 0): 2})
    h.txn_commit(G, {("gone", 0): 10, ("gone", 1): 11, ("kept", 0): 12})
    h._commit(h.shard.delete_topic_offsets({"gone"}))
    assert sorted(h.tombstones()) == [(G, "gone", 0), (G, "gone", 1)]
    h.marker(PID, committed=True)
    assert h.committed(G) == {("kept", 0): 12}


def test_unload_forgets_pending_offsets() -> None:
    h = TxnHarness()
    h.txn_commit(G, {("t", 0): 10})
    h.shard.unload()
    assert h.shard.pending_txn_offsets == {} and h.shard.open_txns == {}
